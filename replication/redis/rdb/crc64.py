"""CRC-64/Jones, the checksum Redis appends to an RDB file.

Redis checksums everything from the ``REDIS`` magic up to and including the EOF
opcode (0xFF) and stores the result as 8 little-endian bytes after it (0 when
``rdbchecksum no``). The CRC is the reflected form of the Jones polynomial
0xad93d23594c935a9 (reflected: 0x95ac9329ac4bc9b5), initial value 0, no final
xor; ``crc64(b"123456789") == 0xE9C6D914C4B8D9CA``.

Pure Python, so it is table-driven with "slicing by 16": sixteen 256-entry
tables, where table k gives the CRC contribution of a byte followed by k zero
bytes, let one loop iteration fold 16 input bytes (two native 64-bit words)
with 16 look-ups. That is about 8 times fewer iterations than the byte-at-a-time
loop, which handles only the sub-16-byte tail (and everything on big-endian
hosts, where the word trick would need byte swapping).
"""

from __future__ import annotations

import sys

BytesLike = bytes | bytearray | memoryview

POLY_REFLECTED = 0x95AC9329AC4BC9B5


def _make_tables() -> tuple[list[int], ...]:
    first: list[int] = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ POLY_REFLECTED if crc & 1 else crc >> 1
        first.append(crc)
    tables = [first]
    for _ in range(15):
        previous = tables[-1]
        tables.append([first[value & 0xFF] ^ (value >> 8) for value in previous])
    return tuple(tables)


_TABLES = _make_tables()
_T0 = _TABLES[0]
_LITTLE_ENDIAN = sys.byteorder == "little"


def _bytewise(crc: int, data: BytesLike) -> int:
    table = _T0
    for byte in memoryview(data).cast("B"):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc


def crc64(data: BytesLike, crc: int = 0) -> int:
    """The CRC-64/Jones of ``data``, continuing from ``crc`` (the CRC of the
    bytes before it; 0 to start), so a long payload can be checksummed chunk by
    chunk: ``crc64(b, crc64(a)) == crc64(a + b)``."""
    view = memoryview(data).cast("B")
    whole = len(view) & ~15 if _LITTLE_ENDIAN else 0
    if whole:
        (t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15) = _TABLES
        words = iter(view[:whole].cast("Q"))
        for word in words:
            a = (crc ^ word).to_bytes(8, "little")
            b = next(words).to_bytes(8, "little")
            crc = (
                t15[a[0]] ^ t14[a[1]] ^ t13[a[2]] ^ t12[a[3]]
                ^ t11[a[4]] ^ t10[a[5]] ^ t9[a[6]] ^ t8[a[7]]
                ^ t7[b[0]] ^ t6[b[1]] ^ t5[b[2]] ^ t4[b[3]]
                ^ t3[b[4]] ^ t2[b[5]] ^ t1[b[6]] ^ t0[b[7]]
            )  # fmt: skip
    if whole < len(view):
        crc = _bytewise(crc, view[whole:])
    return crc
