"""Zipmaps: the compact encoding of small hashes before Redis 2.6 (RDB type 9).

Layout: ``zmlen`` (one byte: the number of pairs, or 254+ when it must be
counted), then per pair: a length, the field, a length, a ``free`` byte, the
value and ``free`` unused bytes; finally 0xFF. A length is one byte below 254,
or 254 followed by a 4-byte little-endian length (255 is the end marker).
"""

from __future__ import annotations

import sys

from .errors import RdbError, RdbLimitError


def _length(blob: bytes, p: int) -> tuple[int, int]:
    """The length at ``p`` and the offset after it (checked by the caller)."""
    first = blob[p]
    if first < 254:
        return first, p + 1
    if first == 255:
        raise RdbError(f"zipmap ends in the middle of a pair (offset {p})")
    return int.from_bytes(blob[p + 1 : p + 5], "little"), p + 5


def decode_zipmap(blob: bytes, max_items: int | None = None) -> dict[bytes, bytes]:
    """The pairs of a zipmap; inconsistencies raise :class:`RdbError`, more
    than ``max_items`` fields and values :class:`RdbLimitError`."""
    size = len(blob)
    if size < 2 or blob[-1] != 0xFF:
        raise RdbError("zipmap is too short or does not end with 0xFF")
    end = size - 1  # index of the end marker
    pairs: dict[bytes, bytes] = {}
    count = 0
    limit = sys.maxsize if max_items is None else max_items // 2
    p = 1
    while p < end:
        if count >= limit:
            raise RdbLimitError(f"zipmap of more than {limit} pairs")
        field_len, p = _length(blob, p)
        field = blob[p : p + field_len]
        p += field_len
        if p >= end:
            raise RdbError(f"zipmap pair {count} runs past the end of the blob")
        value_len, p = _length(blob, p)
        if p >= end:
            raise RdbError(f"zipmap pair {count} runs past the end of the blob")
        free = blob[p]
        value = blob[p + 1 : p + 1 + value_len]
        p += 1 + value_len + free
        if p > end:
            raise RdbError(f"zipmap pair {count} runs past the end of the blob")
        pairs[field] = value
        count += 1
    if blob[0] < 254 and blob[0] != count:
        raise RdbError(f"zipmap header says {blob[0]} pairs, found {count}")
    return pairs
