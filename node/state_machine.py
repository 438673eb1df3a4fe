"""apply(raft_index, entry) -> results: the replicated state machine of a node.

Each entry is a :class:`node.commands.Batch`. Applying it:

1. decides every command against the current state (LMDB plus the effects of
   earlier commands of the same batch) and assigns each mutation the next
   offset;
2. appends the resulting records to the commit log;
3. writes them to LMDB in one write transaction that also stores the applied
   raft index and offset.

A crash between 2 and 3 is repaired on open by replaying the log, so LMDB
never holds a state the log does not. apply() is deterministic (the timestamp
comes from the entry, offsets from the log head), idempotent by raft index,
and returns error results instead of raising for business outcomes.
"""

from __future__ import annotations

import gc
import logging
from collections import OrderedDict

from node.commands import Barrier, Batch, Delete, Put, decode_entry
from node.commit_log import CommitLog
from node.errors import EntryDecodeError
from node.keyspace import MAX_KEY_BYTES, RESERVED_PREFIX, is_reserved, key_length_problem
from node.lmdb_store import Change, LmdbStore, ReadView, StoredValue
from node.record import Record, RecordOp
from node.replay import replay
from node.results import CommandResult, ResultCode

logger = logging.getLogger(__name__)

_RECENT_RESULTS = 1024
_ALREADY_APPLIED = (
    CommandResult(ResultCode.ALREADY_APPLIED, message="entry was applied before this call"),
)


class StateMachine:
    def __init__(self, commit_log: CommitLog, store: LmdbStore, max_value_bytes: int) -> None:
        self._log = commit_log
        self._store = store
        self._max_value_bytes = max_value_bytes
        self._recent: OrderedDict[int, tuple[CommandResult, ...]] = OrderedDict()

    @property
    def applied_index(self) -> int:
        return self._store.applied_index

    @property
    def applied_offset(self) -> int:
        return self._store.applied_offset

    def apply(self, raft_index: int, entry: bytes) -> tuple[CommandResult, ...]:
        """Apply one raft entry; an index at or below the applied one changes nothing.

        For a skipped index the results are the ones computed the first time if
        this process still remembers them, else a single ALREADY_APPLIED result.
        """
        if self._log.last_offset > self._store.applied_offset:
            # An earlier apply appended to the log but failed before LMDB
            # committed (and raft is retrying): bring LMDB up to the log first,
            # so the retry is recognised instead of writing the records twice.
            logger.warning("LMDB is behind the commit log; replaying before applying")
            replay(self._log, self._store)
        if raft_index <= self._store.applied_index:
            return self._recent.get(raft_index, _ALREADY_APPLIED)
        # Applying a large batch allocates thousands of short-lived, acyclic
        # objects; letting the cyclic GC scan them all costs a quarter of the
        # apply time, so it waits until the entry is done.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._apply_new(raft_index, entry)
        finally:
            if gc_was_enabled:
                gc.enable()

    def _apply_new(self, raft_index: int, entry: bytes) -> tuple[CommandResult, ...]:
        try:
            batch = decode_entry(entry)
        except EntryDecodeError as exc:
            logger.error("raft entry %d cannot be decoded, applied as a no-op: %s", raft_index, exc)
            results: tuple[CommandResult, ...] = (
                CommandResult(ResultCode.MALFORMED_ENTRY, message=str(exc)),
            )
            records: list[Record] = []
            changes: list[Change] = []
        else:
            with self._store.reader() as view:
                results, records, changes = self._decide(raft_index, batch, view)
        self._log.append(records)
        applied_offset = records[-1].offset if records else self._store.applied_offset
        self._store.write(changes, raft_index, applied_offset)
        self._remember(raft_index, results)
        return results

    def _remember(self, raft_index: int, results: tuple[CommandResult, ...]) -> None:
        self._recent[raft_index] = results
        if len(self._recent) > _RECENT_RESULTS:
            self._recent.popitem(last=False)

    def _decide(
        self, raft_index: int, batch: Batch, view: ReadView
    ) -> tuple[tuple[CommandResult, ...], list[Record], list[Change]]:
        offset = self._log.next_offset
        pending: dict[bytes, StoredValue | None] = {}
        results: list[CommandResult] = []
        records: list[Record] = []
        for command in batch.commands:
            if isinstance(command, Barrier):
                results.append(CommandResult(ResultCode.OK, version=offset - 1))
                continue
            key = command.key
            if (
                not (0 < len(key) <= MAX_KEY_BYTES)
                or key.startswith(RESERVED_PREFIX)
                or (isinstance(command, Put) and len(command.value) > self._max_value_bytes)
            ):
                results.append(self._refusal(command))
                continue
            current = pending[key] if key in pending else view.get(key)
            current_version = 0 if current is None else current.version
            expected = command.expected_version
            if expected is not None and expected != current_version:
                results.append(
                    CommandResult(
                        ResultCode.VERSION_CONFLICT,
                        current_version=current_version,
                        message=f"expected version {expected}, found {current_version}",
                    )
                )
                continue
            if isinstance(command, Put):
                create = offset if current is None else current.create_version
                pending[key] = StoredValue(offset, create, command.value)
                records.append(
                    Record(offset, raft_index, batch.timestamp_ms, RecordOp.PUT, key, command.value)
                )
            else:
                if current is None:
                    results.append(CommandResult(ResultCode.NOT_FOUND, message="no such key"))
                    continue
                pending[key] = None
                records.append(Record(offset, raft_index, batch.timestamp_ms, RecordOp.DELETE, key))
            results.append(CommandResult(ResultCode.OK, version=offset))
            offset += 1
        return tuple(results), records, list(pending.items())

    def _refusal(self, command: Put | Delete) -> CommandResult:
        if is_reserved(command.key):
            return CommandResult(
                ResultCode.RESERVED_KEY, message="the \\x00rkv/ prefix is internal"
            )
        problem = key_length_problem(command.key)
        if problem is not None:
            return CommandResult(ResultCode.INVALID_KEY, message=problem)
        if isinstance(command, Put) and len(command.value) > self._max_value_bytes:
            return CommandResult(
                ResultCode.VALUE_TOO_LARGE,
                message=(
                    f"value is {len(command.value)} bytes; the limit is {self._max_value_bytes}"
                ),
            )
        raise AssertionError(f"no reason to refuse {command!r:.100}")
