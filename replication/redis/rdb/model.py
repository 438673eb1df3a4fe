"""What the RDB parser yields: events, and the values of the keys.

The parser turns the RDB into a flat sequence of events, one per record:
:class:`Aux` (header fields such as ``redis-ver``), :class:`Function` (a
function library, Redis 7), :class:`SelectDb`, :class:`ResizeDb`,
:class:`KeyValue` (one key with its decoded value) and finally :class:`End`.

Values are plain Python objects, whatever their on-disk encoding (the
``encoding`` field of :class:`KeyValue` names it):

=========  ================================================================
string     ``bytes`` (integer-encoded strings come back as decimal bytes)
list       ``list[bytes]``, head to tail
set        ``set[bytes]``
hash       ``dict[bytes, bytes]``
zset       ``list[tuple[bytes, float]]`` in file order (Redis writes big
           zsets from the highest score down, small ones ascending)
stream     :class:`Stream`
=========  ================================================================

Events are named tuples (cheap to build, one per key); stream parts are frozen
dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class StreamId(NamedTuple):
    """A stream entry ID, ``ms-seq``."""

    ms: int
    seq: int

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"


class StreamEntry(NamedTuple):
    """One live stream entry; ``fields`` keeps order and repeated field names."""

    id: StreamId
    fields: list[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class PendingEntry:
    """An entry of a consumer group's PEL: delivered, not yet acknowledged."""

    id: StreamId
    delivery_time_ms: int
    delivery_count: int
    #: The consumer it was delivered to (None if no consumer claims it).
    consumer: bytes | None


@dataclass(frozen=True, slots=True)
class StreamConsumer:
    """A consumer of a group, with the IDs of the entries pending for it."""

    name: bytes
    seen_time_ms: int
    #: Last successful read; stored since stream type 21 (RDB 11), else None.
    active_time_ms: int | None
    pending: list[StreamId]


@dataclass(frozen=True, slots=True)
class StreamGroup:
    """A consumer group."""

    name: bytes
    last_delivered_id: StreamId
    #: Entries read by the group; None if unknown (not stored before type 19,
    #: or stored as "invalid", which XINFO shows as nil).
    entries_read: int | None
    pel: list[PendingEntry]
    consumers: list[StreamConsumer]


@dataclass(frozen=True, slots=True)
class Stream:
    """A stream: its live entries (deleted ones are skipped) and metadata.

    For stream type 15 (RDB < 10), which does not store ``first_id``,
    ``max_deleted_id`` and ``entries_added``, they are derived as Redis does:
    the first live entry (or 0-0), 0-0 and ``length``.
    """

    entries: list[StreamEntry]
    length: int
    last_id: StreamId
    first_id: StreamId
    max_deleted_id: StreamId
    entries_added: int
    groups: list[StreamGroup]


Value = bytes | list[bytes] | set[bytes] | dict[bytes, bytes] | list[tuple[bytes, float]] | Stream


class Aux(NamedTuple):
    """An auxiliary header field (``redis-ver``, ``repl-id``, ``aof-base``...)."""

    name: bytes
    value: bytes


class SelectDb(NamedTuple):
    """The following keys belong to database ``db``."""

    db: int


class ResizeDb(NamedTuple):
    """Size hints for the current database."""

    db_size: int
    expires_size: int


class Function(NamedTuple):
    """A function library (``FUNCTION LOAD`` source, starting with ``#!``)."""

    code: bytes


class KeyValue(NamedTuple):
    """One key: its database, name, type, decoded value and expiry.

    ``type_name`` is the Redis type (``string``, ``list``, ``set``, ``zset``,
    ``hash``, ``stream``); ``encoding`` the RDB encoding it was read from
    (e.g. ``"hash_listpack"``, ``"set_intset"``, ``"list_quicklist_2"``);
    ``expire_ms`` the absolute expiry in Unix milliseconds, or None.
    """

    db: int
    key: bytes
    type_name: str
    value: Value
    expire_ms: int | None
    encoding: str


class End(NamedTuple):
    """The EOF opcode was reached.

    ``checksum_ok`` is True when the stored CRC-64 matched, None when it was not
    checked (stored as 0 because the master has ``rdbchecksum no``, absent
    before RDB 5, or verification turned off). A mismatch raises instead.
    ``checksum`` is the stored value (None before RDB 5).
    """

    checksum_ok: bool | None
    checksum: int | None


Event = Aux | SelectDb | ResizeDb | Function | KeyValue | End
