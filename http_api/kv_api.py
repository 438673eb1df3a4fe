"""The HTTP layer's view of the key-value service (node.service.kv provides it)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol

from node.service.kv import Consistency, ScanPage
from node.service.lease_types import Fence
from node.service.load_limits import LoadLimits
from node.service.readiness import Readiness
from node.service.types import CompactionResult, Record, StoredValue
from node.state.alarm_commands import AlarmKind
from node.state.alarms import Alarm
from node.state.commands import Command, Txn
from node.state.producers import ProducerTag
from node.state.results import CommandResult


class SnapshotSource(Protocol):
    """A snapshot being read (node/snapshot/stream.py): its point and its chunks."""

    applied_index: int
    applied_offset: int
    transfer_id: str

    def next_chunk(self, timeout: float | None = None) -> bytes:
        """The next chunk, b"" at the end; queue.Empty after ``timeout``."""
        ...

    def cancel(self) -> None: ...


class KvReads(Protocol):
    """The key-value reads (http_api/routes_kv.py): the main process's service, or an
    HTTP worker's (node/service/worker_kv.py)."""

    async def get(
        self, key: bytes, consistency: Consistency = ..., min_version: int | None = None
    ) -> StoredValue: ...

    async def scan(
        self,
        prefix: bytes,
        start_after: bytes | None = None,
        limit: int = ...,
        consistency: Consistency = ...,
        min_version: int | None = None,
    ) -> ScanPage: ...


class KvWriteApi(Protocol):
    """The key-value writes (http_api/routes_writes.py): the main process's service,
    or an HTTP worker's, which has main propose the command it built
    (node/service/worker_kv.py)."""

    @property
    def max_value_bytes(self) -> int: ...

    @property
    def max_txn_ops(self) -> int: ...

    def check_key(self, key: bytes) -> None: ...

    def check_value(self, value: bytes) -> None: ...

    async def put(
        self,
        key: bytes,
        value: bytes,
        expected_version: int | None = None,
        producer: ProducerTag | None = None,
        *,
        lease: int | None = None,
        ttl: int | None = None,
        fence: Fence | None = None,
    ) -> CommandResult:
        """``lease``: attach the key to that lease; ``ttl``: grant a lease of ``ttl``
        seconds for this key alone (the result's value is its id, in decimal);
        ``fence``: write only while that lock is held with that token (else Fenced)."""
        ...

    async def delete(
        self,
        key: bytes,
        expected_version: int | None = None,
        producer: ProducerTag | None = None,
        *,
        fence: Fence | None = None,
    ) -> CommandResult: ...

    async def incr(
        self,
        key: bytes,
        by: int,
        producer: ProducerTag | None = None,
        *,
        fence: Fence | None = None,
    ) -> CommandResult: ...

    async def append(
        self,
        key: bytes,
        suffix: bytes,
        producer: ProducerTag | None = None,
        *,
        fence: Fence | None = None,
    ) -> CommandResult: ...

    async def txn(
        self, txn: Txn, producer: ProducerTag | None = None, *, fence: Fence | None = None
    ) -> CommandResult: ...


class KvWorkerApi(KvReads, KvWriteApi, Protocol):
    """What an HTTP worker serves itself (http_api/worker_app.py)."""


class KvApi(KvReads, KvWriteApi, Protocol):
    @property
    def load_limits(self) -> LoadLimits: ...

    async def load(self, keys: list[bytes], values: list[bytes]) -> CommandResult:
        """One chunk of a bulk load, as one command (its pairs checked already)."""
        ...

    async def init_producer(self, transactional_id: str | None) -> CommandResult: ...

    async def execute(self, command: Command) -> CommandResult: ...

    async def compact(self, force: bool = True) -> CompactionResult: ...

    def alarms(self) -> tuple[Alarm, ...]: ...

    async def raise_alarm(self, member: str, kind: AlarmKind, reason: str) -> tuple[Alarm, ...]: ...

    async def disarm_alarms(self, member: str | None, kind: AlarmKind) -> tuple[Alarm, ...]: ...

    @property
    def log_head(self) -> int: ...

    def complete_log_range(self, from_offset: int) -> AbstractContextManager[None]: ...

    def log_chunks(
        self, from_offset: int, to_offset: int | None, limit: int | None, chunk_bytes: int
    ) -> Iterator[bytes]: ...

    @property
    def applied_offset(self) -> int: ...

    @property
    def watch_keepalive(self) -> float: ...

    @property
    def stall_timeout(self) -> float:
        """Seconds a streamed answer may wait for its client to read."""
        ...

    def unreadable_reason(self) -> str | None: ...

    def changes(
        self,
        prefix: bytes,
        from_offset: int,
        to_offset: int,
        *,
        max_records: int = ...,
        max_bytes: int = ...,
    ) -> tuple[list[Record], int]: ...

    def open_snapshot_stream(
        self, transfer_id: str | None = None, after: bytes | None = None
    ) -> SnapshotSource:
        """Blocking: the state as a snapshot, streamed as it is read (or the rest of a
        cut transfer, after a key); end it with :meth:`end_snapshot_stream`."""
        ...

    def end_snapshot_stream(self, stream: Any) -> None:
        """Blocking: stop the stream; its view stays held a while for a resume."""
        ...

    def release_snapshot(self, transfer_id: str) -> bool:
        """Let go of a held view; False when none was held."""
        ...

    def status(self) -> dict[str, Any]: ...

    def ready(self) -> tuple[bool, str]: ...

    def readiness(self, exclude: Iterable[str] = ()) -> Readiness:
        """The readiness checks but ``exclude``d ones (an unknown name: InvalidRequest)."""
        ...

    def members(self) -> list[dict[str, str]]: ...

    def checkpoints(self) -> list[tuple[str, bytes, int]]: ...

    async def add_member(self, node_id: str, raft_address: str, url: str) -> dict[str, Any]: ...

    async def remove_member(self, node_id: str) -> dict[str, Any]: ...

    async def set_member_url(self, node_id: str, url: str) -> dict[str, Any]: ...
