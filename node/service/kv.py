"""The key-value service: what a client can ask of one node.

It validates requests before they reach the log (bad input never costs a
raft round), proposes writes through a :class:`ConsensusLog`, turns command
results into return values or :mod:`node.errors` exceptions, and serves reads
from the local LMDB at the requested consistency level:

- ``linearizable``: wait for a read barrier (one barrier serves every read
  that arrived before it was proposed), then read locally;
- ``leader``: read locally if this node believes it leads (may be stale
  during a partition: a deposed leader does not know it yet);
- ``stale``: read locally, whatever this node has applied;
- ``min_version=N`` with any level but linearizable: first wait, bounded,
  until this node has applied offset N (read-your-writes from any replica).

A stalled node (its state is known to miss entries) serves no reads at all.
"""

from __future__ import annotations

import asyncio
import enum
import re
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from node.errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    KeyNotFound,
    LimitReached,
    NodeNotReady,
    NotLeader,
    TransferExpired,
)
from node.keyspace import CHECKPOINTS_PREFIX, is_reserved
from node.service.alarms import current_alarms, disarm_alarms, raise_for
from node.service.kv_writes import KvWrites, result_error
from node.service.load_limits import LoadLimits
from node.service.pace import Pace
from node.service.readiness import DEFAULT_MIN_FREE_BYTES, Readiness, disk_problem, run_checks
from node.snapshot.held import DEFAULT_HOLD_SECONDS, HeldViews
from node.snapshot.stream import SnapshotStream
from node.state.alarm_commands import AlarmKind
from node.state.alarms import Alarm
from node.state.commands import (
    MAX_TXN_OPS,
    Command,
    ExpireProducers,
    InitProducer,
)
from node.state.leases import DEFAULT_MAX_LEASE_TTL, DEFAULT_MAX_LEASES
from node.state.load_command import Load
from node.state.producers import (
    DEFAULT_EXPIRY_MS,
    DEFAULT_MAX_PRODUCERS,
    DEFAULT_SWEEP_SLICE,
    transactional_key,
)
from node.state.results import CommandResult, ResultCode
from node.storage.commit_log import CommitLog
from node.storage.compaction import CompactionResult
from node.storage.compactor import Compactor
from node.storage.lmdb_store import LmdbStore, ReadView, StoredValue
from node.storage.log_feed import encoded_records
from node.storage.record import Record

MAX_SCAN_LIMIT = 10_000
DEFAULT_SCAN_LIMIT = 100
DEFAULT_MAX_PAGE_BYTES = 4 * 1024 * 1024
"""A scan page ends before its keys and values pass this (the first item always comes)."""
DEFAULT_WATCH_KEEPALIVE = 10.0
"""Seconds an open change feed (GET /v1/watch) may stay silent before a keep-alive line."""
MAX_TRANSACTIONAL_ID_BYTES = 255


class Consistency(enum.Enum):
    LINEARIZABLE = "linearizable"
    LEADER = "leader"
    STALE = "stale"


class ConsensusLog(Protocol):
    """What the service needs from the replication layer (raft/ provides it)."""

    async def propose(self, command: Command) -> CommandResult:
        """Replicate and apply one command; raises NotApplied, UnknownOutcome or Overloaded."""
        ...

    async def read_barrier(self) -> None:
        """Return once everything committed before the call is applied locally."""
        ...

    def is_leader(self) -> bool: ...

    def holds_lease(self) -> bool:
        """This node leads, and no other leader can have been elected since a majority
        last answered it (check-quorum's lease): a read from its own state is current."""
        ...

    def leader_http_url(self) -> str | None: ...

    def stalled_reason(self) -> str | None:
        """Why this node's state cannot be trusted, or None."""
        ...

    def ready(self) -> bool: ...

    def readiness(self) -> dict[str, str | None]:
        """What keeps the node from being ready, by check name (node/service/readiness.py):
        ``storage`` (a failing apply), ``not_stalled``, ``leader``, ``applied``."""
        ...

    def status(self) -> dict[str, Any]: ...

    def member_list(self) -> list[dict[str, str]]:
        """The voting members: id, raft_address, url."""
        ...

    async def add_member(self, node_id: str, raft_address: str, url: str) -> dict[str, Any]:
        """On the leader: add a voting member (raises NotLeader, Conflict...)."""
        ...

    async def remove_member(self, node_id: str) -> dict[str, Any]:
        """On the leader: remove a voting member (raises NotLeader, KeyNotFound, Conflict)."""
        ...

    async def set_member_url(self, node_id: str, url: str) -> dict[str, Any]:
        """On the leader: change a member's HTTP URL (raises NotLeader, KeyNotFound)."""
        ...


# What a member description may hold; the OpenAPI document states the same patterns.
MEMBER_ID_PATTERN = "^[A-Za-z0-9_.-]{1,64}$"
_PORT = "(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
RAFT_ADDRESS_PATTERN = rf"^[A-Za-z0-9._:\[\]-]+:{_PORT}$"
# \s differs between Python and JSON Schema's (ECMA) regexes: the characters only one of
# them counts as space are listed, so both refuse the same URLs.
MEMBER_URL_PATTERN = r"^https?://[^,\s\u001c-\u001f\u0085\ufeff]+$"


def member_problem(node_id: Any, raft_address: Any, url: Any) -> str | None:
    """Why a member description is unacceptable, or None."""
    if not isinstance(node_id, str) or not re.fullmatch(MEMBER_ID_PATTERN, node_id):
        return "id must be 1-64 characters of letters, digits, '_', '.' or '-'"
    if not isinstance(raft_address, str) or not re.fullmatch(RAFT_ADDRESS_PATTERN, raft_address):
        return f"raft_address must be HOST:PORT (port 1 to 65535), not {raft_address!r:.100}"
    if not isinstance(url, str) or not re.fullmatch(MEMBER_URL_PATTERN, url):
        return f"url must be an http:// or https:// URL without commas, not {url!r:.100}"
    return None


@dataclass(frozen=True, slots=True)
class ScanPage:
    items: list[tuple[bytes, StoredValue]]
    next_after: bytes | None


class KvService(KvWrites):
    def __init__(
        self,
        consensus: ConsensusLog,
        store: LmdbStore,
        max_value_bytes: int,
        *,
        compactor: Compactor,
        log: CommitLog,
        read_wait_timeout: float = 5.0,
        watch_keepalive: float = DEFAULT_WATCH_KEEPALIVE,
        producer_expiry_ms: int = DEFAULT_EXPIRY_MS,
        max_producers: int = DEFAULT_MAX_PRODUCERS,
        producer_sweep_slice: int = DEFAULT_SWEEP_SLICE,
        producer_count: Callable[[], int | None] = lambda: None,
        transfer_rate_bytes: int = 0,
        transfer_hold_seconds: float = DEFAULT_HOLD_SECONDS,
        max_txn_ops: int = MAX_TXN_OPS,
        max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
        max_txn_result_bytes: int | None = None,
        max_txn_bytes: int | None = None,
        stall_timeout: float = 30.0,
        member_url_changes: Callable[[], bool] = lambda: True,
        security: Callable[[], dict[str, Any]] | None = None,
        max_leases: int = DEFAULT_MAX_LEASES,
        max_lease_ttl: int = DEFAULT_MAX_LEASE_TTL,
        lease_status: Callable[[], dict[str, Any]] | None = None,
        data_paths: tuple[Path, ...] = (),
        min_free_bytes: int = DEFAULT_MIN_FREE_BYTES,
        space_problem: Callable[[], str | None] = lambda: None,
        version: str = "unknown",
        load_limits: LoadLimits | None = None,
    ) -> None:
        self._load_limits = load_limits or LoadLimits()
        super().__init__(
            max_value_bytes,
            max_txn_ops=max_txn_ops,
            max_txn_result_bytes=max_txn_result_bytes,
            max_txn_bytes=max_txn_bytes,
            max_leases=max_leases,
            max_lease_ttl=max_lease_ttl,
        )
        self._data_paths = data_paths
        self._min_free_bytes = min_free_bytes
        self._space_problem = space_problem
        self._version = version
        self._lease_status = lease_status
        self._member_url_changes = member_url_changes
        self._security = security
        self._stall_timeout = stall_timeout
        self._producer_expiry_ms = producer_expiry_ms
        self._max_producers = max_producers
        self._producer_sweep_slice = producer_sweep_slice
        self._producer_count = producer_count
        self._transfer_rate_bytes = transfer_rate_bytes
        self._held = HeldViews(transfer_hold_seconds)
        self._watch_keepalive = watch_keepalive
        self._consensus = consensus
        self._store = store
        self._log = log
        self._compactor = compactor
        self._max_page_bytes = max_page_bytes
        self._read_wait_timeout = read_wait_timeout
        self.http_workers: Callable[[], list[dict[str, Any]]] | None = None
        """/v1/status ``http_workers`` (set by the wiring when --http-workers > 0)."""

    def _state_view(self) -> AbstractContextManager[ReadView]:
        return self._store.reader()

    @property
    def load_limits(self) -> LoadLimits:
        """The bounds of a bulk load's chunks (node/service/load_limits.py)."""
        return self._load_limits

    async def _propose(self, command: Command) -> CommandResult:
        return await self._consensus.propose(command)

    async def load(self, keys: list[bytes], values: list[bytes]) -> CommandResult:
        """Put ``values[i]`` at ``keys[i]``, all in one command (a bulk load's chunk,
        node/state/load_command.py), every pair already checked as a put's. The
        result's version is the offset of the last put."""
        result = await self._consensus.propose(Load(keys, values))
        if result.code is ResultCode.OK:
            return result
        raise result_error(result)

    async def execute(self, command: Command) -> CommandResult:
        """Propose an already validated command and return its raw result."""
        return await self._consensus.propose(command)

    async def init_producer(self, transactional_id: str | None) -> CommandResult:
        """Allocate a producer, or fence the older epochs of ``transactional_id``'s.

        Refused with ``too_many_producers`` (LimitReached) when the cluster holds
        ``max_producers`` already: here, before proposing, when this node knows the
        count (and the id is not one it knows, whose re-init may bump an epoch), and
        in any case by the state machine, with the limit the entry carries."""
        if transactional_id is not None and not (
            0 < len(transactional_id.encode()) <= MAX_TRANSACTIONAL_ID_BYTES
        ):
            raise InvalidRequest(
                f"transactional_id must be 1 to {MAX_TRANSACTIONAL_ID_BYTES} bytes of UTF-8"
            )
        count = self._producer_count()
        if (
            count is not None
            and count >= self._max_producers
            and (
                transactional_id is None
                or self._store.get(transactional_key(transactional_id)) is None
            )
        ):
            raise LimitReached(
                f"the cluster holds {count} producers, its limit (--max-producers "
                f"{self._max_producers}); idle ones are dropped after their expiry",
                code=ResultCode.TOO_MANY_PRODUCERS.value,
            )
        result = await self._consensus.propose(
            InitProducer(transactional_id, self._producer_expiry_ms, self._max_producers)
        )
        if result.code is ResultCode.OK:
            return result
        raise result_error(result)

    async def expire_producers(self) -> int:
        """On the leader: drop the state of producers idle past their expiry, one raft
        entry per slice of ``producer_sweep_slice`` producers; how many."""
        expired = 0
        after: int | None = None
        while self._consensus.is_leader():
            result = await self._consensus.propose(
                ExpireProducers(after, self._producer_sweep_slice)
            )
            if result.code is not ResultCode.OK:
                break
            expired += int(result.value or b"0")
            if not result.producer_id:
                break  # the sweep reached the last producer
            after = result.producer_id
        return expired

    # -- reads --------------------------------------------------------------------

    async def prepare_read(self, consistency: Consistency, min_version: int | None) -> None:
        """Wait until this node may answer a read at ``consistency``."""
        reason = self._consensus.stalled_reason()
        if reason is not None:
            raise NodeNotReady(f"this node serves no reads: {reason}")
        if consistency is Consistency.LINEARIZABLE:
            await self._consensus.read_barrier()
        elif consistency is Consistency.LEADER:
            if not self._consensus.is_leader():
                raise NotLeader("this node is not the leader", self._consensus.leader_http_url())
            if not self._consensus.holds_lease():
                # Just elected, a majority silent, or handing leadership over: another
                # leader may exist, so confirm this one first instead of answering stale.
                await self._consensus.read_barrier()
        if min_version is not None:
            await self._wait_applied(min_version)

    async def _wait_applied(self, offset: int) -> None:
        deadline = time.monotonic() + self._read_wait_timeout
        delay = 0.001
        while self._store.applied_offset < offset:
            if time.monotonic() >= deadline:
                raise NodeNotReady(
                    f"this node has applied offset {self._store.applied_offset}, "
                    f"not {offset}, after {self._read_wait_timeout:g}s"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.02)

    async def get(
        self,
        key: bytes,
        consistency: Consistency = Consistency.LINEARIZABLE,
        min_version: int | None = None,
    ) -> StoredValue:
        self.check_key(key)
        await self.prepare_read(consistency, min_version)
        found = self._store.get(key)
        if found is None:
            raise KeyNotFound("no such key")
        return found

    async def scan(
        self,
        prefix: bytes,
        start_after: bytes | None = None,
        limit: int = DEFAULT_SCAN_LIMIT,
        consistency: Consistency = Consistency.LINEARIZABLE,
        min_version: int | None = None,
    ) -> ScanPage:
        if not 1 <= limit <= MAX_SCAN_LIMIT:
            raise InvalidRequest(f"limit must be between 1 and {MAX_SCAN_LIMIT}")
        await self.prepare_read(consistency, min_version)
        with self._store.reader() as view:
            page, more = view.scan_page(prefix, start_after, limit, self._max_page_bytes)
        return ScanPage(page, page[-1][0] if more else None)

    def read_local(self, keys: Sequence[bytes]) -> list[StoredValue | None]:
        with self._store.reader() as view:
            return [view.get(k) for k in keys]

    # -- the log ------------------------------------------------------------------

    @property
    def log_head(self) -> int:
        """The highest offset in this node's commit log."""
        return self._log.last_offset

    @contextmanager
    def complete_log_range(self, from_offset: int) -> Iterator[None]:
        """While the block runs, offsets from ``from_offset`` on are all in the log and
        no compaction removes any (a lagging replica pulls such a range instead of the
        whole state). Raises Conflict ``range_compacted`` when that cannot be promised."""
        log = self._log
        if not log.rewriting.acquire(blocking=False):
            raise Conflict("a compaction is rewriting the log", code="range_compacted")
        try:
            if from_offset <= log.compacted_through:
                raise Conflict(
                    f"offsets up to {log.compacted_through} may have been compacted",
                    code="range_compacted",
                )
            yield
        finally:
            log.rewriting.release()

    def log_chunks(
        self, from_offset: int, to_offset: int | None, limit: int | None, chunk_bytes: int
    ) -> Iterator[bytes]:
        """Framed records (node/storage/log_feed.py) joined into chunks of about
        ``chunk_bytes``, at most at the node's transfer rate (blocking: a chunk waits its
        turn, so iterate off the event loop)."""
        chunk: list[bytes] = []
        size = 0
        pace = Pace(self._transfer_rate_bytes)
        for data in encoded_records(self._log, from_offset, to_offset, limit):
            chunk.append(data)
            size += len(data)
            if size >= chunk_bytes:
                pace.wait(size)
                yield b"".join(chunk)
                chunk, size = [], 0
        if chunk:
            pace.wait(size)
            yield b"".join(chunk)

    # -- the change feed ------------------------------------------------------------

    @property
    def applied_offset(self) -> int:
        """The last offset this node has applied: every record up to it is in the log."""
        return self._store.applied_offset

    @property
    def watch_keepalive(self) -> float:
        """Seconds an open change feed may stay silent before it sends a keep-alive."""
        return self._watch_keepalive

    @property
    def stall_timeout(self) -> float:
        """Seconds a streamed answer (snapshot, log range, watch) may wait for its client
        to read before the connection is closed (--transfer-idle-timeout)."""
        return self._stall_timeout

    def unreadable_reason(self) -> str | None:
        """Why this node serves no reads (its state is known to miss entries), or None."""
        return self._consensus.stalled_reason()

    def changes(
        self,
        prefix: bytes,
        from_offset: int,
        to_offset: int,
        *,
        max_records: int = 1000,
        max_bytes: int = 1024 * 1024,
    ) -> tuple[list[Record], int]:
        """User records (never the reserved prefix) whose key starts with ``prefix`` and
        ``from_offset <= offset <= to_offset``, in offset order, and the offset to go on
        from. Blocking file I/O: call it off the event loop.

        One call reads at most ``max_records`` records, matching or not, and stops once
        the matching keys and values reach ``max_bytes``. Offsets compaction removed read
        as the next greater one, so a range that compaction thinned yields each key's
        latest record (and tombstones still in retention). ``to_offset`` should be at
        most :attr:`applied_offset`, below which the log has no gaps still to fill.
        """
        matched: list[Record] = []
        if to_offset < from_offset:
            return matched, from_offset
        size = 0
        # Leaving the loop early drops the reader, which closes its segment file.
        for scanned, record in enumerate(self._log.read(from_offset), 1):
            if record.offset > to_offset:
                break
            if record.key.startswith(prefix) and not is_reserved(record.key):
                matched.append(record)
                size += len(record.key) + len(record.value)
            if scanned >= max_records or size >= max_bytes:
                return matched, record.offset + 1
        return matched, to_offset + 1

    # -- snapshots ----------------------------------------------------------------

    def open_snapshot_stream(
        self, transfer_id: str | None = None, after: bytes | None = None
    ) -> SnapshotStream:
        """This node's state as a snapshot (node/snapshot/format.py), streamed as it is
        read from one LMDB read view (node/snapshot/stream.py), throttled to the
        node's transfer rate. Blocking (it opens the view): call it off the event
        loop; the caller ends it with :meth:`end_snapshot_stream`. A node whose
        state misses entries (stalled, or catching up) refuses with NodeNotReady.

        With ``transfer_id`` and ``after``: the rest of that cut transfer, the keys
        after ``after`` from the same read view (node/snapshot/held.py); raises
        TransferExpired when the view is no longer held.
        """
        if transfer_id is not None:
            held = self._held.take(transfer_id)
            if held is None:
                raise TransferExpired(
                    f"snapshot transfer {transfer_id} is not held here (any more): start again"
                )
            return SnapshotStream(
                held.view,
                rate_bytes=self._transfer_rate_bytes,
                transfer_id=transfer_id,
                header=held.header,
                after=after or b"",
            )
        reason = self._consensus.stalled_reason()
        if reason is not None:
            raise NodeNotReady(f"this node exports no snapshot: {reason}")
        view = self._store.open_detached(grow_first=False)
        return SnapshotStream(
            view, rate_bytes=self._transfer_rate_bytes, transfer_id=secrets.token_hex(8)
        )

    def end_snapshot_stream(self, stream: SnapshotStream) -> None:
        """Stop ``stream``; its view stays held a while for a resume (its reader lets it
        go with :meth:`release_snapshot` once it has everything). Blocking (up to 2 s):
        call it off the event loop."""
        view = stream.end(keep=True)
        if view is not None:
            self._held.hold(stream.transfer_id, view, stream.header)

    def release_snapshot(self, transfer_id: str) -> bool:
        """Let go of the view held for ``transfer_id``; False when none was."""
        held = self._held.take(transfer_id)
        if held is None:
            return False
        held.view.close()
        return True

    def close_held_snapshots(self) -> None:
        """Let go of every held view (the node is stopping)."""
        self._held.close_all()

    # -- node state ---------------------------------------------------------------

    async def compact(self, force: bool = True) -> CompactionResult:
        """Compact this node's commit log (forced: roll the active segment first)."""
        return await self._compactor.compact(force)

    def status(self) -> dict[str, Any]:
        status = self._consensus.status()
        status["applied_offset"] = self._store.applied_offset
        status["applied_index"] = self._store.applied_index
        status["compaction"] = self._compactor.status()
        status["version"] = self._version
        status["ready"] = self.readiness().ready  # /readyz's verdict, the disk included
        # LMDB's entry count (O(1)): user keys plus internal records (producers,
        # leases, auth, checkpoints, members); counting user keys alone walks the latter.
        with self._store.reader() as view:
            entries = view.count(include_internal=True)
        status["storage"] = {
            "entries": entries,
            "log_bytes": self._log.size_bytes,
            "log_segments": self._log.segment_count,
        }
        # What one request may hold here, so clients (the Redis replicator) can size
        # their transactions instead of learning it from a 413.
        status["limits"] = {
            "max_txn_ops": self._max_txn_ops,
            "max_txn_bytes": self._max_txn_bytes,
            "max_value_bytes": self._max_value_bytes,
            "max_page_bytes": self._max_page_bytes,
        }
        if self._security is not None:
            status["security"] = self._security()
        if self._lease_status is not None:
            status["leases"] = self._lease_status()
        if self.http_workers is not None:
            status["http_workers"] = self.http_workers()
        return status

    # -- replicator checkpoints --------------------------------------------------------

    def checkpoints(self) -> list[tuple[str, bytes, int]]:
        """Every replicator checkpoint in this node's applied state: (name, value, version)."""
        with self._store.reader() as view:
            items = view.scan(CHECKPOINTS_PREFIX, limit=10_000, include_internal=True)
        skip = len(CHECKPOINTS_PREFIX)
        return [(key[skip:].decode(), stored.value, stored.version) for key, stored in items]

    # -- alarms (node/service/alarms.py) -----------------------------------------------

    def alarms(self) -> tuple[Alarm, ...]:
        """The alarms raised in this node's applied state."""
        return current_alarms(self._store)

    async def raise_alarm(self, member: str, kind: AlarmKind, reason: str) -> tuple[Alarm, ...]:
        """Raise ``kind`` for ``member`` unless raised; the alarms after."""
        return await raise_for(self._consensus, self._store, member, kind, reason)

    async def disarm_alarms(self, member: str | None, kind: AlarmKind) -> tuple[Alarm, ...]:
        """Disarm ``kind`` on ``member`` (None: every member); the alarms left."""
        return await disarm_alarms(self._consensus, self._store, member, kind)

    # -- membership -----------------------------------------------------------------

    def members(self) -> list[dict[str, str]]:
        return self._consensus.member_list()

    async def add_member(self, node_id: str, raft_address: str, url: str) -> dict[str, Any]:
        """Validate, then add a voting member through the leader's raft."""
        problem = member_problem(node_id, raft_address, url)
        if problem is not None:
            raise InvalidRequest(problem)
        return await self._consensus.add_member(node_id, raft_address, url.rstrip("/"))

    async def remove_member(self, node_id: str) -> dict[str, Any]:
        return await self._consensus.remove_member(node_id)

    async def set_member_url(self, node_id: str, url: str) -> dict[str, Any]:
        """Change where a member's HTTP API is found. Clients are redirected there and
        members download catch-up state from it, so only a node serving on loopback or
        with auth enabled (where the route is admin-only) takes it."""
        if not self._member_url_changes():
            raise Forbidden(
                "changing a member's url redirects clients and catch-up downloads; this "
                "node serves on a non-loopback address with authentication disabled, so "
                "it refuses (enable auth, bind --listen to loopback, or remove and add "
                "the member again)",
                code="auth_required",
            )
        problem = member_problem(node_id, "0.0.0.0:1", url)
        if problem is not None:
            raise InvalidRequest(problem)
        return await self._consensus.set_member_url(node_id, url.rstrip("/"))

    def readiness(self, exclude: Iterable[str] = ()) -> Readiness:
        """The readiness checks (node/service/readiness.py) but those in ``exclude``;
        an unknown name is an InvalidRequest."""
        return run_checks(
            self._consensus.readiness(),
            lambda: self._space_problem() or disk_problem(self._data_paths, self._min_free_bytes),
            exclude,
        )

    def ready(self) -> tuple[bool, str]:
        readiness = self.readiness()
        return readiness.ready, readiness.reason
