"""The outcome of one applied command.

apply() reports business outcomes (a failed compare-and-set, a key that is
too long) as results, never as exceptions: an exception inside a raft apply
would make the node retry the same entry forever.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

import msgpack

from node.errors import EntryDecodeError


class ResultCode(enum.Enum):
    OK = "ok"
    NOT_FOUND = "not_found"
    VERSION_CONFLICT = "version_conflict"
    INVALID_KEY = "invalid_key"
    RESERVED_KEY = "reserved_key"
    VALUE_TOO_LARGE = "value_too_large"
    MALFORMED_ENTRY = "malformed_entry"
    ALREADY_APPLIED = "already_applied"
    TXN_TOO_LARGE = "txn_too_large"
    TXN_RESULT_TOO_LARGE = "txn_result_too_large"
    NOT_AN_INTEGER = "not_an_integer"
    INTEGER_OVERFLOW = "integer_overflow"
    # Idempotent producers (node/state/producers.py).
    UNKNOWN_PRODUCER = "unknown_producer"
    PRODUCER_FENCED = "producer_fenced"
    OUT_OF_ORDER_SEQUENCE = "out_of_order_sequence"
    DUPLICATE_SEQUENCE_TOO_OLD = "duplicate_sequence_too_old"
    TOO_MANY_PRODUCERS = "too_many_producers"
    # Users, roles and permissions (node/state/auth_apply.py).
    USER_EXISTS = "user_exists"
    USER_NOT_FOUND = "user_not_found"
    ROLE_EXISTS = "role_exists"
    ROLE_NOT_FOUND = "role_not_found"
    ROLE_NOT_GRANTED = "role_not_granted"
    PERMISSION_NOT_GRANTED = "permission_not_granted"
    ROOT_REQUIRED = "root_required"
    ROOT_ROLE_BUILT_IN = "root_role_built_in"
    TOO_MANY_USERS = "too_many_users"
    TOO_MANY_ROLES = "too_many_roles"
    TOO_MANY_ROLE_PERMISSIONS = "too_many_role_permissions"
    AUTH_ALREADY_SET_UP = "auth_already_set_up"
    # Leases and locks (node/state/lease_apply.py).
    LEASE_NOT_FOUND = "lease_not_found"
    TOO_MANY_LEASES = "too_many_leases"
    TOO_MANY_LEASE_ATTACHMENTS = "too_many_lease_attachments"
    TOO_MANY_LOCK_WAITERS = "too_many_lock_waiters"
    NOT_LOCK_HOLDER = "not_lock_holder"
    FENCED = "fenced"
    # Reported by the raft layer, never by apply: the node is stalled (its state
    # is known to miss entries) and applies nothing.
    NODE_STALLED = "node_stalled"
    # A nospace alarm is raised: the command adds data (node/state/alarms.py).
    NO_SPACE = "no_space"


class OpResult(NamedTuple):
    """What one op of a txn did, in the order the ops ran.

    - ``put``: ``found`` is True, ``version`` the offset written,
      ``create_version`` the key's create version after the put (equal to
      ``version`` when the put created the key).
    - ``delete``: ``found`` says whether the key existed; ``version`` is the
      tombstone's offset, 0 when there was nothing to delete (no record).
    - ``get``: the key as the txn saw it at that point (after the earlier ops of
      the same branch): ``found``, ``version``, ``create_version``, ``value``.
    - ``incr``: like ``put``, and ``value`` is the new integer as decimal text.
    - ``append``: like ``put``; ``value`` is the new length as decimal text.
    """

    op: str
    key: bytes
    found: bool
    version: int
    create_version: int = 0
    value: bytes = b""


_RESULT_OVERHEAD = 160
"""Bytes a result or an op result holds beyond its byte strings (tuple, ints, enum)."""


def results_size(results: tuple[CommandResult, ...]) -> int:
    """An estimate of the memory an entry's results hold, for byte caps."""
    size = 0
    for result in results:
        size += _RESULT_OVERHEAD + len(result.message) + len(result.value)
        for op in result.op_results:
            size += _RESULT_OVERHEAD + len(op.key) + len(op.value)
    return size


class CommandResult(NamedTuple):
    """``version`` is the offset the command wrote (or, for a barrier, the applied
    offset); ``current_version`` is the key's version when a condition failed.

    For a txn that ran (code OK), ``succeeded`` says whether its compares all
    held (the success branch ran) or not (the failure branch ran),
    ``op_results`` has one :class:`OpResult` per op of that branch, and
    ``version`` is the offset of its last write, or the last offset assigned
    before it when it wrote nothing. Every other command leaves both fields
    at their defaults; a refused txn (invalid key, too large) has code != OK.

    ``value`` is, for an incr, the new integer and, for an append, the new
    length, both as decimal text; for an audit snapshot, the raft index of
    its entry (where every replica cuts); for a producer expiry sweep, how many
    producers it expired. An init producer sets ``producer_id`` and ``epoch``; a
    slice of the expiry sweep sets ``producer_id`` to the last producer it looked
    at when more may follow (the next slice starts after it), 0 when it reached the
    end. ``duplicate`` marks the cached result of an idempotent
    producer's sequence that was applied before (nothing was applied again).
    """

    code: ResultCode
    version: int = 0
    current_version: int = 0
    message: str = ""
    succeeded: bool = True
    op_results: tuple[OpResult, ...] = ()
    value: bytes = b""
    producer_id: int = 0
    epoch: int = 0
    duplicate: bool = False

    @property
    def ok(self) -> bool:
        return self.code is ResultCode.OK


_CODES = {code.value: code for code in ResultCode}


def encode_result(result: CommandResult) -> bytes:
    """A result as bytes (main answers a worker's write with it, node/cli/write_link.py):
    the msgpack array of its fields in order, its code as text, each op result an
    array of its fields."""
    fields = list(result)
    fields[0] = result.code.value
    fields[5] = [list(op) for op in result.op_results]
    packed: bytes = msgpack.packb(fields, use_bin_type=True)
    return packed


def decode_result(data: bytes) -> CommandResult:
    """The result :func:`encode_result` encoded; EntryDecodeError when malformed."""
    try:
        raw = msgpack.unpackb(data, raw=False, use_list=True)
        code, version, current, message, succeeded, ops, value, producer, epoch, dup = raw
        return CommandResult(
            _CODES[code],
            int(version),
            int(current),
            str(message),
            bool(succeeded),
            tuple(
                OpResult(str(o[0]), bytes(o[1]), bool(o[2]), int(o[3]), int(o[4]), bytes(o[5]))
                for o in ops
            ),
            bytes(value),
            int(producer),
            int(epoch),
            bool(dup),
        )
    except Exception as exc:  # msgpack's errors, a wrong shape, an unknown code
        raise EntryDecodeError(f"not an encoded command result: {exc}") from exc
