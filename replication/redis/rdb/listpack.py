"""Listpacks: the compact sequence encoding of Redis 7 (small hashes, zsets,
sets, list nodes and stream nodes).

Layout: ``total_bytes`` (uint32 LE, the blob size), ``num_elements`` (uint16 LE;
65535 means "too many to count here"), the entries, and a 0xFF terminator.
Each entry is an encoding byte (plus data) followed by its *backlen*, the size
of encoding + data written in 1 to 5 bytes (7 bits each, most significant
first, every byte but the first with bit 7 set) so the list can be walked
backwards. Encodings, by the first byte:

========================  ============================================
``0xxxxxxx``              7-bit unsigned integer
``10xxxxxx``              string of up to 63 bytes (length in the 6 bits)
``110xxxxx yyyyyyyy``     13-bit signed integer (big-endian bits)
``1110xxxx yyyyyyyy``     string of up to 4095 bytes (12-bit length)
``0xF0`` + 4 bytes        string with a 32-bit little-endian length
``0xF1``/``F2``/``F3``/``F4``  16/24/32/64-bit signed little-endian integer
========================  ============================================
"""

from __future__ import annotations

import sys

from .errors import RdbError, RdbLimitError

ListpackItem = bytes | int

_UNKNOWN_COUNT = 65535
_INT_WIDTHS = {0xF1: 2, 0xF2: 3, 0xF3: 4, 0xF4: 8}


def _backlen_size(entry_len: int) -> int:
    if entry_len <= 127:
        return 1
    if entry_len < 16383:
        return 2
    if entry_len < 2097151:
        return 3
    if entry_len < 268435455:
        return 4
    return 5


def _entry(blob: bytes, p: int, index: int) -> tuple[ListpackItem, int]:
    """The value of the entry at ``p`` and its size (encoding + data, no
    backlen); ``blob[p + 1]`` must exist. The size is not yet bounds-checked."""
    b = blob[p]
    if b < 0x80:
        return b, 1
    if b < 0xC0:
        size = 1 + (b & 0x3F)
        return blob[p + 1 : p + size], size
    if b < 0xE0:
        raw = ((b & 0x1F) << 8) | blob[p + 1]
        return (raw - 8192 if raw >= 4096 else raw), 2
    if b < 0xF0:
        size = 2 + (((b & 0x0F) << 8) | blob[p + 1])
        return blob[p + 2 : p + size], size
    if b == 0xF0:
        size = 5 + int.from_bytes(blob[p + 1 : p + 5], "little")
        return blob[p + 5 : p + size], size
    width = _INT_WIDTHS.get(b)
    if width is None:
        raise RdbError(f"listpack entry {index} has invalid encoding byte 0x{b:02x}")
    return int.from_bytes(blob[p + 1 : p + 1 + width], "little", signed=True), 1 + width


def _backlen(blob: bytes, q: int, size: int) -> int:
    value = blob[q]
    for k in range(q + 1, q + size):
        value = (value << 7) | (blob[k] & 0x7F)
    return value


def decode_listpack(blob: bytes, max_items: int | None = None) -> list[ListpackItem]:
    """The entries of a listpack: ``bytes`` for strings, ``int`` for integers.
    Any inconsistency (size, count, encoding, backlen, terminator) raises
    :class:`RdbError`; more than ``max_items`` entries, :class:`RdbLimitError`."""
    size = len(blob)
    if size < 7:
        raise RdbError(f"listpack of {size} bytes is shorter than header + terminator")
    declared_size = int.from_bytes(blob[0:4], "little")
    if declared_size != size:
        raise RdbError(f"listpack header says {declared_size} bytes, blob has {size}")
    if blob[-1] != 0xFF:
        raise RdbError("listpack does not end with the 0xFF terminator")
    end = size - 1  # index of the terminator
    items: list[ListpackItem] = []
    limit = sys.maxsize if max_items is None else max_items
    p = 6
    while p < end:  # so blob[p + 1] exists (it may be the terminator)
        if len(items) >= limit:
            raise RdbLimitError(f"listpack of more than {limit} entries")
        value, entry_len = _entry(blob, p, len(items))
        q = p + entry_len
        back = 1 if entry_len <= 127 else _backlen_size(entry_len)
        if q + back > end:
            raise RdbError(f"listpack entry {len(items)} runs past the end of the blob")
        backlen = blob[q] if back == 1 else _backlen(blob, q, back)
        if backlen != entry_len:
            raise RdbError(
                f"listpack entry {len(items)} has backlen {backlen}, its size is {entry_len}"
            )
        items.append(value)
        p = q + back
    declared_count = blob[4] | (blob[5] << 8)
    if declared_count not in (_UNKNOWN_COUNT, len(items)):
        raise RdbError(f"listpack header says {declared_count} entries, found {len(items)}")
    return items


def item_bytes(item: ListpackItem) -> bytes:
    """An entry as Redis shows it to clients: integers as decimal strings."""
    return item if isinstance(item, bytes) else str(item).encode("ascii")


def listpack_strings(blob: bytes, max_items: int | None = None) -> list[bytes]:
    """The entries of a listpack, integers turned into their decimal strings."""
    return [item if isinstance(item, bytes) else str(item).encode("ascii")
            for item in decode_listpack(blob, max_items)]  # fmt: skip
