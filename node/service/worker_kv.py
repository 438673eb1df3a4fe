"""Key-value reads and writes in an HTTP worker process: the node's LMDB opened
read-only, and the node's main process asked whatever only it knows.

Writes (PUT, DELETE, incr, append, txn) are checked and built by the same code as
in main (node/service/kv_writes.py); main proposes the built command
(:meth:`MainProcess.propose`, node/cli/write_link.py) and the result is turned
into the answer here, as main's service does.

A worker serves GET /v1/kv/{key} and GET /v1/kv with the same answers as the main
process (node/service/kv.py), at every consistency level:

- ``stale``: read LMDB as it is; refused while main reports the node stalled;
- ``min_version=N``: first wait, bounded as in main, until LMDB's meta says the
  node applied offset N (read from LMDB each time, never a cached value);
- ``linearizable``: main runs its read check (ReadIndex, raft/read_index.py: the
  node confirms it leads, or asks the leader, and waits until it applied the read
  index) and answers; only then does the worker begin its LMDB read transaction,
  which sees everything main applied before answering. Reads arriving while a
  check is on its way share the NEXT one (the one in flight may have begun before
  them), so one check per worker is in flight at a time;
- ``leader``: main answers whether it leads (307 to the leader, as main does).
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AbstractContextManager
from typing import Protocol

from node.errors import InvalidRequest, KeyNotFound, NodeNotReady
from node.service.kv import (
    DEFAULT_MAX_PAGE_BYTES,
    DEFAULT_SCAN_LIMIT,
    MAX_SCAN_LIMIT,
    Consistency,
    ScanPage,
)
from node.service.kv_writes import KvWrites, check_key
from node.state.commands import MAX_TXN_OPS, Command
from node.state.results import CommandResult
from node.storage.lmdb_store import ReadOnlyStore, ReadView, StoredValue


class ReadChecks(Protocol):
    async def read_check(self, consistency: Consistency) -> None:
        """Main's own check for a read at ``consistency`` (linearizable: its read
        barrier); raises the RequestError main would answer."""
        ...


class MainProcess(ReadChecks, Protocol):
    """What a worker asks of its node's main process (node/cli/http_worker.py)."""

    def stalled_reason(self) -> str | None:
        """Why the node serves no reads now (main pushes every change), or None."""
        ...

    async def propose(self, command: Command) -> CommandResult:
        """Main proposes a built write: its raw result, or the RequestError main's
        proposing raised (UnknownOutcome when the answer cannot come)."""
        ...


class CoalescedChecks:
    """One check in flight per consistency level; callers that arrive meanwhile share
    the next one (never the one already sent)."""

    def __init__(self, main: ReadChecks) -> None:
        self._main = main
        self._in_flight: dict[Consistency, asyncio.Future[None]] = {}
        self._next: dict[Consistency, asyncio.Future[None]] = {}

    async def check(self, consistency: Consistency) -> None:
        waiting = self._next.get(consistency)
        if waiting is None:
            waiting = asyncio.get_running_loop().create_future()
            self._next[consistency] = waiting
            if consistency not in self._in_flight:
                self._send(consistency)
        await asyncio.shield(waiting)

    def _send(self, consistency: Consistency) -> None:
        future = self._next.pop(consistency)
        self._in_flight[consistency] = future
        task = asyncio.create_task(self._main.read_check(consistency))
        task.add_done_callback(lambda done: self._answered(consistency, future, done))

    def _answered(
        self, consistency: Consistency, future: asyncio.Future[None], done: asyncio.Task[None]
    ) -> None:
        del self._in_flight[consistency]
        if not future.done():
            error = None if done.cancelled() else done.exception()
            if done.cancelled():
                future.cancel()
            elif error is not None:
                future.set_exception(error)
            else:
                future.set_result(None)
        if consistency in self._next:
            self._send(consistency)


class WorkerKv(KvWrites):
    """The reads and writes of :class:`node.service.kv.KvService`, in a worker process."""

    def __init__(
        self,
        store: ReadOnlyStore,
        main: MainProcess,
        max_value_bytes: int,
        *,
        max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
        read_wait_timeout: float = 5.0,
        max_txn_ops: int = MAX_TXN_OPS,
        max_txn_result_bytes: int | None = None,
        max_txn_bytes: int | None = None,
    ) -> None:
        super().__init__(
            max_value_bytes,
            max_txn_ops=max_txn_ops,
            max_txn_result_bytes=max_txn_result_bytes,
            max_txn_bytes=max_txn_bytes,
        )
        self._store = store
        self._main = main
        self._checks = CoalescedChecks(main)
        self._max_page_bytes = max_page_bytes
        self._read_wait_timeout = read_wait_timeout

    def _state_view(self) -> AbstractContextManager[ReadView]:
        return self._store.reader()

    async def _propose(self, command: Command) -> CommandResult:
        return await self._main.propose(command)

    async def prepare_read(self, consistency: Consistency, min_version: int | None) -> None:
        reason = self._main.stalled_reason()
        if reason is not None:
            raise NodeNotReady(f"this node serves no reads: {reason}")
        if consistency is not Consistency.STALE:
            await self._checks.check(consistency)
        if min_version is not None:
            await self._wait_applied(min_version)

    async def _wait_applied(self, offset: int) -> None:
        deadline = time.monotonic() + self._read_wait_timeout
        delay = 0.001
        applied = self._store.applied_offset
        while applied < offset:
            if time.monotonic() >= deadline:
                raise NodeNotReady(
                    f"this node has applied offset {applied}, "
                    f"not {offset}, after {self._read_wait_timeout:g}s"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.02)
            applied = self._store.applied_offset

    async def get(
        self,
        key: bytes,
        consistency: Consistency = Consistency.LINEARIZABLE,
        min_version: int | None = None,
    ) -> StoredValue:
        check_key(key)
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
