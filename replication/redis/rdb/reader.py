"""The primitive encodings of an RDB payload.

:class:`RdbReader` adds to the chunked reading of :class:`.buffer.PayloadBuffer`
the building blocks every record is made of:

*Length encoding* (the two top bits of the first byte):
``00xxxxxx`` a 6-bit length; ``01xxxxxx yyyyyyyy`` a 14-bit length
(big-endian); ``0x80`` + 4 bytes and ``0x81`` + 8 bytes big-endian lengths;
``11xxxxxx`` a special string encoding (below) instead of a length.

*Strings*: a length then that many bytes, or a special encoding: ``0xC0``,
``0xC1``, ``0xC2`` an 8/16/32-bit little-endian signed integer (the string is
its decimal form); ``0xC3`` LZF: compressed length, uncompressed length,
compressed bytes.

*Doubles*: 8 little-endian IEEE 754 bytes (zset type 5, RDB >= 8), or the old
string form: one length byte (253 NaN, 254 +inf, 255 -inf) then ASCII digits.

*Times*: the 8-byte little-endian millisecond times of expiries and stream
consumers, and the old 4-byte second expiry.

Lengths are checked before anything is read: a string or an element count
larger than what is left of a payload whose total length is known is refused.

*Memory.* A payload may announce anything, and its compact encodings expand
(an LZF string up to 88 times, a listpack of small integers about 20 times
once each entry is a Python object). So every record (a key and its value, an
aux field, a function) gets a budget of ``max_value_bytes``, charged before
the memory is taken: each string its length (an LZF string its announced
uncompressed length), each element :data:`ELEMENT_BYTES` (an announced count
is charged whole as soon as it is read; a blob's decoder stops at the number
of elements the budget still allows). Crossing it raises
:class:`.errors.RdbLimitError`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sized
from typing import TypeVar

from .buffer import BinaryReadable, PayloadBuffer
from .errors import RdbError, RdbLimitError
from .lzf import MAX_EXPANSION, lzf_decompress

#: The memory one record may take once decoded, by default.
DEFAULT_MAX_VALUE_BYTES = 256 * 1024 * 1024
#: What one decoded element is charged on top of its bytes (a Python object
#: and the slot that holds it).
ELEMENT_BYTES = 64

_DOUBLE = struct.Struct("<d")

S = TypeVar("S", bound=Sized)


class RdbReader(PayloadBuffer):
    """Reads the RDB primitives (lengths, strings, numbers) from ``stream``,
    charging each record's memory budget (see the module docstring; call
    :meth:`start_record` at each record). See :class:`.buffer.PayloadBuffer`
    for ``total_length`` and the reading."""

    __slots__ = ("_budget", "_left")

    def __init__(
        self,
        stream: BinaryReadable,
        total_length: int | None = None,
        *,
        checksum: bool = True,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
    ) -> None:
        super().__init__(stream, total_length, checksum=checksum)
        self._budget = max_value_bytes
        self._left = max_value_bytes

    # -- the memory budget --------------------------------------------------

    def start_record(self) -> None:
        """A new record starts: its budget is whole again."""
        self._left = self._budget

    def charge(self, nbytes: int, what: str, start: int) -> None:
        """Take ``nbytes`` from the record's budget, or raise RdbLimitError."""
        self._left -= nbytes
        if self._left < 0:
            raise self.over_budget(what, start)

    def items_allowed(self) -> int:
        """How many more elements the record's budget allows."""
        return max(0, self._left) // ELEMENT_BYTES

    def over_budget(self, what: str, start: int | None) -> RdbLimitError:
        return RdbLimitError(
            f"{what}: more than the {self._budget} bytes one record may take once decoded "
            f"(its strings, plus {ELEMENT_BYTES} bytes per element)",
            start,
        )

    def read_int64_le(self) -> int:
        """A signed 64-bit little-endian integer (millisecond times)."""
        return int.from_bytes(self.read(8), "little", signed=True)

    def read_int32_le(self) -> int:
        """A signed 32-bit little-endian integer (second expiry times)."""
        return int.from_bytes(self.read(4), "little", signed=True)

    # -- lengths ------------------------------------------------------------

    def _length_tail(self, first: int) -> int:
        kind = first >> 6
        if kind == 0:
            return first & 0x3F
        if kind == 1:
            return ((first & 0x3F) << 8) | self.read_byte()
        if first == 0x80:
            return int.from_bytes(self.read(4), "big")
        if first == 0x81:
            return int.from_bytes(self.read(8), "big")
        raise RdbError(f"invalid length encoding byte 0x{first:02x}", self.position - 1)

    def read_length(self) -> int:
        """A length-encoded unsigned number (also used for IDs and counters)."""
        first = self.read_byte()
        if first >= 0xC0:
            raise RdbError(
                f"expected a length, found string encoding byte 0x{first:02x}", self.position - 1
            )
        return self._length_tail(first)

    def read_count(self, what: str, per_element: int = 1) -> int:
        """A length counting elements that follow (each at least one byte):
        refused when larger than the rest of the payload; charged to the
        budget as ``per_element`` elements each."""
        start = self.position
        n = self.read_length()
        left = self.remaining()
        if left is not None and n > left:
            raise RdbError(f"absurd {what} count {n} (at most {left} possible)", start)
        self._left -= n * per_element * ELEMENT_BYTES
        if self._left < 0:
            raise self.over_budget(f"{n} {what}s", start)
        return n

    # -- strings ------------------------------------------------------------

    def read_string(self) -> bytes:
        """A string in any of its encodings."""
        buf = self._buf
        pos = self._pos
        if pos < len(buf):
            first = buf[pos]
            if first < 0x40:  # the common case: a short raw string, all buffered
                end = pos + 1 + first
                if end <= len(buf):
                    self._left -= first
                    if self._left < 0:
                        raise self.over_budget(f"a string of {first} bytes", self.position)
                    self._pos = end
                    return buf[pos + 1 : end]
        return self._read_string_slow()

    def _read_string_slow(self) -> bytes:
        start = self.position
        first = self.read_byte()
        if first < 0xC0:
            return self.read(self._checked_length(self._length_tail(first), start))
        encoding = first & 0x3F
        if encoding == 0:
            value = int.from_bytes(self.read(1), "little", signed=True)
        elif encoding == 1:
            value = int.from_bytes(self.read(2), "little", signed=True)
        elif encoding == 2:
            value = int.from_bytes(self.read(4), "little", signed=True)
        elif encoding == 3:
            return self._read_lzf(start)
        else:
            raise RdbError(f"invalid string encoding byte 0x{first:02x}", start)
        return str(value).encode("ascii")

    def _checked_length(self, n: int, start: int, *, charge: bool = True) -> int:
        left = self.remaining()
        if left is not None and n > left:
            raise RdbError(
                f"absurd string length {n}: only {left} bytes left in the payload", start
            )
        if n > self._left:
            raise self.over_budget(f"a string of {n} bytes", start)
        if charge:
            self._left -= n
        return n

    def _read_lzf(self, start: int) -> bytes:
        # The compressed bytes are only held while they are decompressed.
        compressed = self._checked_length(self.read_length(), start, charge=False)
        length = self.read_length()
        if length > compressed * MAX_EXPANSION:
            raise RdbError(
                f"LZF: {compressed} compressed bytes cannot expand to {length} bytes", start
            )
        self._left -= length
        if self._left < 0:
            raise self.over_budget(f"a compressed string of {length} bytes", start)
        data = self.read(compressed)
        try:
            return lzf_decompress(data, length)
        except RdbError as error:
            raise error.at(start, "compressed string") from None

    # -- numbers ------------------------------------------------------------

    def read_binary_double(self) -> float:
        """An 8-byte little-endian IEEE 754 double."""
        value: float = _DOUBLE.unpack(self.read(8))[0]
        return value

    def read_string_double(self) -> float:
        """The pre-RDB-8 double: a length byte (253/254/255: NaN/+inf/-inf)
        then that many ASCII characters."""
        start = self.position
        n = self.read_byte()
        if n == 253:
            return float("nan")
        if n == 254:
            return float("inf")
        if n == 255:
            return float("-inf")
        return parse_float(self.read(n), start)


def parse_float(text: bytes, position: int | None = None) -> float:
    """A score written as text (``"1.5"``, ``"-inf"``); RdbError if it is not."""
    try:
        return float(text)
    except ValueError:
        raise RdbError(f"invalid floating point number {text[:40]!r}", position) from None


def read_blob(
    reader: RdbReader,
    decode: Callable[[bytes, int], S],
    what: str,
    elements: Callable[[S], int] | None = None,
) -> S:
    """Read a string (a listpack, ziplist, intset...) and decode it with
    ``decode(blob, max_items)``, ``max_items`` being what the record's budget
    still allows; the decoded ``elements(result)`` are charged to it. Errors
    are re-raised at the blob's position."""
    start = reader.position
    blob = reader.read_string()
    try:
        result = decode(blob, reader.items_allowed())
    except RdbLimitError as error:
        raise reader.over_budget(f"{what}: {error.reason}", start) from None
    except RdbError as error:
        raise error.at(start, what) from None
    count = len(result) if elements is None else elements(result)
    reader.charge(count * ELEMENT_BYTES, what, start)
    return result
