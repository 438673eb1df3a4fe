"""The commands of leases and locks, and their encoding (entry format 4).

::

    [TAG_LEASE_GRANT, ttl_ms, owner, max_leases, max_attachments]
    [TAG_LEASE_KEEPALIVE, [lease_id, ...]]
    [TAG_LEASE_REVOKE, lease_id]
    [TAG_EXPIRE_LEASES, [[lease_id, version], ...], record_budget]
    [TAG_LEASED_PUT, key, value, expected_version | nil, lease_id]
    [TAG_TTL_PUT, key, value, expected_version | nil, ttl_ms, owner, max_leases]
    [TAG_LOCK, name, lease_id, value, max_waiters]
    [TAG_UNLOCK, name, lease_id]
    [TAG_PROCLAIM, name, lease_id, token, value]

:class:`Fenced` (a write guarded by a lock's token) wraps another command, so
node/state/commands.py encodes it, like a producer's write. Limits a command is
decided against (``max_leases``, ``max_waiters``, a grant's ``max_attachments``,
an expiry's ``record_budget``) travel in the entry, so every replica decides
with the same numbers. Tags are part of the journal: never renumber them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from node.errors import EntryDecodeError
from node.state.leases import MAX_KEEPALIVE_IDS, MAX_LOCK_VALUE_BYTES, lock_name_problem

TAG_LEASE_GRANT = 14
TAG_LEASE_KEEPALIVE = 15
TAG_LEASE_REVOKE = 16
TAG_EXPIRE_LEASES = 17
TAG_LEASED_PUT = 18
TAG_TTL_PUT = 19
TAG_LOCK = 20
TAG_UNLOCK = 21
TAG_PROCLAIM = 22
TAG_FENCED = 23

INT64_MAX = 2**63 - 1


class LeaseGrant(NamedTuple):
    """A new lease of ``ttl_ms``; its id is the offset of its record."""

    ttl_ms: int
    owner: str
    max_leases: int
    max_attachments: int


class LeaseKeepAlive(NamedTuple):
    """Renew each lease (rewriting its record, so its version moves)."""

    lease_ids: tuple[int, ...]


class LeaseRevoke(NamedTuple):
    lease_id: int


class ExpireLeases(NamedTuple):
    """Proposed by the leader: end each lease whose record still has the version
    the leader saw when its deadline passed, within ``record_budget`` records."""

    leases: tuple[tuple[int, int], ...]
    record_budget: int


class LeasedPut(NamedTuple):
    """A put attaching ``key`` to ``lease_id``."""

    key: bytes
    value: bytes
    expected_version: int | None
    lease_id: int


class TtlPut(NamedTuple):
    """A put with a lease of its own (``PUT ?ttl=``): a grant and an attach in one."""

    key: bytes
    value: bytes
    expected_version: int | None
    ttl_ms: int
    owner: str
    max_leases: int


class Lock(NamedTuple):
    """Take lock ``name`` with the lease, or queue for it."""

    name: str
    lease_id: int
    value: bytes
    max_waiters: int


class Unlock(NamedTuple):
    """Release the lock the lease holds, or leave its queue."""

    name: str
    lease_id: int


class Proclaim(NamedTuple):
    """The holder with ``token`` gives the lock a new value (an election's leader)."""

    name: str
    lease_id: int
    token: int
    value: bytes


LeaseCommand = (
    LeaseGrant
    | LeaseKeepAlive
    | LeaseRevoke
    | ExpireLeases
    | LeasedPut
    | TtlPut
    | Lock
    | Unlock
    | Proclaim
)


def _count(value: object) -> bool:
    return type(value) is int and 1 <= value <= INT64_MAX


def _uint(value: object) -> bool:
    return type(value) is int and 0 <= value <= INT64_MAX


def _problem(command: LeaseCommand) -> str | None:
    """Why ``command`` cannot be encoded (or was decoded malformed), or None."""
    if isinstance(command, LeaseGrant):
        if not (_count(command.ttl_ms) and _count(command.max_leases)):
            return "a grant's ttl and lease limit are positive integers"
        if not _count(command.max_attachments) or type(command.owner) is not str:
            return "a grant's attachment limit is a positive integer, its owner a string"
    elif isinstance(command, LeaseKeepAlive):
        ids = command.lease_ids
        if not 0 < len(ids) <= MAX_KEEPALIVE_IDS or not all(_count(i) for i in ids):
            return f"a keepalive renews 1 to {MAX_KEEPALIVE_IDS} leases (positive ids)"
    elif isinstance(command, LeaseRevoke):
        if not _count(command.lease_id):
            return "a lease id is a positive integer"
    elif isinstance(command, ExpireLeases):
        pairs = command.leases
        if not all(len(p) == 2 and _count(p[0]) and _uint(p[1]) for p in pairs):
            return "an expiry names [lease id, version] pairs"
        if not _count(command.record_budget):
            return "an expiry's record budget is a positive integer"
    elif isinstance(command, LeasedPut | TtlPut):
        if type(command.key) is not bytes or type(command.value) is not bytes:
            return "a put's key and value are bytes"
        if command.expected_version is not None and not _uint(command.expected_version):
            return "an expected version is a non-negative integer"
        if isinstance(command, LeasedPut) and not _count(command.lease_id):
            return "a lease id is a positive integer"
        if isinstance(command, TtlPut) and not (
            _count(command.ttl_ms) and _count(command.max_leases) and type(command.owner) is str
        ):
            return "a ttl put's ttl and lease limit are positive integers, its owner a string"
    else:
        return _lock_problem(command)
    return None


def _lock_problem(command: Lock | Unlock | Proclaim) -> str | None:
    problem = lock_name_problem(command.name)
    if problem is None and not _count(command.lease_id):
        problem = "a lease id is a positive integer"
    if problem is None and isinstance(command, Lock | Proclaim):
        value = command.value
        if type(value) is not bytes or len(value) > MAX_LOCK_VALUE_BYTES:
            problem = f"a lock's value is at most {MAX_LOCK_VALUE_BYTES} bytes"
    if problem is None and isinstance(command, Lock) and not _count(command.max_waiters):
        problem = "a lock's waiter limit is a positive integer"
    if problem is None and isinstance(command, Proclaim) and not _uint(command.token):
        problem = "a token is a non-negative integer"
    return problem


def encode_lease_command(command: LeaseCommand) -> list[Any]:
    """Raises ValueError for a command decoding would refuse."""
    problem = _problem(command)
    if problem is not None:
        raise ValueError(f"cannot encode {type(command).__name__}: {problem}")
    if isinstance(command, LeaseGrant):
        return [TAG_LEASE_GRANT, *command]
    if isinstance(command, LeaseKeepAlive):
        return [TAG_LEASE_KEEPALIVE, list(command.lease_ids)]
    if isinstance(command, LeaseRevoke):
        return [TAG_LEASE_REVOKE, command.lease_id]
    if isinstance(command, ExpireLeases):
        return [TAG_EXPIRE_LEASES, [list(p) for p in command.leases], command.record_budget]
    if isinstance(command, LeasedPut):
        return [TAG_LEASED_PUT, *command]
    if isinstance(command, TtlPut):
        return [TAG_TTL_PUT, *command]
    if isinstance(command, Lock):
        return [TAG_LOCK, *command]
    if isinstance(command, Unlock):
        return [TAG_UNLOCK, *command]
    return [TAG_PROCLAIM, *command]


_FIELDS = {
    TAG_LEASE_GRANT: 5,
    TAG_LEASE_KEEPALIVE: 2,
    TAG_LEASE_REVOKE: 2,
    TAG_EXPIRE_LEASES: 3,
    TAG_LEASED_PUT: 5,
    TAG_TTL_PUT: 7,
    TAG_LOCK: 5,
    TAG_UNLOCK: 3,
    TAG_PROCLAIM: 5,
}


def is_lease_command(raw: list[Any]) -> bool:
    """Whether ``raw`` (a decoded command array) has a lease command's tag and length."""
    return _FIELDS.get(raw[0]) == len(raw)


def decode_lease_command(raw: list[Any]) -> LeaseCommand:
    tag, *fields = raw
    command: LeaseCommand
    try:
        if tag == TAG_LEASE_GRANT:
            command = LeaseGrant(*fields)
        elif tag == TAG_LEASE_KEEPALIVE:
            if not isinstance(fields[0], list):
                raise EntryDecodeError("a keepalive's leases are an array")
            command = LeaseKeepAlive(tuple(fields[0]))
        elif tag == TAG_LEASE_REVOKE:
            command = LeaseRevoke(*fields)
        elif tag == TAG_EXPIRE_LEASES:
            if not isinstance(fields[0], list) or not all(isinstance(p, list) for p in fields[0]):
                raise EntryDecodeError("an expiry's leases are an array of pairs")
            command = ExpireLeases(tuple(tuple(p) for p in fields[0]), fields[1])
        elif tag == TAG_LEASED_PUT:
            command = LeasedPut(*fields)
        elif tag == TAG_TTL_PUT:
            command = TtlPut(*fields)
        elif tag == TAG_LOCK:
            command = Lock(*fields)
        elif tag == TAG_UNLOCK:
            command = Unlock(*fields)
        else:
            command = Proclaim(*fields)
        problem = _problem(command)
    except TypeError as exc:  # a field of the wrong type where a name is hashed or compared
        problem = str(exc)
    if problem is not None:
        raise EntryDecodeError(f"malformed lease command: {problem}")
    return command
