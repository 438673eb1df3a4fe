"""LZF decompression, for the compressed strings of an RDB file.

An RDB string whose length byte is ``0xC3`` is LZF-compressed: two lengths
follow (compressed size, uncompressed size), then the compressed bytes. LZF is
a sequence of chunks, each starting with a control byte ``ctrl``:

- ``ctrl < 32``: a literal run; the next ``ctrl + 1`` input bytes are copied.
- otherwise a back reference: ``length = ctrl >> 5`` (when it is 7, the next
  byte is added to it), then one more byte ``low``; the ``length + 2`` bytes
  starting ``((ctrl & 31) << 8) + low + 1`` bytes back in the output are
  copied, byte by byte, so a reference may overlap the bytes it produces
  (that is how runs are encoded).

Every offset is checked: a corrupt stream raises :class:`RdbError` rather than
reading outside the input, referring before the start of the output or
producing more than the announced number of bytes.
"""

from __future__ import annotations

from .errors import RdbError

#: The most output one input byte can produce: a 3-byte back reference copies
#: at most 7 + 255 + 2 = 264 bytes.
MAX_EXPANSION = 88


def lzf_decompress(data: bytes, expected_length: int) -> bytes:
    """Decompress ``data``, which must expand to exactly ``expected_length``
    bytes; any inconsistency raises :class:`RdbError`."""
    if expected_length > len(data) * MAX_EXPANSION:
        raise RdbError(
            f"LZF: {len(data)} compressed bytes cannot expand to {expected_length} bytes"
        )
    out = bytearray()
    ip = 0
    size = len(data)
    while ip < size:
        ctrl = data[ip]
        ip += 1
        if ctrl < 32:
            run = ctrl + 1
            if ip + run > size:
                raise RdbError(f"LZF: literal run of {run} bytes past the end of the input")
            out += data[ip : ip + run]
            ip += run
        else:
            length = ctrl >> 5
            if length == 7:
                if ip >= size:
                    raise RdbError("LZF: back reference cut short")
                length += data[ip]
                ip += 1
            if ip >= size:
                raise RdbError("LZF: back reference cut short")
            distance = ((ctrl & 31) << 8) + data[ip] + 1
            ip += 1
            length += 2
            ref = len(out) - distance
            if ref < 0:
                raise RdbError(f"LZF: back reference {distance} bytes before the output start")
            if distance >= length:
                out += out[ref : ref + length]
            else:
                # An overlapping copy repeats the last `distance` bytes.
                pattern = out[ref:]
                out += (pattern * (length // distance + 1))[:length]
        if len(out) > expected_length:
            raise RdbError(f"LZF: output exceeds the announced {expected_length} bytes")
    if len(out) != expected_length:
        raise RdbError(f"LZF: output is {len(out)} bytes, {expected_length} announced")
    return bytes(out)
