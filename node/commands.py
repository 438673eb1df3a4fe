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
            | [TAG_SET_MEMBER, node_id, raft_address, http_url]
            | [TAG_REMOVE_MEMBER, node_id]
    compare = [key, target, expected]      target: 1 version, 2 value, 3 exists
    op      = [1, key, value] (put) | [2, key] (delete) | [3, key] (get)

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

Tags and the format byte are part of the on-disk raft journal: never reuse or
renumber them; add new tags instead.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgpack

from node.errors import EntryDecodeError, UnsupportedEntryVersion

FORMAT_VERSION = 1

TAG_PUT = 1
TAG_DELETE = 2
TAG_BARRIER = 3
TAG_TXN = 4
# Member directory records (only a node proposes them, never a client).
TAG_SET_MEMBER = 5
TAG_REMOVE_MEMBER = 6

# Op tags inside a txn (their own numbering; equally never renumbered).
TXN_OP_PUT = 1
TXN_OP_DELETE = 2
TXN_OP_GET = 3

MAX_TXN_OPS = 10_000
"""Most compares + success ops + failure ops one txn may hold; above it the state
machine answers ``txn_too_large`` and applies nothing. Every replica must run
the same limit, like ``max_value_bytes``."""


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
    key: bytes
    value: bytes


class TxnDelete(NamedTuple):
    """Deleting an absent key inside a txn is not an error: it finds nothing and writes nothing."""

    key: bytes


class TxnGet(NamedTuple):
    """Reads ``key`` as the txn sees it, after the earlier ops of the same branch."""

    key: bytes


TxnOp = TxnPut | TxnDelete | TxnGet


class Txn(NamedTuple):
    """If every compare holds, run ``success`` in order, else ``failure``; one command."""

    compares: tuple[Compare, ...] = ()
    success: tuple[TxnOp, ...] = ()
    failure: tuple[TxnOp, ...] = ()

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


Command = Put | Delete | Barrier | Txn | SetMember | RemoveMember


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
        return [TXN_OP_PUT, op.key, op.value]
    if isinstance(op, TxnDelete):
        return [TXN_OP_DELETE, op.key]
    if isinstance(op, TxnGet):
        return [TXN_OP_GET, op.key]
    raise ValueError(f"not a txn op: {op!r:.120}")


def _encode_command(command: Command) -> list[Any]:
    if isinstance(command, Put):
        return [TAG_PUT, command.key, command.value, command.expected_version]
    if isinstance(command, Delete):
        return [TAG_DELETE, command.key, command.expected_version]
    if isinstance(command, Txn):
        return [
            TAG_TXN,
            [_encode_compare(c) for c in command.compares],
            [_encode_op(op) for op in command.success],
            [_encode_op(op) for op in command.failure],
        ]
    if isinstance(command, SetMember):
        return [TAG_SET_MEMBER, command.node_id, command.raft_address, command.http_url]
    if isinstance(command, RemoveMember):
        return [TAG_REMOVE_MEMBER, command.node_id]
    return [TAG_BARRIER]


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
    return bytes((FORMAT_VERSION,)) + packed


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
    if tag == TXN_OP_DELETE and len(raw) == 2:
        return TxnDelete(_bytes(raw[1], "key"))
    if tag == TXN_OP_GET and len(raw) == 2:
        return TxnGet(_bytes(raw[1], "key"))
    raise EntryDecodeError(f"unknown txn op tag {tag!r:.80} with {len(raw)} fields")


def _decode_txn(raw: list[Any]) -> Txn:
    _, compares, success, failure = raw
    return Txn(
        tuple(_decode_compare(c) for c in _array(compares, "txn compares")),
        tuple(_decode_op(op) for op in _array(success, "txn success ops")),
        tuple(_decode_op(op) for op in _array(failure, "txn failure ops")),
    )


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
    if tag == TAG_TXN and len(raw) == 4:
        return _decode_txn(raw)
    if tag == TAG_SET_MEMBER and len(raw) == 4:
        return SetMember(
            _str(raw[1], "member id"), _str(raw[2], "raft address"), _str(raw[3], "member URL")
        )
    if tag == TAG_REMOVE_MEMBER and len(raw) == 2:
        return RemoveMember(_str(raw[1], "member id"))
    raise EntryDecodeError(f"unknown command tag {tag!r} with {len(raw)} fields")


def decode_entry(data: bytes) -> Batch:
    """Decode entry bytes; raises :class:`EntryDecodeError` for anything malformed."""
    if not data:
        raise EntryDecodeError("empty entry")
    if data[0] != FORMAT_VERSION:
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
    return Batch(tuple(_decode_command(c) for c in raw_commands), timestamp_ms)
