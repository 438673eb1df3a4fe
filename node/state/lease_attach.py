"""Attaching keys and locks to a lease, and counting them, inside one entry.

Used by the lease and lock deciders (node/state/lease_apply.py) and by a txn's
put ops that carry a lease (node/state/deciders.py). The records are described
in node/state/leases.py.
"""

from __future__ import annotations

from node.state.entry_writer import EntryWriter
from node.state.leases import (
    LEASE_COUNT_KEY,
    LeaseRecord,
    attached_key,
    decode_lease,
    key_attachments,
    lease_key,
    lock_attachments,
)
from node.state.results import CommandResult, ResultCode
from node.storage.lmdb_store import StoredValue


def lease_of(writer: EntryWriter, lease_id: int) -> LeaseRecord | None:
    stored = writer.current(lease_key(lease_id))
    return None if stored is None else decode_lease(stored.value)


def no_lease(lease_id: int) -> CommandResult:
    return CommandResult(
        ResultCode.LEASE_NOT_FOUND, message=f"lease {lease_id} does not exist (expired or revoked?)"
    )


def _decimal(stored: StoredValue | None) -> int:
    return 0 if stored is None else int(stored.value)


def _set_decimal(writer: EntryWriter, key: bytes, number: int) -> None:
    current = writer.current(key)
    if number:
        writer.put(key, b"%d" % number, current)
    elif current is not None:
        writer.delete(key)


def lease_count(writer: EntryWriter) -> int:
    return _decimal(writer.current(LEASE_COUNT_KEY))


def set_lease_count(writer: EntryWriter, count: int) -> None:
    _set_decimal(writer, LEASE_COUNT_KEY, count)


def attached(writer: EntryWriter, lease_id: int) -> int:
    return _decimal(writer.current(attached_key(lease_id)))


def set_attached(writer: EntryWriter, lease_id: int, count: int) -> None:
    _set_decimal(writer, attached_key(lease_id), count)


def _room(writer: EntryWriter, lease_id: int, attachment: bytes) -> CommandResult | None:
    """None when ``attachment`` exists or the lease may take one more."""
    if writer.current(attachment) is not None:
        return None
    lease = lease_of(writer, lease_id)
    if lease is None:
        return no_lease(lease_id)
    if attached(writer, lease_id) >= lease.max_attachments:
        return CommandResult(
            ResultCode.TOO_MANY_LEASE_ATTACHMENTS,
            message=f"lease {lease_id} holds {lease.max_attachments} keys and locks, its "
            "limit (--max-lease-attachments when it was granted); use another lease",
        )
    return None


def _record(writer: EntryWriter, lease_id: int, attachment: bytes, value: bytes) -> None:
    current = writer.current(attachment)
    writer.put(attachment, value, current)
    if current is None:
        set_attached(writer, lease_id, attached(writer, lease_id) + 1)
        writer.new_attachments.setdefault(lease_id, []).append(attachment)


def put_attached(
    writer: EntryWriter, lease_id: int, key: bytes, value: bytes, current: StoredValue | None
) -> StoredValue | CommandResult:
    """Put ``key`` attached to the lease (``current`` is the key as it stands): the
    stored value, or the refusal (no such lease, no room) with nothing written."""
    if lease_of(writer, lease_id) is None:
        return no_lease(lease_id)
    attachment = key_attachments(lease_id) + key
    refusal = _room(writer, lease_id, attachment)
    if refusal is not None:
        return refusal
    stored = writer.put(key, value, current)
    _record(writer, lease_id, attachment, b"%d" % stored.version)
    return stored


def attach_lock(writer: EntryWriter, lease_id: int, name: str) -> CommandResult | None:
    """Note that the lease holds or waits for lock ``name``; a refusal, or None."""
    attachment = lock_attachments(lease_id) + name.encode()
    refusal = _room(writer, lease_id, attachment)
    if refusal is None:
        _record(writer, lease_id, attachment, b"")
    return refusal


def detach_lock(writer: EntryWriter, lease_id: int, name: str) -> None:
    attachment = lock_attachments(lease_id) + name.encode()
    if writer.current(attachment) is not None:
        writer.delete(attachment)
        set_attached(writer, lease_id, attached(writer, lease_id) - 1)


def attachments(writer: EntryWriter, prefix: bytes, lease_id: int) -> list[bytes]:
    """Every attachment key of the lease under ``prefix`` (key or lock attachments) as
    this point of the entry sees them: LMDB's and this entry's own."""
    found: list[bytes] = []
    after: bytes | None = None
    while True:
        page = writer.view.scan(prefix, after, 1000, include_internal=True)
        found.extend(key for key, _ in page)
        if len(page) < 1000:
            break
        after = page[-1][0]
    seen = set(found)
    for key in writer.new_attachments.get(lease_id, ()):
        if key.startswith(prefix) and key not in seen:
            found.append(key)
            seen.add(key)
    return [key for key in found if writer.current(key) is not None]
