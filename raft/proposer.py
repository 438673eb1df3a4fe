"""Group commit: concurrent proposals become one raft entry.

Runs on the asyncio loop. Commands wait in a pending list; a flush packs up
to ``max_commands_per_entry`` of them, and no more than ``max_entry_bytes`` of
their keys and values (and, for a txn that reads, the most its results may
take: node/state/commands.py batching_bytes; one command always goes, whatever
its size), into one entry and submits it: so an entry, which every replica holds in memory while
it is replicated and applied, stays small whatever many clients send at once. At most
``max_entries_in_flight`` entries are outstanding, so under load batches grow
by themselves (pysyncobj costs about the same per entry whatever its size).

Read barriers coalesce: every linearizable read that arrives before the next
flush shares one Barrier command in that entry. At most one barrier is in
raft at a time; reads that arrive meanwhile wait together for the next one,
which is proposed as soon as the current one is applied (like etcd's
batched ReadIndex), so a barrier round serves every read that queued up.

Bounds: more than ``max_pending_commands`` waiting raises Overloaded. Every
command has a deadline ``proposal_timeout`` after it arrived, enforced by
:meth:`GroupCommitProposer.expire` (the owner calls it a few times a second;
one sweep costs far less than a timer per request): a command still pending
then was never handed to raft and gets NotApplied; one in an entry raft has
not answered gets UnknownOutcome, and its slot is freed (pysyncobj's async
calls have no timeout of their own).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from node import metrics
from node.errors import (
    InvalidRequest,
    NodeNotReady,
    NotApplied,
    Overloaded,
    RequestError,
    UnknownOutcome,
)
from node.state.commands import Barrier, Batch, Command, batching_bytes, encode_entry
from node.state.results import CommandResult, ResultCode

logger = logging.getLogger(__name__)

Outcome = tuple[CommandResult, ...] | RequestError
"""What raft reports for an entry: its results, or why it has none."""

Submit = Callable[[int, bytes], None]
"""Hands (entry id, entry bytes) to raft; the outcome comes back through complete()."""


@dataclass
class _InFlight:
    futures: list[asyncio.Future[CommandResult]]
    deadline: float


@dataclass
class _Pending:
    command: Command
    future: asyncio.Future[CommandResult]
    deadline: float
    size: int = 0  # batching_bytes(command)


def _count_outcome(outcome: Outcome, commands: int) -> None:
    """Count an entry's commands as committed, or failed by the error's code."""
    if isinstance(outcome, RequestError):
        metrics.PROPOSALS_FAILED.labels(outcome.code).inc(commands)
    else:
        metrics.PROPOSALS_COMMITTED.inc(commands)


def _consume(future: asyncio.Future[CommandResult]) -> None:
    """Mark a late outcome nobody waits for any more as retrieved."""
    if not future.cancelled():
        future.exception()


class GroupCommitProposer:
    def __init__(
        self,
        submit: Submit,
        *,
        max_commands_per_entry: int,
        max_entries_in_flight: int,
        max_pending_commands: int,
        proposal_timeout: float,
        max_entry_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self._submit = submit
        self._max_commands = max_commands_per_entry
        self._max_entry_bytes = max_entry_bytes
        self._max_entries = max_entries_in_flight
        self._max_pending = max_pending_commands
        self._timeout = proposal_timeout
        self._pending: list[_Pending] = []
        # The barrier reads may still join (pending, or waiting for the one in raft),
        # and whether one is in raft.
        self._barrier: asyncio.Future[CommandResult] | None = None
        self._barrier_queued = False
        self._barrier_in_raft = False
        self._in_flight: dict[int, _InFlight] = {}
        self._waiting = 0  # commands pending or in flight
        self._ids = itertools.count(1)
        self._flush_scheduled = False
        self.entries_submitted = 0
        self.commands_submitted = 0

    @property
    def commands_waiting(self) -> int:
        return self._waiting

    async def propose(self, command: Command) -> CommandResult:
        return await self._enqueue(command)

    async def read_barrier(self) -> None:
        if self._barrier is None:
            if self._waiting >= self._max_pending:
                raise Overloaded(f"{self._waiting} commands are already waiting for raft")
            self._barrier = asyncio.get_running_loop().create_future()
            self._barrier_queued = False
            self._send_barrier()
        result = await self._barrier
        if result.code is not ResultCode.OK:
            raise NodeNotReady(f"read barrier failed on this node: {result.code.value}")

    def _send_barrier(self) -> None:
        """Queue the joinable barrier for raft, unless one is in raft already."""
        future = self._barrier
        if future is None or self._barrier_queued or self._barrier_in_raft:
            return
        self._barrier_queued = True
        self._pending.append(_Pending(Barrier(), future, time.monotonic() + self._timeout))
        self._waiting += 1
        future.add_done_callback(self._barrier_done)
        self._schedule_flush()

    def _barrier_done(self, future: asyncio.Future[CommandResult]) -> None:
        self._barrier_in_raft = False
        if future is self._barrier:  # failed before it was flushed
            self._barrier = None
        self._send_barrier()

    def _enqueue(self, command: Command) -> asyncio.Future[CommandResult]:
        if self._waiting >= self._max_pending:
            raise Overloaded(f"{self._waiting} commands are already waiting for raft")
        future: asyncio.Future[CommandResult] = asyncio.get_running_loop().create_future()
        deadline = time.monotonic() + self._timeout
        self._pending.append(_Pending(command, future, deadline, batching_bytes(command)))
        self._waiting += 1
        self._schedule_flush()
        return future

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled and len(self._in_flight) < self._max_entries:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        while self._pending and len(self._in_flight) < self._max_entries:
            count = self._batch_length()
            batch = self._pending[:count]
            del self._pending[:count]
            futures = [p.future for p in batch]
            if self._barrier is not None and any(f is self._barrier for f in futures):
                # Later reads need a barrier proposed after them: the next one.
                self._barrier = None
                self._barrier_in_raft = True
            try:
                entry = encode_entry(
                    Batch(tuple(p.command for p in batch), int(time.time() * 1000))
                )
            except (ValueError, OverflowError, TypeError):
                self._pending[:0] = self._without_unencodable(batch)
                continue
            entry_id = next(self._ids)
            deadline = min(p.deadline for p in batch)
            self._in_flight[entry_id] = _InFlight(futures, deadline)
            self.entries_submitted += 1
            self.commands_submitted += len(batch)
            if metrics.enabled:
                metrics.BATCH_COMMANDS.observe(len(batch))
            self._submit(entry_id, entry)

    def _batch_length(self) -> int:
        """How many pending commands the next entry takes: up to the count and the byte
        bounds, and at least one."""
        size = count = 0
        for pending in self._pending[: self._max_commands]:
            size += pending.size
            if count and size > self._max_entry_bytes:
                break
            count += 1
        return count

    def _without_unencodable(self, batch: list[_Pending]) -> list[_Pending]:
        """Fail the commands that cannot be encoded; return the others to retry."""
        keep = []
        for pending in batch:
            try:
                encode_entry(Batch((pending.command,)))
            except (ValueError, OverflowError, TypeError) as exc:
                self._fail_pending(pending, InvalidRequest(f"the command cannot be encoded: {exc}"))
            else:
                keep.append(pending)
        return keep

    def _fail_pending(self, pending: _Pending, error: RequestError) -> None:
        self._waiting -= 1
        if metrics.enabled:
            metrics.PROPOSALS_FAILED.labels(error.code).inc()
        if pending.future is self._barrier:
            self._barrier = None
        if not pending.future.done():
            pending.future.set_exception(error)
            pending.future.add_done_callback(_consume)

    def complete(self, entry_id: int, outcome: Outcome) -> None:
        """Deliver raft's outcome for an entry (on the loop thread)."""
        entry = self._in_flight.pop(entry_id, None)
        if entry is None:
            return  # expired by the sweeper already
        self._finish(entry, outcome)
        self._schedule_flush()

    def _finish(self, entry: _InFlight, outcome: Outcome) -> None:
        self._waiting -= len(entry.futures)
        if not isinstance(outcome, RequestError) and len(outcome) != len(entry.futures):
            outcome = UnknownOutcome(
                f"raft returned {len(outcome)} results for {len(entry.futures)} commands"
            )
        if metrics.enabled:
            _count_outcome(outcome, len(entry.futures))
        for i, future in enumerate(entry.futures):
            if future.done():
                continue
            if isinstance(outcome, RequestError):
                future.set_exception(outcome)
                if future is self._barrier:
                    self._barrier = None
            else:
                future.set_result(outcome[i])

    def expire(self, now: float | None = None) -> int:
        """Fail commands past their deadline; returns how many entries and commands."""
        now = time.monotonic() if now is None else now
        expired = [i for i, e in self._in_flight.items() if e.deadline <= now]
        for entry_id in expired:
            entry = self._in_flight.pop(entry_id)
            logger.warning("raft gave no outcome for entry %d in time: unknown outcome", entry_id)
            self._finish(
                entry,
                UnknownOutcome(
                    f"no outcome within {self._timeout:g}s: the write may or may not be applied"
                ),
            )
        late = [p for p in self._pending if p.deadline <= now]
        if late:
            self._pending = [p for p in self._pending if p.deadline > now]
            for pending in late:
                self._fail_pending(
                    pending, NotApplied(f"not handed to raft within {self._timeout:g}s")
                )
        if expired:
            self._schedule_flush()
        return len(expired) + len(late)

    def fail_pending(self, error: RequestError) -> None:
        """Fail everything not yet handed to raft (on shutdown)."""
        pending, self._pending = self._pending, []
        for item in pending:
            self._fail_pending(item, error)
