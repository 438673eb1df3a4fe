"""Commands the state machine applies, and their versioned binary encoding.

A raft entry is one :class:`Batch`: the proposer's timestamp and the commands
that group commit gathered, each of which gets its own result. The encoding
is one format-version byte followed by a msgpack array, so a node can refuse
an entry written by a newer format with a clear error instead of guessing::

    entry   = FORMAT_VERSION (1 byte) ++ msgpack([timestamp_ms, [command, ...]])
    command = [TAG_PUT, key, value, expected_version | nil]
            | [TAG_DELETE, key, expected_version | nil]
            | [TAG_BARRIER]
            | [TAG_TXN, [compare, ...], [op, ...] (success), [op, ...] (failure)]
            | [TAG_TXN, compares, success, failure, max_result_bytes]   (format 2)
            | [TAG_SET_MEMBER, node_id, raft_address, http_url]
            | [TAG_REMOVE_MEMBER, node_id]
            | [TAG_INCR, key, by] | [TAG_APPEND, key, suffix]
            | [TAG_INIT_PRODUCER, transactional_id | nil, expiry_ms]
            | [TAG_INIT_PRODUCER, transactional_id | nil, expiry_ms, max_producers]
            | [TAG_PRODUCED, producer_id, epoch, sequence, command]
            | [TAG_EXPIRE_PRODUCERS]
            | [TAG_EXPIRE_PRODUCERS, after_producer_id | nil, limit]
            | [TAG_AUDIT_CUT, audit_id, [split_point, ...]]
            | [TAG_AUTH, op, name, role, password_hash, [role, ...], permission | nil, limit]
                                                                             (format 3)
            | [TAG_LOAD, [key, ...], [value, ...]]                           (format 5)
            | [TAG_RAISE_ALARM, member, kind, reason]                        (format 6)
            | [TAG_DISARM_ALARM, member | nil, kind]                         (format 6)
    compare = [key, target, expected]      target: 1 version, 2 value, 3 exists
    op      = [1, key, value] (put) | [2, key] (delete) | [3, key] (get)
            | [4, key, by] (incr) | [5, key, suffix] (append)

Commands are NamedTuples rather than frozen dataclasses: a batch of 1000 puts
builds 1000 of them per entry, and a NamedTuple costs a fifth as much.

A compare-and-set is a put or delete with an ``expected_version``: the key's
current version must equal it, and 0 means "the key must not exist".

A :class:`Txn` is etcd's compare / success / failure: if every compare holds
against the state at that point of the batch, the success ops run, otherwise
the failure ops, all inside the one command, so every replica applies all of
its writes or none. A compare's ``expected`` is typed by its target: a
non-negative int for VERSION (0 = "does not exist"), bytes for VALUE (an
absent key never matches), a bool for EXISTS. Decoding checks those types;
encoding checks them too (ValueError), so a proposer's mistake fails its own
request rather than poisoning the raft entry of every command it was
group-committed with. The size limit (:data:`MAX_TXN_OPS`) is not a decode
error for the same reason: an oversized txn decodes, and the state machine
answers it alone with ``txn_too_large``.

NamedTuples compare as plain tuples: ``TxnDelete(k) == TxnGet(k)`` is True.
Dispatch on the type (as the encoder and the state machine do), never on
equality.

Counters: :class:`Incr` and :class:`Append` are read-modify-write commands
decided at apply time, so a retry that applies twice is visible (the counter
over-counts); :class:`Produced` wraps a client write with its idempotent
producer's id, epoch and sequence so that a retry never applies twice
(node/state/producers.py has the rules). Integers are signed 64-bit.

:class:`AuditCut` (tag 12) marks a consistency-audit cut: it writes no
record; once the entry holding it is applied, every node exports its state
as of that entry (node/audit/export.py). ``audit_id`` is 1 to 64 characters
of ``A-Z a-z 0-9 . _ -`` (not "." or "..": it names a directory); the split
points (at most :data:`MAX_AUDIT_BUCKETS` - 1) are strictly ascending,
non-empty byte strings of at most :data:`MAX_SPLIT_POINT_BYTES` bytes. They
travel in the command because replicas may diverge: every node must cut its
key range at the same places. Encoding checks all of it (ValueError), decoding
too (EntryDecodeError).

Producer limits: an :class:`InitProducer` of four fields carries the most
producers the cluster may hold (the proposing leader's ``--max-producers``): a
new producer past it is refused with ``too_many_producers``. The three-field
form, which journals written before the limit hold, has no limit. An
:class:`ExpireProducers` of three fields is one slice of the expiry sweep: it
looks at no more than ``limit`` producers, in key order, after the one whose
id is ``after_producer_id`` (nil: from the first). The one-field form, in older
journals, sweeps every producer in one entry, as it always did.

Tags and the format byte are part of the on-disk raft journal: never reuse or
renumber them, and never change what an existing form means; add new tags (or,
as above, longer forms of a command) instead.

Format versions. An entry is written with the lowest format that can hold it,
so a cluster in a rolling upgrade keeps working until a newer form is used:

- 1: the forms above but the three below.
- 2: a txn's fifth field ``max_result_bytes`` (the most bytes its get ops may
  return, the proposing node's ``--max-txn-result-bytes``), an init
  producer's fourth field ``max_producers`` and the three-field expiry slice.
  Each travels in the entry because it changes what the command writes: every
  replica must decide it with the same number, and a command written before
  the field existed replays as it first ran.

- 3: :class:`AuthChange` (tag 13, node/state/auth_commands.py): users, roles,
  permissions and the enabled flag of authentication.
- 4: leases and locks (tags 14 to 22, node/state/lease_commands.py), a write
  guarded by a lock's fencing token (:class:`Fenced`, tag 23:
  ``[TAG_FENCED, lock name, token, command]``) and a txn put op attached to a
  lease (``[6, key, value, lease_id]``).
- 5: :class:`Load` (tag 24, node/state/load_command.py): a bulk load chunk,
  many plain puts as one command (POST /v1/kv:load).
- 6: alarms (tags 25 and 26, node/state/alarm_commands.py): a member raises a
  ``nospace`` alarm, an operator disarms it (node/state/alarms.py).

A node refuses an entry of a format above :data:`FORMAT_VERSION`
(:class:`UnsupportedEntryVersion`) and stalls on it instead of skipping it,
so upgrade the followers first and the leader last (docs/OPERATIONS.md).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgpack

from node.errors import EntryDecodeError, UnsupportedEntryVersion
from node.state.alarm_commands import (
    AlarmCommand,
    DisarmAlarm,
    RaiseAlarm,
    decode_alarm_command,
    encode_alarm_command,
    is_alarm_command,
)
from node.state.auth_commands import AuthChange, decode_auth, encode_auth
from node.state.lease_commands import (
    TAG_FENCED,
    LeaseCommand,
    LeasedPut,
    TtlPut,
    decode_lease_command,
    encode_lease_command,
    is_lease_command,
)
from node.state.leases import lock_name_problem
from node.state.load_command import TAG_LOAD, Load, decode_load, encode_load, load_bytes
from node.storage.key_order import LONG_KEY_PREFIX

FORMAT_VERSION = 6
"""The newest entry format this node reads and writes (the module docstring lists them)."""

TAG_PUT = 1
TAG_DELETE = 2
TAG_BARRIER = 3
TAG_TXN = 4
# Member directory records (only a node proposes them, never a client).
TAG_SET_MEMBER = 5
TAG_REMOVE_MEMBER = 6
TAG_INCR = 7
TAG_APPEND = 8
TAG_INIT_PRODUCER = 9
TAG_PRODUCED = 10
TAG_EXPIRE_PRODUCERS = 11
TAG_AUDIT_CUT = 12
TAG_AUTH = 13

# Op tags inside a txn (their own numbering; equally never renumbered).
TXN_OP_PUT = 1
TXN_OP_DELETE = 2
TXN_OP_GET = 3
TXN_OP_INCR = 4
TXN_OP_APPEND = 5
TXN_OP_PUT_LEASED = 6

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

MAX_TXN_OPS = 10_000
"""Most compares + success ops + failure ops one txn may hold; above it the state
machine answers ``txn_too_large`` and applies nothing. Every replica must run
the same limit, like ``max_value_bytes``."""


def payload_bytes(command: object) -> int:
    """About how many bytes ``command`` takes in an entry: its keys, values and texts,
    and a few bytes per field (what bounds an entry's size, raft/proposer.py)."""
    if type(command) is Load:
        return load_bytes(command)
    if isinstance(command, bytes | str):
        return len(command)
    if isinstance(command, tuple):
        return 4 + sum(payload_bytes(field) for field in command)
    return 8


def batching_bytes(command: object) -> int:
    """What ``command`` counts for when group commit fills an entry (raft/proposer.py):
    its :func:`payload_bytes`, and for a txn that reads, the most its results may take,
    since every replica holds an entry's results while it applies it."""
    inner = command.command if isinstance(command, Produced) else command
    bound = 0
    if isinstance(inner, Txn) and inner.reads and inner.max_result_bytes is not None:
        bound = inner.max_result_bytes
    return payload_bytes(command) + bound


class Put(NamedTuple):
    """Set ``key`` to ``value``; with ``expected_version`` it is a compare-and-set."""

    key: bytes
    value: bytes
    expected_version: int | None = None


class Delete(NamedTuple):
    """Delete ``key`` (a tombstone record); ``expected_version`` makes it conditional."""

    key: bytes
    expected_version: int | None = None


class Barrier(NamedTuple):
    """A no-op that proves everything before it has been applied (read barriers)."""


class CompareTarget(enum.IntEnum):
    """What a :class:`Compare` looks at; values are part of the encoding."""

    VERSION = 1
    VALUE = 2
    EXISTS = 3


class Compare(NamedTuple):
    """A txn guard: ``key``'s ``target`` equals ``expected`` (see the module docs)."""

    key: bytes
    target: CompareTarget
    expected: int | bytes | bool


class TxnPut(NamedTuple):
    """``lease``: the lease the key is attached to (0: none, the form before format 4)."""

    key: bytes
    value: bytes
    lease: int = 0


class TxnDelete(NamedTuple):
    """Deleting an absent key inside a txn is not an error: it finds nothing and writes nothing."""

    key: bytes


class TxnGet(NamedTuple):
    """Reads ``key`` as the txn sees it, after the earlier ops of the same branch."""

    key: bytes


class TxnIncr(NamedTuple):
    """Adds ``by`` to the key's integer (an absent key counts as 0); it can fail
    (not an integer, overflow), which fails the whole txn with no effect."""

    key: bytes
    by: int


class TxnAppend(NamedTuple):
    """Appends ``suffix`` to the key's value (an absent key counts as empty)."""

    key: bytes
    suffix: bytes


TxnOp = TxnPut | TxnDelete | TxnGet | TxnIncr | TxnAppend


MAX_AUDIT_BUCKETS = 1024
"""The most key-range buckets an audit export may have (split points + 1)."""
MAX_SPLIT_POINT_BYTES = LONG_KEY_PREFIX
"""The longest split point: the long-key prefix of node/storage/key_order.py, so every
bucket is one contiguous run of LMDB's order."""
_AUDIT_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def audit_id_problem(audit_id: object) -> str | None:
    """Why ``audit_id`` cannot name an audit, or None."""
    if (
        not isinstance(audit_id, str)
        or not _AUDIT_ID.fullmatch(audit_id)
        or audit_id in (".", "..")
    ):
        return (
            "an audit id is 1 to 64 characters of A-Z a-z 0-9 . _ - "
            f'(and not "." or ".."), not {audit_id!r:.80}'
        )
    return None


def split_points_problem(split_points: object) -> str | None:
    """Why ``split_points`` cannot cut an audit's key range, or None."""
    if not isinstance(split_points, tuple | list):
        return f"split points must be a sequence of bytes, not {type(split_points).__name__}"
    if len(split_points) >= MAX_AUDIT_BUCKETS:
        return f"at most {MAX_AUDIT_BUCKETS - 1} split points, not {len(split_points)}"
    previous = b""
    for i, point in enumerate(split_points):
        if type(point) is not bytes or not 0 < len(point) <= MAX_SPLIT_POINT_BYTES:
            return f"split point {i} must be 1 to {MAX_SPLIT_POINT_BYTES} bytes, not {point!r:.80}"
        if point <= previous:
            return f"split points must be strictly ascending (split point {i})"
        previous = point
    return None


class Txn(NamedTuple):
    """If every compare holds, run ``success`` in order, else ``failure``; one command."""

    compares: tuple[Compare, ...] = ()
    success: tuple[TxnOp, ...] = ()
    failure: tuple[TxnOp, ...] = ()
    max_result_bytes: int | None = None
    """Most bytes (keys and values) the get ops of the branch that runs may return;
    beyond it the txn writes nothing and answers ``txn_result_too_large``. None:
    no bound (a txn of format 1)."""

    @property
    def reads(self) -> bool:
        """Whether a get op may return a value (either branch)."""
        return any(isinstance(op, TxnGet) for op in (*self.success, *self.failure))

    @property
    def size(self) -> int:
        """What :data:`MAX_TXN_OPS` limits: compares plus the ops of both branches."""
        return len(self.compares) + len(self.success) + len(self.failure)


class SetMember(NamedTuple):
    """Record a member in the replicated directory (\\x00rkv/members/<id> -> JSON)."""

    node_id: str
    raft_address: str
    http_url: str


class RemoveMember(NamedTuple):
    """Remove a member's directory record (no-op if absent)."""

    node_id: str


class Incr(NamedTuple):
    """Add ``by`` to the signed 64-bit decimal integer stored at ``key`` (absent: 0)."""

    key: bytes
    by: int


class Append(NamedTuple):
    """Append ``suffix`` to the value at ``key`` (absent: an empty value)."""

    key: bytes
    suffix: bytes


class InitProducer(NamedTuple):
    """Allocate an idempotent producer, or bump the epoch of the one registered
    under ``transactional_id`` (fencing its older epoch). ``expiry_ms`` is how long
    the producer may stay idle, ``max_producers`` how many producers the cluster
    may hold (None: no limit, the form of older journals); both carried in the
    entry so every replica decides the same."""

    transactional_id: str | None
    expiry_ms: int
    max_producers: int | None = None


class ExpireProducers(NamedTuple):
    """Delete the state of producers idle past their expiry (the leader proposes it
    now and then; each replica decides with the entry's timestamp). With ``limit``,
    one slice of the sweep: at most ``limit`` producers looked at, after the one
    whose id is ``after`` (None: from the first). Without, every producer (the form
    of older journals)."""

    after: int | None = None
    limit: int | None = None


class AuditCut(NamedTuple):
    """The cut of a consistency audit (see the module docs); writes no record."""

    audit_id: str
    split_points: tuple[bytes, ...] = ()


class Fenced(NamedTuple):
    """``command``, applied only while lock ``name`` is held with ``token`` (else
    ``fenced``, nothing written): ``Rkv-Fencing: NAME=TOKEN``."""

    name: str
    token: int
    command: Put | Delete | Txn | Incr | Append | LeasedPut | TtlPut


ProducibleCommand = Put | Delete | Txn | Incr | Append | LeasedPut | TtlPut | Fenced


class Produced(NamedTuple):
    """``command`` sent by an idempotent producer as its ``sequence``-th write."""

    producer_id: int
    epoch: int
    sequence: int
    command: ProducibleCommand


Command = (
    Put
    | Delete
    | Barrier
    | Txn
    | SetMember
    | RemoveMember
    | Incr
    | Append
    | InitProducer
    | Produced
    | ExpireProducers
    | AuditCut
    | AuthChange
    | LeaseCommand
    | Fenced
    | Load
    | AlarmCommand
)


@dataclass(frozen=True, slots=True)
class Batch:
    """One raft entry: commands applied in order, one result each."""

    commands: tuple[Command, ...]
    timestamp_ms: int = 0


def _compare_problem(target: Any, expected: Any) -> str | None:
    """Why ``expected`` does not fit ``target``, or None. ``type() is`` on purpose:
    True is an int and 1 == True, so only the exact type tells them apart."""
    if target == CompareTarget.VERSION:
        if type(expected) is not int or expected < 0:
            return f"a version compare expects a non-negative integer, not {expected!r:.80}"
    elif target == CompareTarget.VALUE:
        if type(expected) is not bytes:
            return f"a value compare expects bytes, not {type(expected).__name__}"
    elif target == CompareTarget.EXISTS:
        if type(expected) is not bool:
            return f"an exists compare expects a bool, not {type(expected).__name__}"
    else:
        return f"unknown compare target {target!r:.80}"
    return None


def _encode_compare(compare: Compare) -> list[Any]:
    key, target, expected = compare
    problem = _compare_problem(target, expected)
    if problem is not None:
        raise ValueError(f"cannot encode {compare!r:.120}: {problem}")
    return [key, int(target), expected]


def _encode_op(op: TxnOp) -> list[Any]:
    if isinstance(op, TxnPut):
        if op.lease:
            if type(op.lease) is not int or not 1 <= op.lease <= INT64_MAX:
                raise ValueError(f"a lease id is a positive integer, not {op.lease!r:.40}")
            return [TXN_OP_PUT_LEASED, op.key, op.value, op.lease]
        return [TXN_OP_PUT, op.key, op.value]
    if isinstance(op, TxnDelete):
        return [TXN_OP_DELETE, op.key]
    if isinstance(op, TxnGet):
        return [TXN_OP_GET, op.key]
    if isinstance(op, TxnIncr):
        _check_int64(op.by)
        return [TXN_OP_INCR, op.key, op.by]
    if isinstance(op, TxnAppend):
        return [TXN_OP_APPEND, op.key, op.suffix]
    raise ValueError(f"not a txn op: {op!r:.120}")


def _encode_command(command: Command) -> list[Any]:
    if isinstance(command, Put):
        return [TAG_PUT, command.key, command.value, command.expected_version]
    if isinstance(command, Delete):
        return [TAG_DELETE, command.key, command.expected_version]
    if isinstance(command, Txn):
        encoded = [
            TAG_TXN,
            [_encode_compare(c) for c in command.compares],
            [_encode_op(op) for op in command.success],
            [_encode_op(op) for op in command.failure],
        ]
        if command.max_result_bytes is not None:
            if type(command.max_result_bytes) is not int or command.max_result_bytes < 0:
                raise ValueError("max_result_bytes must be a non-negative integer")
            encoded.append(command.max_result_bytes)
        return encoded
    if isinstance(command, SetMember):
        return [TAG_SET_MEMBER, command.node_id, command.raft_address, command.http_url]
    if isinstance(command, RemoveMember):
        return [TAG_REMOVE_MEMBER, command.node_id]
    if isinstance(command, Incr):
        _check_int64(command.by)
        return [TAG_INCR, command.key, command.by]
    if isinstance(command, Append):
        return [TAG_APPEND, command.key, command.suffix]
    if isinstance(command, InitProducer):
        if command.max_producers is None:
            return [TAG_INIT_PRODUCER, command.transactional_id, command.expiry_ms]
        _check_count(command.max_producers, "max_producers")
        return [
            TAG_INIT_PRODUCER,
            command.transactional_id,
            command.expiry_ms,
            command.max_producers,
        ]
    if isinstance(command, Produced):
        if isinstance(command.command, Produced):
            raise ValueError("a produced command cannot wrap another one")
        for number in (command.producer_id, command.epoch, command.sequence):
            if type(number) is not int or not 0 <= number <= INT64_MAX:
                raise ValueError(f"producer fields must be integers in 0..{INT64_MAX}")
        return [
            TAG_PRODUCED,
            command.producer_id,
            command.epoch,
            command.sequence,
            _encode_command(command.command),
        ]
    if isinstance(command, ExpireProducers):
        if command.limit is None:
            if command.after is not None:
                raise ValueError("an expiry slice that starts after a producer needs a limit")
            return [TAG_EXPIRE_PRODUCERS]
        _check_count(command.limit, "an expiry slice's limit")
        if command.after is not None and (
            type(command.after) is not int or not 0 <= command.after <= INT64_MAX
        ):
            raise ValueError(f"an expiry slice starts after a producer id, not {command.after!r}")
        return [TAG_EXPIRE_PRODUCERS, command.after, command.limit]
    if isinstance(command, AuditCut):
        problem = audit_id_problem(command.audit_id) or split_points_problem(command.split_points)
        if problem is not None:
            raise ValueError(f"cannot encode an audit snapshot: {problem}")
        return [TAG_AUDIT_CUT, command.audit_id, list(command.split_points)]
    if isinstance(command, AuthChange):
        return encode_auth(command, TAG_AUTH)
    if isinstance(command, Fenced):
        return _encode_fenced(command)
    if isinstance(command, Load):
        return encode_load(command)
    if isinstance(command, RaiseAlarm | DisarmAlarm):
        return encode_alarm_command(command)
    if not isinstance(command, Barrier):
        return encode_lease_command(command)
    return [TAG_BARRIER]


def _encode_fenced(command: Fenced) -> list[Any]:
    problem = lock_name_problem(command.name)
    if problem is not None:
        raise ValueError(f"cannot encode a fenced write: {problem}")
    if type(command.token) is not int or not 0 <= command.token <= INT64_MAX:
        raise ValueError(f"a fencing token is an integer in 0..{INT64_MAX}")
    if isinstance(command.command, Fenced | Produced):
        raise ValueError("a fenced write wraps a plain write")
    return [TAG_FENCED, command.name, command.token, _encode_command(command.command)]


def _check_int64(number: int) -> None:
    if type(number) is not int or not INT64_MIN <= number <= INT64_MAX:
        raise ValueError(f"an increment must be a signed 64-bit integer, not {number!r:.40}")


def _check_count(number: int, what: str) -> None:
    if type(number) is not int or not 1 <= number <= INT64_MAX:
        raise ValueError(f"{what} must be a positive integer, not {number!r:.40}")


def _str(value: Any, what: str) -> str:
    if type(value) is not str or not value:
        raise EntryDecodeError(f"{what} must be a non-empty string, not {value!r:.80}")
    return value


def encode_entry(batch: Batch) -> bytes:
    """Encode a batch as entry bytes for the raft log.

    Raises ValueError for a txn that decoding would refuse (a compare whose
    ``expected`` does not fit its target, something that is not a txn op).
    """
    payload = [batch.timestamp_ms, [_encode_command(c) for c in batch.commands]]
    packed: bytes = msgpack.packb(payload, use_bin_type=True)
    return bytes((_format_of(batch),)) + packed


def _format_of(batch: Batch) -> int:
    """The lowest format that holds every command of ``batch``."""
    if any(isinstance(command, RaiseAlarm | DisarmAlarm) for command in batch.commands):
        return 6
    if any(type(command) is Load for command in batch.commands):
        return 5
    if any(_needs_format_4(command) for command in batch.commands):
        return 4
    if any(isinstance(command, AuthChange) for command in batch.commands):
        return 3
    for command in batch.commands:
        inner = command.command if isinstance(command, Produced) else command
        if isinstance(inner, Txn) and inner.max_result_bytes is not None:
            return 2
        if isinstance(inner, InitProducer) and inner.max_producers is not None:
            return 2
        if isinstance(inner, ExpireProducers) and inner.limit is not None:
            return 2
    return 1


_LEASE_TYPES = LeaseCommand.__args__


def _needs_format_4(command: Command) -> bool:
    """Leases, locks, fenced writes and txn puts attached to a lease."""
    inner = command.command if isinstance(command, Produced) else command
    if isinstance(inner, (Fenced, *_LEASE_TYPES)):
        return True
    return isinstance(inner, Txn) and any(
        isinstance(op, TxnPut) and op.lease for op in (*inner.success, *inner.failure)
    )


def _expected(value: Any) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise EntryDecodeError(f"expected_version must be a non-negative integer, not {value!r}")
    return value


def _bytes(value: Any, what: str) -> bytes:
    if type(value) is not bytes:
        raise EntryDecodeError(f"{what} must be bytes, not {type(value).__name__}")
    return value


_TARGETS = {target.value: target for target in CompareTarget}


def _array(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise EntryDecodeError(f"{what} must be an array, not {value!r:.80}")
    return value


def _decode_compare(raw: Any) -> Compare:
    if not isinstance(raw, list) or len(raw) != 3:
        raise EntryDecodeError(f"a compare must be [key, target, expected], not {raw!r:.80}")
    key, target, expected = raw
    if type(target) is not int or target not in _TARGETS:
        raise EntryDecodeError(f"unknown compare target {target!r:.80}")
    problem = _compare_problem(target, expected)
    if problem is not None:
        raise EntryDecodeError(problem)
    return Compare(_bytes(key, "compare key"), _TARGETS[target], expected)


def _decode_op(raw: Any) -> TxnOp:
    if not isinstance(raw, list) or not raw:
        raise EntryDecodeError(f"a txn op must be a non-empty array, not {raw!r:.80}")
    tag = raw[0]
    if tag == TXN_OP_PUT and len(raw) == 3:
        return TxnPut(_bytes(raw[1], "key"), _bytes(raw[2], "value"))
    if tag == TXN_OP_PUT_LEASED and len(raw) == 4:
        return TxnPut(_bytes(raw[1], "key"), _bytes(raw[2], "value"), _positive(raw[3], "lease"))
    if tag == TXN_OP_DELETE and len(raw) == 2:
        return TxnDelete(_bytes(raw[1], "key"))
    if tag == TXN_OP_GET and len(raw) == 2:
        return TxnGet(_bytes(raw[1], "key"))
    if tag == TXN_OP_INCR and len(raw) == 3:
        return TxnIncr(_bytes(raw[1], "key"), _int64(raw[2]))
    if tag == TXN_OP_APPEND and len(raw) == 3:
        return TxnAppend(_bytes(raw[1], "key"), _bytes(raw[2], "suffix"))
    raise EntryDecodeError(f"unknown txn op tag {tag!r:.80} with {len(raw)} fields")


def _decode_txn(raw: list[Any]) -> Txn:
    compares, success, failure = raw[1:4]
    max_result_bytes = None
    if len(raw) == 5:
        max_result_bytes = raw[4]
        if type(max_result_bytes) is not int or not 0 <= max_result_bytes <= INT64_MAX:
            raise EntryDecodeError(
                f"max_result_bytes must be a non-negative integer, not {max_result_bytes!r:.40}"
            )
    return Txn(
        tuple(_decode_compare(c) for c in _array(compares, "txn compares")),
        tuple(_decode_op(op) for op in _array(success, "txn success ops")),
        tuple(_decode_op(op) for op in _array(failure, "txn failure ops")),
        max_result_bytes,
    )


def _int64(value: Any) -> int:
    if type(value) is not int or not INT64_MIN <= value <= INT64_MAX:
        raise EntryDecodeError(f"an increment must be a signed 64-bit integer, not {value!r:.40}")
    return value


def _uint(value: Any, what: str) -> int:
    if type(value) is not int or not 0 <= value <= INT64_MAX:
        raise EntryDecodeError(f"{what} must be an integer in 0..{INT64_MAX}, not {value!r:.40}")
    return value


def _positive(value: Any, what: str) -> int:
    if type(value) is not int or not 1 <= value <= INT64_MAX:
        raise EntryDecodeError(f"{what} must be an integer in 1..{INT64_MAX}, not {value!r:.40}")
    return value


_WRITES = (Put, Delete, Txn, Incr, Append, LeasedPut, TtlPut)


def _decode_fenced(raw: list[Any]) -> Fenced:
    _, name, token, inner_raw = raw
    problem = lock_name_problem(name)
    if problem is not None:
        raise EntryDecodeError(f"malformed fenced write: {problem}")
    inner = _decode_command(inner_raw)
    if not isinstance(inner, _WRITES):
        raise EntryDecodeError(f"a fenced write cannot wrap {type(inner).__name__}")
    return Fenced(name, _uint(token, "fencing token"), inner)


def _decode_produced(raw: list[Any]) -> Produced:
    inner = _decode_command(raw[4])
    if not isinstance(inner, (*_WRITES, Fenced)):
        raise EntryDecodeError(f"a producer cannot send {type(inner).__name__}")
    return Produced(
        _uint(raw[1], "producer id"), _uint(raw[2], "epoch"), _uint(raw[3], "sequence"), inner
    )


def _decode_audit(raw: list[Any]) -> AuditCut:
    _, audit_id, split_points = raw
    problem = audit_id_problem(audit_id)
    if problem is None and not isinstance(split_points, list):
        problem = f"split points must be an array, not {split_points!r:.80}"
    if problem is None:
        problem = split_points_problem(split_points)
    if problem is not None:
        raise EntryDecodeError(f"malformed audit snapshot: {problem}")
    return AuditCut(audit_id, tuple(split_points))


def _decode_command(raw: Any) -> Command:
    if not isinstance(raw, list) or not raw:
        raise EntryDecodeError(f"a command must be a non-empty array, not {raw!r:.80}")
    tag = raw[0]
    if tag == TAG_PUT and len(raw) == 4:
        return Put(_bytes(raw[1], "key"), _bytes(raw[2], "value"), _expected(raw[3]))
    if tag == TAG_DELETE and len(raw) == 3:
        return Delete(_bytes(raw[1], "key"), _expected(raw[2]))
    if tag == TAG_BARRIER and len(raw) == 1:
        return Barrier()
    if tag == TAG_TXN and len(raw) in (4, 5):
        return _decode_txn(raw)
    if tag == TAG_SET_MEMBER and len(raw) == 4:
        return SetMember(
            _str(raw[1], "member id"), _str(raw[2], "raft address"), _str(raw[3], "member URL")
        )
    if tag == TAG_REMOVE_MEMBER and len(raw) == 2:
        return RemoveMember(_str(raw[1], "member id"))
    if tag == TAG_INCR and len(raw) == 3:
        return Incr(_bytes(raw[1], "key"), _int64(raw[2]))
    if tag == TAG_APPEND and len(raw) == 3:
        return Append(_bytes(raw[1], "key"), _bytes(raw[2], "suffix"))
    if tag == TAG_INIT_PRODUCER and len(raw) in (3, 4):
        tid = None if raw[1] is None else _str(raw[1], "transactional id")
        limit = None if len(raw) == 3 else _positive(raw[3], "max producers")
        return InitProducer(tid, _uint(raw[2], "producer expiry"), limit)
    if tag == TAG_PRODUCED and len(raw) == 5:
        return _decode_produced(raw)
    if tag == TAG_EXPIRE_PRODUCERS and len(raw) == 1:
        return ExpireProducers()
    if tag == TAG_EXPIRE_PRODUCERS and len(raw) == 3:
        after = None if raw[1] is None else _uint(raw[1], "expiry slice start")
        return ExpireProducers(after, _positive(raw[2], "expiry slice limit"))
    if tag == TAG_AUDIT_CUT and len(raw) == 3:
        return _decode_audit(raw)
    if tag == TAG_AUTH and len(raw) == 8:
        return decode_auth(raw)
    if tag == TAG_FENCED and len(raw) == 4:
        return _decode_fenced(raw)
    if tag == TAG_LOAD and len(raw) == 3:
        return decode_load(raw)
    if is_alarm_command(raw):
        return decode_alarm_command(raw)
    if is_lease_command(raw):
        return decode_lease_command(raw)
    raise EntryDecodeError(f"unknown command tag {tag!r} with {len(raw)} fields")


def encode_command(command: Command) -> bytes:
    """One command alone, outside any entry (an HTTP worker sends the writes it built
    to its main process this way, node/cli/write_link.py): the lowest entry format
    byte that holds it, then the msgpack array an entry holds for it."""
    packed: bytes = msgpack.packb(_encode_command(command), use_bin_type=True)
    return bytes((_format_of(Batch((command,))),)) + packed


def decode_command(data: bytes) -> Command:
    """The command :func:`encode_command` encoded; EntryDecodeError when malformed."""
    if not data:
        raise EntryDecodeError("empty command")
    if not 1 <= data[0] <= FORMAT_VERSION:
        raise UnsupportedEntryVersion(data[0])
    try:
        raw = msgpack.unpackb(data[1:], raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise EntryDecodeError(f"command is not valid msgpack: {exc}") from exc
    command = _decode_command(raw)
    if _format_of(Batch((command,))) > data[0]:
        raise EntryDecodeError(f"format {data[0]} cannot hold this command")
    return command


def decode_entry(data: bytes) -> Batch:
    """Decode entry bytes; raises :class:`EntryDecodeError` for anything malformed."""
    if not data:
        raise EntryDecodeError("empty entry")
    if not 1 <= data[0] <= FORMAT_VERSION:
        raise UnsupportedEntryVersion(data[0])
    try:
        payload = msgpack.unpackb(data[1:], raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise EntryDecodeError(f"entry is not valid msgpack: {exc}") from exc
    if not isinstance(payload, list) or len(payload) != 2:
        raise EntryDecodeError("entry must be [timestamp_ms, commands]")
    timestamp_ms, raw_commands = payload
    if type(timestamp_ms) is not int or not isinstance(raw_commands, list):
        raise EntryDecodeError("entry must be [timestamp_ms: int, commands: array]")
    batch = Batch(tuple(_decode_command(c) for c in raw_commands), timestamp_ms)
    if _format_of(batch) > data[0]:
        raise EntryDecodeError(f"entry format {data[0]} holds a command of a later format")
    return batch
