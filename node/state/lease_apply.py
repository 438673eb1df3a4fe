"""Deciding lease and lock commands (node/state/lease_commands.py) in an entry.

Nothing here reads a clock: a lease ends when an entry says so (a revoke, or the
leader's expiry naming the version it saw), and timestamps come from the entry.
What changed is noted in the writer's :class:`LeaseEvents` for the node's lease
clock and lock waiters.

Results: a grant's (and a TTL put's) ``value`` is the lease id in decimal; a
keepalive's ``op_results`` say, per lease, whether it was renewed (``found``),
its record's new ``version`` and its TTL in ms (``value``); a revoke's ``value``
is how many keys it deleted; an expiry's ``op_results`` say which leases ended.
A lock answers ``succeeded`` True with ``version`` = its fencing token once the
lease holds it, False while it waits (``current_version`` = the holder's token).
"""

from __future__ import annotations

from node.state.deciders import key_refusal, value_refusal
from node.state.entry_writer import EntryWriter
from node.state.lease_attach import (
    attach_lock,
    attachments,
    detach_lock,
    lease_count,
    lease_of,
    no_lease,
    put_attached,
    set_attached,
    set_lease_count,
)
from node.state.lease_commands import (
    ExpireLeases,
    LeaseCommand,
    LeasedPut,
    LeaseGrant,
    LeaseKeepAlive,
    LeaseRevoke,
    Lock,
    Proclaim,
    TtlPut,
    Unlock,
)
from node.state.leases import (
    LeaseRecord,
    LockRecord,
    decode_lock,
    encode_lease,
    encode_lock,
    key_attachments,
    lease_key,
    lock_attachments,
    lock_key,
)
from node.state.results import CommandResult, OpResult, ResultCode


def decide_lease(writer: EntryWriter, command: LeaseCommand, max_value_bytes: int) -> CommandResult:
    if isinstance(command, LeaseGrant):
        return _grant(
            writer, command.ttl_ms, command.owner, command.max_leases, command.max_attachments
        )
    if isinstance(command, LeaseKeepAlive):
        return _keepalive(writer, command)
    if isinstance(command, LeaseRevoke):
        if lease_of(writer, command.lease_id) is None:
            return no_lease(command.lease_id)
        deleted = end_lease(writer, command.lease_id)
        return CommandResult(ResultCode.OK, version=writer.offset - 1, value=b"%d" % deleted)
    if isinstance(command, ExpireLeases):
        return _expire(writer, command)
    if isinstance(command, LeasedPut | TtlPut):
        return _put(writer, command, max_value_bytes)
    if isinstance(command, Lock):
        return _lock(writer, command)
    if isinstance(command, Unlock):
        return _unlock(writer, command)
    return _proclaim(writer, command)


def _grant(
    writer: EntryWriter, ttl_ms: int, owner: str, max_leases: int, max_attachments: int
) -> CommandResult:
    count = lease_count(writer)
    if count >= max_leases:
        return CommandResult(
            ResultCode.TOO_MANY_LEASES,
            message=f"the cluster holds {count} leases, its limit (--max-leases {max_leases}); "
            "revoke the ones you no longer need",
        )
    lease_id = writer.offset
    lease = LeaseRecord(ttl_ms, owner, max_attachments, writer.timestamp_ms)
    stored = writer.put(lease_key(lease_id), encode_lease(lease), None)
    set_lease_count(writer, count + 1)
    writer.lease_events.renewed.append((lease_id, ttl_ms, stored.version))
    return CommandResult(ResultCode.OK, version=writer.offset - 1, value=b"%d" % lease_id)


def _keepalive(writer: EntryWriter, command: LeaseKeepAlive) -> CommandResult:
    outcomes: list[OpResult] = []
    for lease_id in command.lease_ids:
        key = lease_key(lease_id)
        current = writer.current(key)
        name = b"%d" % lease_id
        if current is None:
            outcomes.append(OpResult("keepalive", name, False, 0))
            continue
        lease = lease_of(writer, lease_id)
        assert lease is not None
        renewed = LeaseRecord(lease.ttl_ms, lease.owner, lease.max_attachments, writer.timestamp_ms)
        stored = writer.put(key, encode_lease(renewed), current)
        writer.lease_events.renewed.append((lease_id, lease.ttl_ms, stored.version))
        outcomes.append(
            OpResult("keepalive", name, True, stored.version, value=b"%d" % lease.ttl_ms)
        )
    return CommandResult(ResultCode.OK, version=writer.offset - 1, op_results=tuple(outcomes))


def end_lease(writer: EntryWriter, lease_id: int) -> int:
    """Delete the lease's keys (the versions written under it), release or leave its
    locks, and delete its records; how many keys were deleted."""
    deleted = 0
    prefix = key_attachments(lease_id)
    for attachment in attachments(writer, prefix, lease_id):
        stored = writer.current(attachment)
        assert stored is not None
        key = attachment[len(prefix) :]
        current = writer.current(key)
        if current is not None and current.version == int(stored.value):
            writer.delete(key)
            deleted += 1
        writer.delete(attachment)
    prefix = lock_attachments(lease_id)
    for attachment in attachments(writer, prefix, lease_id):
        _leave(writer, attachment[len(prefix) :].decode(), lease_id)
        writer.delete(attachment)
    set_attached(writer, lease_id, 0)
    writer.delete(lease_key(lease_id))
    set_lease_count(writer, lease_count(writer) - 1)
    writer.lease_events.ended.append(lease_id)
    return deleted


def _expire(writer: EntryWriter, command: ExpireLeases) -> CommandResult:
    outcomes: list[OpResult] = []
    start = len(writer.records)
    for lease_id, version in command.leases:
        name = b"%d" % lease_id
        current = writer.current(lease_key(lease_id))
        if current is None or current.version != version:
            outcomes.append(OpResult("expire", name, False, 0))
            continue
        if outcomes and len(writer.records) - start >= command.record_budget:
            break  # the rest wait for the next entry
        deleted = end_lease(writer, lease_id)
        outcomes.append(OpResult("expire", name, True, version, value=b"%d" % deleted))
    return CommandResult(ResultCode.OK, version=writer.offset - 1, op_results=tuple(outcomes))


def _put(writer: EntryWriter, command: LeasedPut | TtlPut, max_value_bytes: int) -> CommandResult:
    refusal = key_refusal(command.key) or value_refusal(command.value, max_value_bytes)
    if refusal is not None:
        return refusal
    current = writer.current(command.key)
    current_version = 0 if current is None else current.version
    expected = command.expected_version
    if expected is not None and expected != current_version:
        return CommandResult(
            ResultCode.VERSION_CONFLICT,
            current_version=current_version,
            message=f"expected version {expected}, found {current_version}",
        )
    if isinstance(command, TtlPut):
        granted = _grant(writer, command.ttl_ms, command.owner, command.max_leases, 1)
        if not granted.ok:
            return granted
        lease_id = int(granted.value)
    else:
        lease_id = command.lease_id
    outcome = put_attached(writer, lease_id, command.key, command.value, current)
    if isinstance(outcome, CommandResult):
        return outcome
    return CommandResult(ResultCode.OK, version=outcome.version, value=b"%d" % lease_id)


def _lock_state(writer: EntryWriter, name: str) -> LockRecord:
    stored = writer.current(lock_key(name))
    return LockRecord() if stored is None else decode_lock(stored.value)


def _write_lock(writer: EntryWriter, name: str, lock: LockRecord) -> None:
    key = lock_key(name)
    current = writer.current(key)
    if lock.holder:
        writer.put(key, encode_lock(lock), current)
    elif current is not None:
        writer.delete(key)
    writer.lease_events.locks.add(name)


def _lock(writer: EntryWriter, command: Lock) -> CommandResult:
    lease_id = command.lease_id
    if lease_of(writer, lease_id) is None:
        return no_lease(lease_id)
    lock = _lock_state(writer, command.name)
    if lock.holder == lease_id:
        return CommandResult(ResultCode.OK, version=lock.token, current_version=lock.token)
    if any(waiter == lease_id for waiter, _ in lock.waiters):
        return CommandResult(ResultCode.OK, succeeded=False, current_version=lock.token)
    if lock.holder and len(lock.waiters) >= command.max_waiters:
        return CommandResult(
            ResultCode.TOO_MANY_LOCK_WAITERS,
            current_version=lock.token,
            message=f"{len(lock.waiters)} leases wait for lock {command.name}, its limit "
            f"(--max-lock-waiters {command.max_waiters})",
        )
    refusal = attach_lock(writer, lease_id, command.name)
    if refusal is not None:
        return refusal
    if lock.holder:
        lock.waiters.append((lease_id, command.value))
        _write_lock(writer, command.name, lock)
        return CommandResult(ResultCode.OK, succeeded=False, current_version=lock.token)
    token = writer.offset  # the offset of the lock record written next
    _write_lock(
        writer, command.name, LockRecord(lease_id, token, writer.timestamp_ms, command.value)
    )
    return CommandResult(ResultCode.OK, version=token, current_version=token)


def _promote(writer: EntryWriter, name: str, lock: LockRecord) -> None:
    """The lock's holder is gone: the oldest waiter whose lease lives takes it."""
    lock.holder = 0
    while lock.waiters:
        lease_id, value = lock.waiters.pop(0)
        if lease_of(writer, lease_id) is not None:
            lock.holder, lock.token = lease_id, writer.offset
            lock.since_ms, lock.value = writer.timestamp_ms, value
            break
    if not lock.holder:
        lock.waiters.clear()
    _write_lock(writer, name, lock)


def _leave(writer: EntryWriter, name: str, lease_id: int) -> bool:
    """The lease lets go of lock ``name`` (held or waited for); False if it had neither."""
    lock = _lock_state(writer, name)
    if lock.holder == lease_id:
        _promote(writer, name, lock)
        return True
    waiting = [w for w in lock.waiters if w[0] != lease_id]
    if len(waiting) == len(lock.waiters):
        return False
    lock.waiters = waiting
    _write_lock(writer, name, lock)
    return True


def _not_holder(name: str, lease_id: int, lock: LockRecord) -> CommandResult:
    return CommandResult(
        ResultCode.NOT_LOCK_HOLDER,
        current_version=lock.token if lock.holder else 0,
        message=f"lease {lease_id} does not hold lock {name}",
    )


def _unlock(writer: EntryWriter, command: Unlock) -> CommandResult:
    if not _leave(writer, command.name, command.lease_id):
        return _not_holder(command.name, command.lease_id, _lock_state(writer, command.name))
    detach_lock(writer, command.lease_id, command.name)
    return CommandResult(ResultCode.OK, version=writer.offset - 1)


def _proclaim(writer: EntryWriter, command: Proclaim) -> CommandResult:
    lock = _lock_state(writer, command.name)
    if lock.holder != command.lease_id or lock.token != command.token:
        return _not_holder(command.name, command.lease_id, lock)
    lock.value = command.value
    _write_lock(writer, command.name, lock)
    return CommandResult(ResultCode.OK, version=lock.token, current_version=lock.token)


def fence_refusal(writer: EntryWriter, name: str, token: int) -> CommandResult | None:
    """None while lock ``name`` is held with ``token``; else the ``fenced`` result
    (``current_version``: the holder's token, 0 when nobody holds it)."""
    lock = _lock_state(writer, name)
    if lock.holder and lock.token == token:
        return None
    if lock.holder:
        message = f"lock {name} is held with token {lock.token}, not {token}"
    else:
        message = f"lock {name} is not held (token {token} lost it)"
    return CommandResult(
        ResultCode.FENCED, current_version=lock.token if lock.holder else 0, message=message
    )
