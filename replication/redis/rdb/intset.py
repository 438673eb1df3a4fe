"""Intsets: the compact encoding of a set made only of integers.

Layout (all little-endian): ``encoding`` (uint32: 2, 4 or 8, the byte width of
every element), ``length`` (uint32, the number of elements), then ``length``
signed integers of that width, sorted in strictly ascending order.
"""

from __future__ import annotations

import struct
from itertools import pairwise

from .errors import RdbError, RdbLimitError

_HEADER = struct.Struct("<II")
_FORMATS = {2: "h", 4: "i", 8: "q"}


def decode_intset(blob: bytes, max_items: int | None = None) -> list[int]:
    """The integers of an intset blob, ascending; :class:`RdbError` if the
    header does not match the blob's size or the elements are not ascending,
    :class:`RdbLimitError` if it holds more than ``max_items``."""
    if len(blob) < _HEADER.size:
        raise RdbError(f"intset of {len(blob)} bytes is shorter than its header")
    width, length = _HEADER.unpack_from(blob)
    code = _FORMATS.get(width)
    if code is None:
        raise RdbError(f"intset has invalid element width {width}")
    if _HEADER.size + width * length != len(blob):
        raise RdbError(
            f"intset header says {length} elements of {width} bytes, blob has {len(blob)} bytes"
        )
    if max_items is not None and length > max_items:
        raise RdbLimitError(f"intset of {length} elements (more than {max_items})")
    values = list(struct.unpack_from(f"<{length}{code}", blob, _HEADER.size))
    for previous, current in pairwise(values):
        if current <= previous:
            raise RdbError("intset elements are not in ascending order")
    return values
