"""Deciding a bulk load chunk (node/state/load_command.py): all or nothing.

Every key and value is checked first, as the put path checks one (reserved
prefix, key length, value size), and the first refusal refuses the whole
command with nothing written, the same on every replica. Then each pair is a
put, written straight into the entry's pending changes and records (the
plain-put path of node/state/machine.py, without a result per put: a load
answers one result, whose ``version`` is the offset of its last put).
"""

from __future__ import annotations

from node.keyspace import MAX_KEY_BYTES, RESERVED_PREFIX
from node.state.deciders import key_refusal, value_refusal
from node.state.entry_writer import EntryWriter
from node.state.load_command import Load
from node.state.results import CommandResult, ResultCode
from node.storage.lmdb_store import StoredValue
from node.storage.record import Record, RecordOp

# Every key starting with RESERVED_PREFIX sorts below this one: when the smallest key
# of a load is not below it (user keys rarely start with a NUL byte), none is reserved.
_AFTER_RESERVED = RESERVED_PREFIX[:-1] + bytes((RESERVED_PREFIX[-1] + 1,))


def _reserved(key: bytes) -> bool:
    return key.startswith(RESERVED_PREFIX)


def _refusal(load: Load, max_value_bytes: int) -> CommandResult | None:
    """The first key or value a put would refuse, or None (the common case is one
    C-level pass over each array)."""
    keys, values = load.keys, load.values
    if (
        (not keys or min(map(len, keys)) > 0)
        and (not keys or max(map(len, keys)) <= MAX_KEY_BYTES)
        and (not values or max(map(len, values)) <= max_value_bytes)
        and (not keys or min(keys) >= _AFTER_RESERVED or not any(map(_reserved, keys)))
    ):
        return None
    for i, (key, value) in enumerate(zip(keys, values, strict=True)):
        refusal = key_refusal(key) or value_refusal(value, max_value_bytes)
        if refusal is not None:
            return refusal._replace(message=f"pair {i}: {refusal.message}")
    raise AssertionError("a load was refused without a refused pair")


def decide_load(writer: EntryWriter, load: Load, max_value_bytes: int) -> CommandResult:
    refusal = _refusal(load, max_value_bytes)
    if refusal is not None:
        return refusal
    pending = writer.pending
    records = writer.records
    # The state before this command; a key earlier in the entry (or in this load) is
    # in pending, which comes first.
    stored = writer.view.get_many(load.keys)
    raft_index, timestamp_ms = writer.raft_index, writer.timestamp_ms
    offset = writer.offset
    put_op = RecordOp.PUT
    for key, value, before in zip(load.keys, load.values, stored, strict=True):
        current = pending.get(key, before)
        create = offset if current is None else current.create_version
        pending[key] = StoredValue(offset, create, value)
        records.append(Record(offset, raft_index, timestamp_ms, put_op, key, value, create))
        offset += 1
    writer.offset = offset
    return CommandResult(ResultCode.OK, version=offset - 1)
