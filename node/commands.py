"""Commands the state machine applies, and their versioned binary encoding.

A raft entry is one :class:`Batch`: the proposer's timestamp and the commands
that group commit gathered, each of which gets its own result. The encoding
is one format-version byte followed by a msgpack array, so a node can refuse
an entry written by a newer format with a clear error instead of guessing::

    entry   = FORMAT_VERSION (1 byte) ++ msgpack([timestamp_ms, [command, ...]])
    command = [TAG_PUT, key, value, expected_version | nil]
            | [TAG_DELETE, key, expected_version | nil]
            | [TAG_BARRIER]

Commands are NamedTuples rather than frozen dataclasses: a batch of 1000 puts
builds 1000 of them per entry, and a NamedTuple costs a fifth as much.

A compare-and-set is a put or delete with an ``expected_version``: the key's
current version must equal it, and 0 means "the key must not exist".

Tags and the format byte are part of the on-disk raft journal: never reuse or
renumber them; add new tags instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import msgpack

from node.errors import EntryDecodeError, UnsupportedEntryVersion

FORMAT_VERSION = 1

TAG_PUT = 1
TAG_DELETE = 2
TAG_BARRIER = 3


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


Command = Put | Delete | Barrier


@dataclass(frozen=True, slots=True)
class Batch:
    """One raft entry: commands applied in order, one result each."""

    commands: tuple[Command, ...]
    timestamp_ms: int = 0


def _encode_command(command: Command) -> list[Any]:
    if isinstance(command, Put):
        return [TAG_PUT, command.key, command.value, command.expected_version]
    if isinstance(command, Delete):
        return [TAG_DELETE, command.key, command.expected_version]
    return [TAG_BARRIER]


def encode_entry(batch: Batch) -> bytes:
    """Encode a batch as entry bytes for the raft log."""
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
