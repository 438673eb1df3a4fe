"""Leases and locks as records: their keys, their encodings and their limits.

Every piece of lease and lock state is an ordinary record under the reserved
prefix, so restarts, compaction, snapshots, replica rebuilds and the audit carry
it like any key (docs/LEASES.md says what they mean to a user):

- ``\\x00rkv/leases/<id, 20 digits>`` -> :func:`encode_lease` (TTL, owner, the
  most attachments it may hold). Only a grant and a keepalive write it, so the
  record's version changes exactly when the lease is renewed: an expiry names
  the version it saw and is void if the lease was renewed since.
- ``\\x00rkv/lease-attached/<id>`` -> how many keys and locks are attached (decimal).
- ``\\x00rkv/lease-keys/<id>/<key>`` -> the version of ``key`` written under the
  lease (decimal). A later write of the key without the lease leaves the
  attachment stale: only that version is deleted when the lease ends.
- ``\\x00rkv/lease-locks/<id>/<name>`` -> b"": a lock the lease holds or waits for.
- ``\\x00rkv/lease-count`` -> how many leases exist (decimal), for ``--max-leases``.
- ``\\x00rkv/locks/<name>`` -> :func:`encode_lock`: the holder's lease, its fencing
  token (the offset of the record that made it holder: strictly increasing per
  name), since when, its value, and the queue of waiting leases.

Lease ids are the offset of their grant's record: unique, increasing, never reused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import msgpack

from node.errors import EntryDecodeError
from node.keyspace import RESERVED_PREFIX

LEASES_PREFIX = RESERVED_PREFIX + b"leases/"
LEASE_ATTACHED_PREFIX = RESERVED_PREFIX + b"lease-attached/"
LEASE_KEYS_PREFIX = RESERVED_PREFIX + b"lease-keys/"
LEASE_LOCKS_PREFIX = RESERVED_PREFIX + b"lease-locks/"
LEASE_COUNT_KEY = RESERVED_PREFIX + b"lease-count"
LOCKS_PREFIX = RESERVED_PREFIX + b"locks/"

DEFAULT_MAX_LEASES = 100_000
DEFAULT_MAX_LEASE_TTL = 30 * 24 * 3600
"""Seconds (--max-lease-ttl): 30 days."""
DEFAULT_MAX_LEASE_ATTACHMENTS = 10_000
"""Keys and locks one lease may hold (--max-lease-attachments): what its end deletes
in one raft entry."""
DEFAULT_MAX_LOCK_WAITERS = 1000
MAX_KEEPALIVE_IDS = 10_000
"""Leases one keepalive command (and one request) renews at most."""
MAX_LOCK_NAME_CHARS = 200
MAX_LOCK_VALUE_BYTES = 4096
EXPIRY_RECORD_BUDGET = 20_000
"""About how many records one expiry entry may write: leases beyond it wait for the
next entry (the first lease of an entry always ends whole)."""
_LOCK_NAME = re.compile(r"[A-Za-z0-9._:/@-]+")
_FORMAT = 1
_ID_DIGITS = 20


def lock_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a lock (or an election), or None."""
    if (
        not isinstance(name, str)
        or not 0 < len(name) <= MAX_LOCK_NAME_CHARS
        or not _LOCK_NAME.fullmatch(name)
        or any(part in ("", ".", "..") for part in name.split("/"))
    ):
        return (
            f"a lock name is 1 to {MAX_LOCK_NAME_CHARS} characters of "
            "A-Z a-z 0-9 . _ : / @ -, in /-separated parts that are neither empty nor "
            f". or .. (a URL path would lose them), not {name!r:.80}"
        )
    return None


def lease_key(lease_id: int) -> bytes:
    return LEASES_PREFIX + b"%020d" % lease_id


def lease_id_of(key: bytes) -> int:
    return int(key[len(LEASES_PREFIX) :])


def attached_key(lease_id: int) -> bytes:
    return LEASE_ATTACHED_PREFIX + b"%020d" % lease_id


def key_attachments(lease_id: int) -> bytes:
    """The prefix of the lease's key attachments."""
    return LEASE_KEYS_PREFIX + b"%020d/" % lease_id


def lock_attachments(lease_id: int) -> bytes:
    """The prefix of the lease's lock attachments."""
    return LEASE_LOCKS_PREFIX + b"%020d/" % lease_id


def lock_key(name: str) -> bytes:
    return LOCKS_PREFIX + name.encode()


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    ttl_ms: int
    owner: str
    max_attachments: int
    renewed_ms: int
    """The timestamp of the entry that granted or last renewed it (the leader's
    wall clock, for people: expiry never reads it)."""


def encode_lease(lease: LeaseRecord) -> bytes:
    packed: bytes = msgpack.packb(
        [_FORMAT, lease.ttl_ms, lease.owner, lease.max_attachments, lease.renewed_ms],
        use_bin_type=True,
    )
    return packed


def decode_lease(data: bytes) -> LeaseRecord:
    raw = _unpack(data, "lease")
    if len(raw) != 5 or raw[0] != _FORMAT:
        raise EntryDecodeError(f"a lease record of an unknown form: {raw!r:.80}")
    _, ttl_ms, owner, max_attachments, renewed_ms = raw
    if not (_int(ttl_ms) and type(owner) is str and _int(max_attachments) and _int(renewed_ms)):
        raise EntryDecodeError(f"a malformed lease record: {raw!r:.80}")
    return LeaseRecord(ttl_ms, owner, max_attachments, renewed_ms)


@dataclass(slots=True)
class LockRecord:
    """A lock's state; ``holder`` 0 means nobody holds it (and nobody waits: the
    record is then deleted)."""

    holder: int = 0
    token: int = 0
    since_ms: int = 0
    value: bytes = b""
    waiters: list[tuple[int, bytes]] = field(default_factory=list)


def encode_lock(lock: LockRecord) -> bytes:
    packed: bytes = msgpack.packb(
        [
            _FORMAT,
            lock.holder,
            lock.token,
            lock.since_ms,
            lock.value,
            [[lease, value] for lease, value in lock.waiters],
        ],
        use_bin_type=True,
    )
    return packed


def decode_lock(data: bytes) -> LockRecord:
    raw = _unpack(data, "lock")
    if len(raw) != 6 or raw[0] != _FORMAT:
        raise EntryDecodeError(f"a lock record of an unknown form: {raw!r:.80}")
    _, holder, token, since_ms, value, waiters = raw
    if not (_int(holder) and _int(token) and _int(since_ms) and type(value) is bytes):
        raise EntryDecodeError(f"a malformed lock record: {raw!r:.80}")
    if not isinstance(waiters, list) or not all(
        isinstance(w, list) and len(w) == 2 and _int(w[0]) and type(w[1]) is bytes for w in waiters
    ):
        raise EntryDecodeError("a lock record's waiters are [lease, value] pairs")
    return LockRecord(holder, token, since_ms, value, [(w[0], w[1]) for w in waiters])


def _unpack(data: bytes, what: str) -> list[Any]:
    try:
        raw = msgpack.unpackb(data, raw=False, use_list=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise EntryDecodeError(f"a {what} record is not msgpack: {exc}") from exc
    if not isinstance(raw, list):
        raise EntryDecodeError(f"a {what} record is an array, not {raw!r:.80}")
    return raw


def _int(value: object) -> bool:
    return type(value) is int and value >= 0
