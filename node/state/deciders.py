"""How the state machine decides every command but a plain put or delete.

Each decider takes the :class:`node.state.entry_writer.EntryWriter` of the entry
and the command, records its mutations there, and returns its result.
Business outcomes (a refused key, a failed compare, a value that is not an
integer) are results, never exceptions.
"""

from __future__ import annotations

import json

from node.keyspace import is_checkpoint, is_reserved, key_length_problem, member_key
from node.state.commands import (
    MAX_TXN_OPS,
    Append,
    Compare,
    CompareTarget,
    Incr,
    RemoveMember,
    SetMember,
    Txn,
    TxnAppend,
    TxnDelete,
    TxnGet,
    TxnIncr,
    TxnPut,
)
from node.state.counters import incremented, refusal_message
from node.state.entry_writer import EntryWriter
from node.state.lease_attach import put_attached
from node.state.results import CommandResult, OpResult, ResultCode


def key_refusal(key: bytes) -> CommandResult | None:
    if is_reserved(key):
        return CommandResult(ResultCode.RESERVED_KEY, message="the \\x00rkv/ prefix is internal")
    problem = key_length_problem(key)
    if problem is not None:
        return CommandResult(ResultCode.INVALID_KEY, message=problem)
    return None


def value_refusal(value: bytes, max_value_bytes: int) -> CommandResult | None:
    if len(value) > max_value_bytes:
        return CommandResult(
            ResultCode.VALUE_TOO_LARGE,
            message=f"value is {len(value)} bytes; the limit is {max_value_bytes}",
        )
    return None


def decide_member(writer: EntryWriter, command: SetMember | RemoveMember) -> CommandResult:
    """A member directory record: an ordinary record under the reserved prefix,
    so replay, compaction and catch-up carry it. Only nodes propose these."""
    key = member_key(command.node_id)
    current = writer.current(key)
    if isinstance(command, SetMember):
        value = json.dumps(
            {"id": command.node_id, "raft_address": command.raft_address, "url": command.http_url},
            sort_keys=True,
        ).encode()
        return CommandResult(ResultCode.OK, version=writer.put(key, value, current).version)
    if current is None:
        return CommandResult(ResultCode.OK, version=writer.offset - 1)
    return CommandResult(ResultCode.OK, version=writer.delete(key))


def _read_modify_write(
    writer: EntryWriter, op: Incr | Append | TxnIncr | TxnAppend, max_value_bytes: int
) -> OpResult | CommandResult:
    """Apply one incr or append: its op result, or the refusal that stops it."""
    key = op.key
    current = writer.current(key)
    old = None if current is None else current.value
    if isinstance(op, Incr | TxnIncr):
        new, code = incremented(old, op.by)
        if new is None:
            assert code is not None
            message = refusal_message(code, key, old, op.by)
            current_version = 0 if current is None else current.version
            return CommandResult(code, current_version=current_version, message=message)
        stored = writer.put(key, new, current)
        return OpResult("incr", key, True, stored.version, stored.create_version, new)
    new = op.suffix if old is None else old + op.suffix
    refusal = value_refusal(new, max_value_bytes)
    if refusal is not None:
        return refusal
    stored = writer.put(key, new, current)
    return OpResult(
        "append", key, True, stored.version, stored.create_version, str(len(new)).encode()
    )


def decide_counter(
    writer: EntryWriter, command: Incr | Append, max_value_bytes: int
) -> CommandResult:
    refusal = key_refusal(command.key)
    if refusal is None and isinstance(command, Append):
        refusal = value_refusal(command.suffix, max_value_bytes)
    if refusal is not None:
        return refusal
    outcome = _read_modify_write(writer, command, max_value_bytes)
    if isinstance(outcome, CommandResult):
        return outcome
    return CommandResult(ResultCode.OK, version=outcome.version, value=outcome.value)


def _txn_refusal(txn: Txn, max_value_bytes: int) -> CommandResult | None:
    """The first invalid key or value of the txn (compares, then success ops,
    then failure ops, though only one branch will run), or None."""
    for where, items in (
        ("compares", txn.compares),
        ("success", txn.success),
        ("failure", txn.failure),
    ):
        for i, item in enumerate(items):
            if is_checkpoint(item.key) and isinstance(item, Compare | TxnPut | TxnGet):
                refusal = None  # the one internal namespace a txn may use (by name)
            else:
                refusal = key_refusal(item.key)
            if refusal is None and isinstance(item, TxnPut):
                refusal = value_refusal(item.value, max_value_bytes)
            elif refusal is None and isinstance(item, TxnAppend):
                refusal = value_refusal(item.suffix, max_value_bytes)
            if refusal is not None:
                return refusal._replace(message=f"{where}[{i}]: {refusal.message}")
    return None


def _compares_hold(writer: EntryWriter, txn: Txn) -> bool:
    for key, target, expected in txn.compares:
        current = writer.current(key)
        if target is CompareTarget.VERSION:
            holds = (0 if current is None else current.version) == expected
        elif target is CompareTarget.VALUE:
            holds = current is not None and current.value == expected
        else:
            holds = (current is not None) == expected
        if not holds:
            return False
    return True


def decide_txn(writer: EntryWriter, txn: Txn, max_value_bytes: int) -> CommandResult:
    """etcd's compare / success / failure as one command. Keys and values are
    checked before anything runs; an incr or append that fails at its turn takes
    back the branch's earlier writes, so a txn applies whole or not at all."""
    if txn.size > MAX_TXN_OPS:
        message = f"txn has {txn.size} compares and ops; the limit is {MAX_TXN_OPS}"
        return CommandResult(ResultCode.TXN_TOO_LARGE, message=message)
    refusal = _txn_refusal(txn, max_value_bytes)
    if refusal is not None:
        return refusal
    succeeded = _compares_hold(writer, txn)
    branch, name = (txn.success, "success") if succeeded else (txn.failure, "failure")
    op_results: list[OpResult] = []
    returned = 0  # bytes of keys and values the get ops return
    writer.savepoint()
    for i, op in enumerate(branch):
        key = op.key
        if isinstance(op, TxnPut):
            if op.lease:
                attached = put_attached(writer, op.lease, key, op.value, writer.current(key))
                if isinstance(attached, CommandResult):
                    writer.rollback()
                    return attached._replace(message=f"{name}[{i}]: {attached.message}")
                stored = attached
            else:
                stored = writer.put(key, op.value, writer.current(key))
            op_results.append(OpResult("put", key, True, stored.version, stored.create_version))
        elif isinstance(op, TxnDelete):
            if writer.current(key) is None:
                op_results.append(OpResult("delete", key, False, 0))
            else:
                op_results.append(OpResult("delete", key, True, writer.delete(key)))
        elif isinstance(op, TxnGet):
            current = writer.current(key)
            if current is None:
                op_results.append(OpResult("get", key, False, 0))
                continue
            returned += len(key) + len(current.value)
            if txn.max_result_bytes is not None and returned > txn.max_result_bytes:
                writer.rollback()
                return CommandResult(
                    ResultCode.TXN_RESULT_TOO_LARGE,
                    message=f"{name}[{i}]: the txn's gets would return more than "
                    f"{txn.max_result_bytes} bytes of keys and values (--max-txn-result-bytes); "
                    "read fewer keys per txn",
                )
            op_results.append(
                OpResult("get", key, True, current.version, current.create_version, current.value)
            )
        else:
            outcome = _read_modify_write(writer, op, max_value_bytes)
            if isinstance(outcome, CommandResult):
                writer.rollback()
                return outcome._replace(message=f"{name}[{i}]: {outcome.message}")
            op_results.append(outcome)
    writer.release()
    return CommandResult(
        ResultCode.OK,
        version=writer.offset - 1,
        succeeded=succeeded,
        op_results=tuple(op_results),
    )
