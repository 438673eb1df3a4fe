"""Stream values (RDB types 15, 19 and 21).

A stream is stored as:

1. a count of nodes, then per node a 16-byte key, the node's *master ID*
   (ms and seq as big-endian uint64), and a listpack holding its entries;
2. ``length`` (live entries), ``last_id`` (ms, seq); since type 19 also
   ``first_id``, ``max_deleted_id`` and ``entries_added`` (all lengths);
3. a count of consumer groups, then per group: name, ``last_id``, since type 19
   ``entries_read`` (-1, i.e. 2**64 - 1, when unknown), the group PEL (a count,
   then per entry a 16-byte big-endian ID, the 8-byte little-endian delivery
   time in ms and the delivery count), then a count of consumers and per
   consumer: name, seen time (8 bytes), since type 21 active time (8 bytes),
   and its pending IDs (a count, then 16-byte IDs, each one of the group PEL).

A node listpack starts with a *master entry*: ``count`` (live entries),
``deleted`` (deleted entries), the number of master fields, the master field
names, and a 0 terminator. Each entry follows as: ``flags`` (1 deleted,
2 same fields as the master entry), ``ms`` and ``seq`` as differences from the
master ID, then either the values of the master fields (same-fields flag) or a
field count and field/value pairs, and finally ``lp-count``, the number of
listpack items of the entry (fields + 3 or 2 * fields + 4) used to walk back.
Deleted entries are kept as tombstones until their node is rewritten; they are
skipped here.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from .errors import RdbError
from .listpack import ListpackItem, decode_listpack, item_bytes
from .model import PendingEntry, Stream, StreamConsumer, StreamEntry, StreamGroup, StreamId
from .reader import RdbReader, read_blob

FLAG_DELETED = 1
FLAG_SAME_FIELDS = 2
_U64 = (1 << 64) - 1
_ZERO = StreamId(0, 0)


def _int(item: ListpackItem, what: str) -> int:
    if isinstance(item, int):
        return item
    try:
        return int(item)
    except ValueError:
        raise RdbError(f"stream node: {what} is not an integer: {item[:40]!r}") from None


def decode_stream_node(
    blob: bytes, max_items: int | None = None, *, master: StreamId
) -> list[StreamEntry]:
    """The live entries of one stream node listpack whose master ID is ``master``
    (at most ``max_items`` listpack entries, else RdbLimitError)."""
    items = decode_listpack(blob, max_items)
    n = len(items)
    if n < 4:
        raise RdbError(f"stream node listpack has {n} items, too few for a master entry")
    count = _int(items[0], "entry count")
    deleted = _int(items[1], "deleted count")
    n_master = _int(items[2], "master field count")
    if not 0 <= n_master <= n - 4:
        raise RdbError(f"stream node master entry announces {n_master} fields")
    master_fields = [item_bytes(field) for field in items[3 : 3 + n_master]]
    if _int(items[3 + n_master], "master terminator") != 0:
        raise RdbError("stream node master entry does not end with 0")
    entries: list[StreamEntry] = []
    live = dead = 0
    i = 4 + n_master
    while i < n:
        if i + 3 > n:
            raise RdbError("stream node entry cut short")
        flags = _int(items[i], "entry flags")
        ms = (master.ms + _int(items[i + 1], "entry ms")) & _U64
        seq = (master.seq + _int(items[i + 2], "entry seq")) & _U64
        i += 3
        if flags & FLAG_SAME_FIELDS:
            if i + n_master + 1 > n:
                raise RdbError("stream node entry cut short")
            values = items[i : i + n_master]
            fields = [(f, item_bytes(v)) for f, v in zip(master_fields, values, strict=True)]
            i += n_master
            expected_lp_count = n_master + 3
        else:
            n_fields = _int(items[i], "entry field count") if i < n else -1
            i += 1
            if n_fields < 0 or i + 2 * n_fields + 1 > n:
                raise RdbError("stream node entry cut short")
            flat = [item_bytes(item) for item in items[i : i + 2 * n_fields]]
            fields = list(zip(flat[::2], flat[1::2], strict=True))
            i += 2 * n_fields
            expected_lp_count = 2 * n_fields + 4
        lp_count = _int(items[i], "entry lp-count")
        i += 1
        if lp_count != expected_lp_count:
            raise RdbError(f"stream node entry lp-count {lp_count}, expected {expected_lp_count}")
        if flags & FLAG_DELETED:
            dead += 1
        else:
            live += 1
            entries.append(StreamEntry(StreamId(ms, seq), fields))
    if live != count or dead != deleted:
        raise RdbError(
            f"stream node master entry counts {count} live and {deleted} deleted entries, "
            f"found {live} and {dead}"
        )
    return entries


def _elements(entries: Iterable[StreamEntry]) -> int:
    """What a node's entries are charged: the entry, its fields and values."""
    return sum(1 + 2 * len(entry.fields) for entry in entries)


def _raw_id(reader: RdbReader) -> StreamId:
    raw = reader.read(16)
    return StreamId(int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big"))


def _length_id(reader: RdbReader) -> StreamId:
    return StreamId(reader.read_length(), reader.read_length())


def _read_group(reader: RdbReader, version: int) -> StreamGroup:
    name = reader.read_string()
    last_id = _length_id(reader)
    entries_read: int | None = None
    if version >= 2:
        raw = reader.read_length()
        entries_read = None if raw == _U64 else raw
    pel: dict[StreamId, tuple[int, int]] = {}
    for _ in range(reader.read_count("stream PEL entry")):
        start = reader.position
        entry_id = _raw_id(reader)
        delivery_time = reader.read_int64_le()
        delivery_count = reader.read_length()
        if entry_id in pel:
            raise RdbError(f"group {name[:40]!r} has PEL entry {entry_id} twice", start)
        pel[entry_id] = (delivery_time, delivery_count)
    owners: dict[StreamId, bytes] = {}
    consumers: list[StreamConsumer] = []
    for _ in range(reader.read_count("stream consumer")):
        consumer = reader.read_string()
        seen_time = reader.read_int64_le()
        active_time = reader.read_int64_le() if version >= 3 else None
        pending: list[StreamId] = []
        for _ in range(reader.read_count("consumer PEL entry")):
            start = reader.position
            entry_id = _raw_id(reader)
            if entry_id not in pel or entry_id in owners:
                raise RdbError(
                    f"consumer {consumer[:40]!r} pending entry {entry_id} is not an "
                    "unclaimed entry of its group PEL",
                    start,
                )
            owners[entry_id] = consumer
            pending.append(entry_id)
        consumers.append(StreamConsumer(consumer, seen_time, active_time, pending))
    entries = [
        PendingEntry(entry_id, time, count, owners.get(entry_id))
        for entry_id, (time, count) in pel.items()
    ]
    return StreamGroup(name, last_id, entries_read, entries, consumers)


def read_stream(reader: RdbReader, version: int) -> Stream:
    """A stream value of stream type ``version`` (1: type 15, 2: type 19,
    3: type 21)."""
    entries: list[StreamEntry] = []
    for _ in range(reader.read_count("stream node")):
        start = reader.position
        key = reader.read_string()
        if len(key) != 16:
            raise RdbError(f"stream node key has {len(key)} bytes, a stream ID has 16", start)
        master = StreamId(int.from_bytes(key[:8], "big"), int.from_bytes(key[8:], "big"))
        entries += read_blob(
            reader, partial(decode_stream_node, master=master), "stream node", _elements
        )
    length = reader.read_length()
    last_id = _length_id(reader)
    if version >= 2:
        first_id = _length_id(reader)
        max_deleted_id = _length_id(reader)
        entries_added = reader.read_length()
    else:
        first_id = entries[0].id if entries else _ZERO
        max_deleted_id = _ZERO
        entries_added = length
    groups = [_read_group(reader, version) for _ in range(reader.read_count("consumer group"))]
    return Stream(entries, length, last_id, first_id, max_deleted_id, entries_added, groups)


def read_stream_v1(reader: RdbReader) -> Stream:
    return read_stream(reader, 1)


def read_stream_v2(reader: RdbReader) -> Stream:
    return read_stream(reader, 2)


def read_stream_v3(reader: RdbReader) -> Stream:
    return read_stream(reader, 3)
