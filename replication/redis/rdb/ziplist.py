"""Ziplists: the compact sequence encoding of Redis 3.2 to 6.2 (list nodes,
small hashes and zsets), read here so RDBs from Redis 6 masters load.

Layout (little-endian): ``zlbytes`` (uint32, the blob size), ``zltail``
(uint32, offset of the last entry), ``zllen`` (uint16; 65535 means "count
them"), the entries, and a 0xFF terminator. Each entry is:

- ``prevlen``: the previous entry's size, one byte when below 254, else 0xFE
  and a 4-byte little-endian size;
- an encoding, by its first byte: ``00xxxxxx`` string up to 63 bytes,
  ``01xxxxxx yyyyyyyy`` string with a 14-bit big-endian length, ``0x80`` and a
  4-byte big-endian length, ``0xC0``/``0xD0``/``0xE0`` int16/32/64, ``0xF0``
  int24, ``0xFE`` int8, ``0xF1``..``0xFD`` the immediate values 0..12;
- the string or integer bytes (integers little-endian, signed).
"""

from __future__ import annotations

import sys

from .errors import RdbError, RdbLimitError
from .listpack import ListpackItem

_UNKNOWN_COUNT = 65535
_INT_WIDTHS = {0xC0: 2, 0xD0: 4, 0xE0: 8, 0xF0: 3, 0xFE: 1}


def _prevlen(blob: bytes, p: int, end: int, index: int) -> tuple[int, int]:
    """The prevlen at ``p`` (< ``end``) and the offset after it."""
    b = blob[p]
    if b < 0xFE:
        return b, p + 1
    if b == 0xFF or p + 5 > end:
        raise RdbError(f"ziplist entry {index} has an invalid prevlen")
    return int.from_bytes(blob[p + 1 : p + 5], "little"), p + 5


def _entry(blob: bytes, p: int, end: int, index: int) -> tuple[ListpackItem, int]:
    """The value of the entry whose encoding is at ``p`` (< ``end``) and the
    offset after it (not yet checked against ``end``)."""
    b = blob[p]
    kind = b >> 6
    if kind == 0:
        length = b & 0x3F
        p += 1
    elif kind == 1:
        if p + 1 >= end:
            raise RdbError(f"ziplist entry {index} has a cut 14-bit length")
        length = ((b & 0x3F) << 8) | blob[p + 1]
        p += 2
    elif b == 0x80:
        length = int.from_bytes(blob[p + 1 : p + 5], "big")
        p += 5
    elif b in _INT_WIDTHS:
        width = _INT_WIDTHS[b]
        value = int.from_bytes(blob[p + 1 : p + 1 + width], "little", signed=True)
        return value, p + 1 + width
    elif 0xF1 <= b <= 0xFD:
        return (b & 0x0F) - 1, p + 1
    else:
        raise RdbError(f"ziplist entry {index} has invalid encoding byte 0x{b:02x}")
    return blob[p : p + length], p + length


def decode_ziplist(blob: bytes, max_items: int | None = None) -> list[ListpackItem]:
    """The entries of a ziplist: ``bytes`` for strings, ``int`` for integers.
    Inconsistent sizes, counts, prevlens or encodings raise :class:`RdbError`;
    more than ``max_items`` entries, :class:`RdbLimitError`."""
    size = len(blob)
    if size < 11:
        raise RdbError(f"ziplist of {size} bytes is shorter than header + terminator")
    declared_size = int.from_bytes(blob[0:4], "little")
    if declared_size != size:
        raise RdbError(f"ziplist header says {declared_size} bytes, blob has {size}")
    if blob[-1] != 0xFF:
        raise RdbError("ziplist does not end with the 0xFF terminator")
    end = size - 1  # index of the terminator
    items: list[ListpackItem] = []
    limit = sys.maxsize if max_items is None else max_items
    p = last_start = 10
    previous_len = 0
    while p < end:
        if len(items) >= limit:
            raise RdbLimitError(f"ziplist of more than {limit} entries")
        start = p
        prevlen, p = _prevlen(blob, p, end, len(items))
        if prevlen != previous_len:
            raise RdbError(
                f"ziplist entry {len(items)} says the previous entry has {prevlen} bytes, "
                f"it has {previous_len}"
            )
        if p >= end:
            raise RdbError(f"ziplist entry {len(items)} has no encoding")
        value, p = _entry(blob, p, end, len(items))
        if p > end:
            raise RdbError(f"ziplist entry {len(items)} runs past the end of the blob")
        items.append(value)
        previous_len = p - start
        last_start = start
    tail = int.from_bytes(blob[4:8], "little")
    if items and tail != last_start:
        raise RdbError(f"ziplist tail offset {tail} is not the last entry's offset {last_start}")
    declared_count = blob[8] | (blob[9] << 8)
    if declared_count not in (_UNKNOWN_COUNT, len(items)):
        raise RdbError(f"ziplist header says {declared_count} entries, found {len(items)}")
    return items
