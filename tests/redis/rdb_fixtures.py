"""Build RDB payloads byte by byte, for the encodings a Redis 7.0 server does
not write (RDB 11 types of Redis 7.2, Redis 6 ziplists, old opcodes) and for
hand-made corruptions.

Written from the format description, independently of the parser (only the
CRC comes from it; the CRC has its own known-vector test). The pieces:

- :func:`length` -- the RDB length encoding: 6-bit (``00xxxxxx``), 14-bit
  (``01xxxxxx`` + 1 byte, big-endian), ``0x80`` + 4 bytes or ``0x81`` + 8 bytes
  big-endian.
- :func:`string` -- a length then raw bytes; :func:`int_string` the
  ``0xC0``/``C1``/``C2`` integer forms (8/16/32-bit little-endian);
  :func:`lzf_string` the ``0xC3`` form: compressed length, original length,
  then LZF data (from :func:`lzf_compress`, a small greedy compressor).
- :func:`listpack`, :func:`ziplist`, :func:`intset` -- the blobs (layouts in
  their docstrings) and :func:`stream_node` for a stream node listpack.
- :class:`RdbWriter` -- header ``REDIS`` + 4-digit version, opcodes, keys and
  the EOF opcode with the CRC-64 of everything before it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from replication.redis.rdb.crc64 import crc64

Item = bytes | int

# -- primitive encodings -------------------------------------------------------


def length(n: int) -> bytes:
    """The RDB length encoding of ``n``."""
    if n < 1 << 6:
        return bytes([n])
    if n < 1 << 14:
        return bytes([0x40 | (n >> 8), n & 0xFF])
    if n < 1 << 32:
        return b"\x80" + n.to_bytes(4, "big")
    return b"\x81" + n.to_bytes(8, "big")


def string(data: bytes) -> bytes:
    """A raw (length-prefixed) string."""
    return length(len(data)) + data


def int_string(value: int) -> bytes:
    """A string holding an integer in the smallest of the 8/16/32-bit forms."""
    for code, width in ((0xC0, 1), (0xC1, 2), (0xC2, 4)):
        if -(1 << (8 * width - 1)) <= value < 1 << (8 * width - 1):
            return bytes([code]) + value.to_bytes(width, "little", signed=True)
    raise ValueError(f"{value} does not fit 32 bits")


def lzf_compress(data: bytes) -> bytes:
    """LZF-compress ``data`` (greedy, 3-byte hash matches within 8 KiB)."""
    out = bytearray()
    literal = bytearray()
    seen: dict[bytes, int] = {}

    def flush() -> None:
        for i in range(0, len(literal), 32):
            chunk = literal[i : i + 32]
            out.append(len(chunk) - 1)
            out.extend(chunk)
        literal.clear()

    i = 0
    while i < len(data):
        key = data[i : i + 3]
        ref = seen.get(key) if len(key) == 3 else None
        seen[key] = i
        if ref is not None and 0 < i - ref <= 8192:
            n = 3
            while i + n < len(data) and n < 264 and data[ref + n] == data[i + n]:
                n += 1
            flush()
            distance = i - ref - 1
            if n - 2 < 7:
                out.append(((n - 2) << 5) | (distance >> 8))
            else:
                out += bytes([(7 << 5) | (distance >> 8), n - 2 - 7])
            out.append(distance & 0xFF)
            i += n
        else:
            literal.append(data[i])
            i += 1
    flush()
    return bytes(out)


def lzf_string(data: bytes) -> bytes:
    """An LZF-compressed RDB string."""
    packed = lzf_compress(data)
    return b"\xc3" + length(len(packed)) + length(len(data)) + packed


def lzf_repeat(head: bytes, unit: bytes, times: int, tail: bytes) -> bytes:
    """An LZF-compressed RDB string of ``head + unit * times + tail``, made of
    back references of the most LZF allows (264 bytes for 3): a decompression
    bomb, 88 times smaller than what it expands to."""
    out = bytearray()

    def literal(data: bytes) -> None:
        for i in range(0, len(data), 32):
            chunk = data[i : i + 32]
            out.append(len(chunk) - 1)
            out.extend(chunk)

    literal(head + unit)
    distance = len(unit) - 1  # as encoded: the distance minus one
    left = len(unit) * (times - 1)
    while left >= 3:
        n = min(left, 264)
        if left - n in (1, 2):
            n -= 3  # leave a last reference of at least 3
        if n >= 9:
            out += bytes([0xE0 | (distance >> 8), n - 9, distance & 0xFF])
        else:
            out += bytes([((n - 2) << 5) | (distance >> 8), distance & 0xFF])
        left -= n
    literal(unit[:left] + tail)
    size = len(head) + len(unit) * times + len(tail)
    return b"\xc3" + length(len(out)) + length(size) + bytes(out)


def listpack_bomb(entries: int) -> bytes:
    """An LZF-compressed listpack of ``entries`` times the integer 42 (two bytes
    each; decoded, each is a new 2-byte string object): about 23 KB per million
    entries."""
    total = 6 + 2 * entries + 1
    head = total.to_bytes(4, "little") + min(entries, 65535).to_bytes(2, "little")
    return lzf_repeat(head, b"\x2a\x01", entries, b"\xff")


def binary_double(value: float) -> bytes:
    return struct.pack("<d", value)


def text_double(value: float) -> bytes:
    """The pre-RDB-8 double: 253 NaN, 254 +inf, 255 -inf, else length + text."""
    if value != value:
        return b"\xfd"
    if value in (float("inf"), float("-inf")):
        return b"\xfe" if value > 0 else b"\xff"
    text = repr(value).encode()
    return bytes([len(text)]) + text


def ms_time(ms: int) -> bytes:
    return ms.to_bytes(8, "little", signed=True)


def stream_id(ms: int, seq: int) -> bytes:
    """A 16-byte stream ID (node keys, PEL entries): big-endian ms and seq."""
    return ms.to_bytes(8, "big") + seq.to_bytes(8, "big")


# -- blobs ---------------------------------------------------------------------


def _backlen(n: int) -> bytes:
    if n <= 127:
        return bytes([n])
    size = 2 if n < 16383 else 3 if n < 2097151 else 4 if n < 268435455 else 5
    groups = [(n >> (7 * k)) & 0x7F for k in reversed(range(size))]
    return bytes([groups[0]] + [g | 0x80 for g in groups[1:]])


def listpack_entry(item: Item) -> bytes:
    """One listpack entry (encoding + data + backlen), smallest encoding."""
    if isinstance(item, int):
        if 0 <= item < 128:
            body = bytes([item])
        elif -4096 <= item < 4096:
            raw = item & 0x1FFF
            body = bytes([0xC0 | (raw >> 8), raw & 0xFF])
        else:
            for code, width in ((0xF1, 2), (0xF2, 3), (0xF3, 4), (0xF4, 8)):
                if -(1 << (8 * width - 1)) <= item < 1 << (8 * width - 1):
                    body = bytes([code]) + item.to_bytes(width, "little", signed=True)
                    break
            else:
                raise ValueError(f"{item} does not fit 64 bits")
    elif len(item) < 64:
        body = bytes([0x80 | len(item)]) + item
    elif len(item) < 4096:
        body = bytes([0xE0 | (len(item) >> 8), len(item) & 0xFF]) + item
    else:
        body = b"\xf0" + len(item).to_bytes(4, "little") + item
    return body + _backlen(len(body))


def listpack(items: Sequence[Item]) -> bytes:
    """uint32 total bytes, uint16 count (65535 if more), entries, 0xFF."""
    body = b"".join(listpack_entry(item) for item in items)
    total = 6 + len(body) + 1
    return (
        total.to_bytes(4, "little") + min(len(items), 65535).to_bytes(2, "little") + body + b"\xff"
    )


def ziplist(items: Sequence[Item]) -> bytes:
    """uint32 zlbytes, uint32 zltail, uint16 zllen, entries (prevlen,
    encoding, data), 0xFF."""
    entries: list[bytes] = []
    previous = 0
    for item in items:
        prevlen = bytes([previous]) if previous < 254 else b"\xfe" + previous.to_bytes(4, "little")
        if isinstance(item, int):
            if 0 <= item <= 12:
                encoding = bytes([0xF1 + item])
            else:
                for code, width in ((0xFE, 1), (0xC0, 2), (0xF0, 3), (0xD0, 4), (0xE0, 8)):
                    if -(1 << (8 * width - 1)) <= item < 1 << (8 * width - 1):
                        encoding = bytes([code]) + item.to_bytes(width, "little", signed=True)
                        break
                else:
                    raise ValueError(f"{item} does not fit 64 bits")
        elif len(item) < 64:
            encoding = bytes([len(item)]) + item
        elif len(item) < 16384:
            encoding = bytes([0x40 | (len(item) >> 8), len(item) & 0xFF]) + item
        else:
            encoding = b"\x80" + len(item).to_bytes(4, "big") + item
        entries.append(prevlen + encoding)
        previous = len(entries[-1])
    tail = 10 + sum(len(e) for e in entries[:-1])
    body = b"".join(entries)
    zlbytes = 10 + len(body) + 1
    header = zlbytes.to_bytes(4, "little") + tail.to_bytes(4, "little")
    return header + min(len(items), 65535).to_bytes(2, "little") + body + b"\xff"


def intset(values: Sequence[int], width: int | None = None) -> bytes:
    """uint32 width (2/4/8), uint32 count, sorted little-endian integers."""
    if width is None:
        width = 2
        for candidate in (2, 4, 8):
            width = candidate
            if all(-(1 << (8 * width - 1)) <= v < 1 << (8 * width - 1) for v in values):
                break
    code = {2: "h", 4: "i", 8: "q"}[width]
    body = struct.pack(f"<{len(values)}{code}", *sorted(values))
    return struct.pack("<II", width, len(values)) + body


def zipmap(pairs: Sequence[tuple[bytes, bytes]], free: int = 0) -> bytes:
    """zmlen (pair count), then per pair: length, field, length, free byte,
    value, ``free`` padding bytes; 0xFF. Lengths: one byte below 254, else
    254 and 4 bytes little-endian."""

    def zm_length(n: int) -> bytes:
        return bytes([n]) if n < 254 else b"\xfe" + n.to_bytes(4, "little")

    out = bytearray([min(len(pairs), 254)])
    for field, value in pairs:
        out += zm_length(len(field)) + field + zm_length(len(value)) + bytes([free])
        out += value + bytes(free)
    return bytes(out) + b"\xff"


def stream_node(
    master: tuple[int, int],
    master_fields: Sequence[bytes],
    entries: Sequence[tuple[tuple[int, int], Sequence[tuple[bytes, bytes]], bool]],
) -> bytes:
    """A stream node listpack. ``entries`` are ((ms, seq), fields, deleted);
    an entry whose field names equal ``master_fields`` uses the same-fields
    form (flag 2: values only)."""
    live = sum(1 for _, _, deleted in entries if not deleted)
    items: list[Item] = [live, len(entries) - live, len(master_fields), *master_fields, 0]
    for (ms, seq), fields, deleted in entries:
        same = [f for f, _ in fields] == list(master_fields)
        flags = (1 if deleted else 0) | (2 if same else 0)
        items += [flags, ms - master[0], seq - master[1]]
        if same:
            items += [v for _, v in fields]
            items.append(len(fields) + 3)
        else:
            items.append(len(fields))
            for f, v in fields:
                items += [f, v]
            items.append(2 * len(fields) + 4)
    return listpack(items)


# -- whole payloads ------------------------------------------------------------


class RdbWriter:
    """Appends records to an RDB payload; :meth:`finish` adds EOF and CRC."""

    def __init__(self, version: int = 11) -> None:
        self.data = bytearray(b"REDIS%04d" % version)

    def raw(self, data: bytes) -> RdbWriter:
        self.data += data
        return self

    def aux(self, name: bytes, value: bytes) -> RdbWriter:
        return self.raw(b"\xfa" + string(name) + string(value))

    def select_db(self, db: int) -> RdbWriter:
        return self.raw(b"\xfe" + length(db))

    def resize_db(self, size: int, expires: int) -> RdbWriter:
        return self.raw(b"\xfb" + length(size) + length(expires))

    def expire_ms(self, ms: int) -> RdbWriter:
        return self.raw(b"\xfc" + ms_time(ms))

    def expire_seconds(self, seconds: int) -> RdbWriter:
        return self.raw(b"\xfd" + seconds.to_bytes(4, "little", signed=True))

    def idle(self, seconds: int) -> RdbWriter:
        return self.raw(b"\xf8" + length(seconds))

    def freq(self, counter: int) -> RdbWriter:
        return self.raw(b"\xf9" + bytes([counter]))

    def function(self, code: bytes) -> RdbWriter:
        return self.raw(b"\xf5" + string(code))

    def key(self, rdb_type: int, key: bytes, value: bytes) -> RdbWriter:
        """A key: type byte, key string, then the already-encoded value."""
        return self.raw(bytes([rdb_type]) + string(key) + value)

    def finish(self, checksum: bool = True) -> bytes:
        """The payload: records, 0xFF, CRC-64 (LE; zeros if not ``checksum``)."""
        body = bytes(self.data) + b"\xff"
        crc = crc64(body) if checksum else 0
        return body + crc.to_bytes(8, "little")


def stream_value(
    nodes: Sequence[tuple[tuple[int, int], bytes]],
    length_: int,
    last_id: tuple[int, int],
    version: int,
    *,
    first_id: tuple[int, int] = (0, 0),
    max_deleted_id: tuple[int, int] = (0, 0),
    entries_added: int = 0,
    groups: Sequence[bytes] = (),
) -> bytes:
    """A stream value of stream type ``version`` (1: 15, 2: 19, 3: 21) from
    its node listpacks and already-encoded groups (see :func:`stream_group`)."""
    out = bytearray(length(len(nodes)))
    for master, node in nodes:
        out += string(stream_id(*master)) + string(node)
    out += length(length_) + length(last_id[0]) + length(last_id[1])
    if version >= 2:
        out += length(first_id[0]) + length(first_id[1])
        out += length(max_deleted_id[0]) + length(max_deleted_id[1]) + length(entries_added)
    out += length(len(groups))
    for group in groups:
        out += group
    return bytes(out)


def stream_group(
    name: bytes,
    last_id: tuple[int, int],
    version: int,
    *,
    entries_read: int = (1 << 64) - 1,
    pel: Sequence[tuple[tuple[int, int], int, int]] = (),
    consumers: Sequence[tuple[bytes, int, int, Sequence[tuple[int, int]]]] = (),
) -> bytes:
    """A consumer group: name, last ID, entries_read (type >= 19), PEL of
    (id, delivery ms, delivery count), consumers (name, seen ms, active ms
    (type 21 only), pending ids)."""
    out = bytearray(string(name) + length(last_id[0]) + length(last_id[1]))
    if version >= 2:
        out += length(entries_read)
    out += length(len(pel))
    for entry_id, delivered, count in pel:
        out += stream_id(*entry_id) + ms_time(delivered) + length(count)
    out += length(len(consumers))
    for consumer, seen, active, pending in consumers:
        out += string(consumer) + ms_time(seen)
        if version >= 3:
            out += ms_time(active)
        out += length(len(pending))
        for entry_id in pending:
            out += stream_id(*entry_id)
    return bytes(out)


def rdb11_stream_payload() -> bytes:
    """An RDB 11 payload with one stream of type 21: two nodes (same-fields,
    other-fields and deleted entries), two groups, consumers with active time."""
    node1 = stream_node(
        (100, 0),
        [b"temp", b"unit"],
        [
            ((100, 0), [(b"temp", b"20"), (b"unit", b"C")], False),
            ((100, 1), [(b"temp", b"21"), (b"unit", b"C")], True),  # deleted
            ((101, 0), [(b"other", b"x"), (b"other", b"y"), (b"n", b"12345")], False),
        ],
    )
    node2 = stream_node((200, 5), [b"f"], [((200, 5), [(b"f", b"a")], False)])
    group = stream_group(
        b"g1",
        (200, 5),
        3,
        entries_read=3,
        pel=[((100, 0), 1700000000000, 2), ((200, 5), 1700000000500, 1)],
        consumers=[
            (b"alice", 1700000001000, 1700000000900, [(200, 5)]),
            (b"bob", 1700000002000, 1700000001900, [(100, 0)]),
            (b"idle", 1700000003000, -1, []),
        ],
    )
    value = stream_value(
        [((100, 0), node1), ((200, 5), node2)],
        3,
        (200, 5),
        3,
        first_id=(100, 0),
        max_deleted_id=(100, 1),
        entries_added=4,
        groups=[group, stream_group(b"g2", (0, 0), 3)],
    )
    return RdbWriter(11).select_db(0).key(21, b"events", value).finish()
