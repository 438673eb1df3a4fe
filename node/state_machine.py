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

A :class:`node.commands.Txn` is decided whole before any of it takes effect:
every key and value is checked first (a bad one refuses the txn with no
effect), then the compares pick a branch, whose ops can no longer fail. So its
writes are consecutive records of one batch, appended and written to LMDB
together with the rest of the entry.
"""

from __future__ import annotations

import functools
import gc
import json
import logging
from collections import OrderedDict
from typing import cast

from node.commands import (
    MAX_TXN_OPS,
    Barrier,
    Batch,
    CompareTarget,
    Delete,
    Put,
    RemoveMember,
    SetMember,
    Txn,
    TxnDelete,
    TxnPut,
    decode_entry,
)
from node.commit_log import CommitLog
from node.errors import EntryDecodeError
from node.keyspace import (
    MAX_KEY_BYTES,
    RESERVED_PREFIX,
    is_reserved,
    key_length_problem,
    member_key,
)
from node.lmdb_store import Change, LmdbStore, ReadView, StoredValue
from node.record import Record, RecordOp
from node.replay import replay
from node.results import CommandResult, OpResult, ResultCode

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
            kind = type(command)  # exact type tests: the cheapest dispatch on the hot path
            if kind is Barrier:
                results.append(CommandResult(ResultCode.OK, version=offset - 1))
                continue
            if kind is not Put and kind is not Delete:
                decide = (
                    functools.partial(self._decide_txn, command)
                    if isinstance(command, Txn)
                    else functools.partial(
                        self._decide_member, cast(SetMember | RemoveMember, command)
                    )
                )
                result, offset = decide(
                    raft_index=raft_index,
                    timestamp_ms=batch.timestamp_ms,
                    offset=offset,
                    view=view,
                    pending=pending,
                    records=records,
                )
                results.append(result)
                continue
            command = cast(Put | Delete, command)  # `kind` told: mypy cannot see it
            key = command.key
            if (
                not (0 < len(key) <= MAX_KEY_BYTES)
                or key.startswith(RESERVED_PREFIX)
                or (kind is Put and len(cast(Put, command).value) > self._max_value_bytes)
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
            if kind is Put:
                value = cast(Put, command).value
                create = offset if current is None else current.create_version
                pending[key] = StoredValue(offset, create, value)
                records.append(
                    Record(
                        offset,
                        raft_index,
                        batch.timestamp_ms,
                        RecordOp.PUT,
                        key,
                        value,
                        create,
                    )
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

    @staticmethod
    def _decide_member(
        command: SetMember | RemoveMember,
        *,
        raft_index: int,
        timestamp_ms: int,
        offset: int,
        view: ReadView,
        pending: dict[bytes, StoredValue | None],
        records: list[Record],
    ) -> tuple[CommandResult, int]:
        """A member directory record: an ordinary record under the reserved prefix,
        so replay, compaction and catch-up carry it. Only nodes propose these."""
        key = member_key(command.node_id)
        current = pending[key] if key in pending else view.get(key)
        if isinstance(command, SetMember):
            value = json.dumps(
                {
                    "id": command.node_id,
                    "raft_address": command.raft_address,
                    "url": command.http_url,
                },
                sort_keys=True,
            ).encode()
            create = offset if current is None else current.create_version
            pending[key] = StoredValue(offset, create, value)
            records.append(
                Record(offset, raft_index, timestamp_ms, RecordOp.PUT, key, value, create)
            )
        else:
            if current is None:
                return CommandResult(ResultCode.OK, version=offset - 1), offset
            pending[key] = None
            records.append(Record(offset, raft_index, timestamp_ms, RecordOp.DELETE, key))
        return CommandResult(ResultCode.OK, version=offset), offset + 1

    def _decide_txn(
        self,
        txn: Txn,
        *,
        raft_index: int,
        timestamp_ms: int,
        offset: int,
        view: ReadView,
        pending: dict[bytes, StoredValue | None],
        records: list[Record],
    ) -> tuple[CommandResult, int]:
        """Decide one txn into ``pending`` and ``records``; returns its result and
        the next free offset. Nothing is touched unless the whole txn is valid,
        and once it is, no op can fail, so no rollback is ever needed."""
        if txn.size > MAX_TXN_OPS:
            message = f"txn has {txn.size} compares and ops; the limit is {MAX_TXN_OPS}"
            return CommandResult(ResultCode.TXN_TOO_LARGE, message=message), offset
        refusal = self._txn_refusal(txn)
        if refusal is not None:
            return refusal, offset
        succeeded = True
        for key, target, expected in txn.compares:
            current = pending[key] if key in pending else view.get(key)
            if target is CompareTarget.VERSION:
                holds = (0 if current is None else current.version) == expected
            elif target is CompareTarget.VALUE:
                holds = current is not None and current.value == expected
            else:
                holds = (current is not None) == expected
            if not holds:
                succeeded = False
                break
        op_results: list[OpResult] = []
        for op in txn.success if succeeded else txn.failure:
            key = op.key
            current = pending[key] if key in pending else view.get(key)
            if isinstance(op, TxnPut):
                create = offset if current is None else current.create_version
                pending[key] = StoredValue(offset, create, op.value)
                records.append(
                    Record(offset, raft_index, timestamp_ms, RecordOp.PUT, key, op.value, create)
                )
                op_results.append(OpResult("put", key, True, offset, create))
                offset += 1
            elif isinstance(op, TxnDelete):
                if current is None:
                    op_results.append(OpResult("delete", key, False, 0))
                    continue
                pending[key] = None
                records.append(Record(offset, raft_index, timestamp_ms, RecordOp.DELETE, key))
                op_results.append(OpResult("delete", key, True, offset))
                offset += 1
            elif current is None:
                op_results.append(OpResult("get", key, False, 0))
            else:
                op_results.append(
                    OpResult(
                        "get", key, True, current.version, current.create_version, current.value
                    )
                )
        result = CommandResult(
            ResultCode.OK, version=offset - 1, succeeded=succeeded, op_results=tuple(op_results)
        )
        return result, offset

    def _txn_refusal(self, txn: Txn) -> CommandResult | None:
        """The first invalid key or value of the txn (compares, then success ops,
        then failure ops, though only one branch will run), or None."""
        for where, items in (
            ("compares", txn.compares),
            ("success", txn.success),
            ("failure", txn.failure),
        ):
            for i, item in enumerate(items):
                refusal = self._key_refusal(item.key)
                if refusal is None and isinstance(item, TxnPut):
                    refusal = self._value_refusal(item.value)
                if refusal is not None:
                    return refusal._replace(message=f"{where}[{i}]: {refusal.message}")
        return None

    def _refusal(self, command: Put | Delete) -> CommandResult:
        refusal = self._key_refusal(command.key)
        if refusal is None and isinstance(command, Put):
            refusal = self._value_refusal(command.value)
        if refusal is None:
            raise AssertionError(f"no reason to refuse {command!r:.100}")
        return refusal

    @staticmethod
    def _key_refusal(key: bytes) -> CommandResult | None:
        if is_reserved(key):
            return CommandResult(
                ResultCode.RESERVED_KEY, message="the \\x00rkv/ prefix is internal"
            )
        problem = key_length_problem(key)
        if problem is not None:
            return CommandResult(ResultCode.INVALID_KEY, message=problem)
        return None

    def _value_refusal(self, value: bytes) -> CommandResult | None:
        if len(value) > self._max_value_bytes:
            return CommandResult(
                ResultCode.VALUE_TOO_LARGE,
                message=f"value is {len(value)} bytes; the limit is {self._max_value_bytes}",
            )
        return None
