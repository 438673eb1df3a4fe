"""On-disk framing of one commit-log record.

::

    length      u32   bytes after this 8-byte prefix
    crc32       u32   zlib.crc32 of those bytes
    offset      u64   monotonic, never reused; the key's version after this write
    raft_index  u64   the raft entry that produced the record
    timestamp   i64   milliseconds, assigned by the proposer (same on every replica)
    create_ver  u64   for a put: the offset that created the key (0 for a delete), so
                      a log compacted down to each key's last record still rebuilds
                      the same LMDB state
    op          u8    1 = put, 2 = delete (tombstone); bit 0x80 marks the last
                      record of a raft entry
    key_len     u32
    value_len   u32
    key, value

All integers are big-endian. CRC-32 (zlib's, hardware-fast in CPython) guards
the whole body, so a torn or flipped byte anywhere is caught on read.
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Sequence
from typing import NamedTuple

PREFIX = struct.Struct(">II")
BODY_HEADER = struct.Struct(">QQqQBII")
HEADER_BYTES = PREFIX.size + BODY_HEADER.size


class RecordOp(enum.IntEnum):
    PUT = 1
    DELETE = 2


_OPS = {op.value: op for op in RecordOp}
ENTRY_END = 0x80
"""Flag in the op byte: this record is the last one its raft entry wrote. A log
whose tail lacks it was cut inside an entry (a power loss tore the write), and
opening it drops that incomplete entry so raft delivers it again whole."""


_OP_POSITION = struct.calcsize(">QQqQ")


def ends_entry(body: bytes | memoryview) -> bool:
    """Whether a verified record body carries the end-of-entry flag."""
    return bool(body[_OP_POSITION] & ENTRY_END)


class Record(NamedTuple):
    """One commit-log record (a NamedTuple: millions are built on the apply path)."""

    offset: int
    raft_index: int
    timestamp_ms: int
    op: RecordOp
    key: bytes
    value: bytes = b""
    create_version: int = 0

    @property
    def is_tombstone(self) -> bool:
        return self.op is RecordOp.DELETE


def encode_record(record: Record, last_of_entry: bool = True) -> bytes:
    """The record's bytes as written to a segment file."""
    key, value = record.key, record.value
    op = record.op | ENTRY_END if last_of_entry else record.op
    header = BODY_HEADER.pack(
        record.offset,
        record.raft_index,
        record.timestamp_ms,
        record.create_version,
        op,
        len(key),
        len(value),
    )
    crc = zlib.crc32(value, zlib.crc32(key, zlib.crc32(header)))
    return b"".join((PREFIX.pack(len(header) + len(key) + len(value), crc), header, key, value))


def encode_entry_records(records: Sequence[Record], after: int) -> list[tuple[int, bytes]]:
    """(offset, bytes) of each record of one raft entry, the last flagged as its end:
    :func:`encode_record` in one loop (the apply path of a bulk load writes thousands
    per entry). Raises ValueError unless offsets rise strictly above ``after``."""
    pack_header, pack_prefix, crc32 = BODY_HEADER.pack, PREFIX.pack, zlib.crc32
    encoded: list[tuple[int, bytes]] = []
    append = encoded.append
    last = len(records) - 1
    previous = after
    for i, (offset, raft_index, timestamp_ms, op, key, value, create) in enumerate(records):
        if offset <= previous:
            raise ValueError(f"record offset {offset} is not above the log head ({previous})")
        previous = offset
        flags = op | ENTRY_END if i == last else op
        body = pack_header(offset, raft_index, timestamp_ms, create, flags, len(key), len(value))
        body += key
        body += value
        append((offset, pack_prefix(len(body), crc32(body)) + body))
    return encoded


def decode_body(body: bytes | memoryview) -> Record:
    """Decode a record body whose checksum has already been verified."""
    offset, raft_index, timestamp_ms, create, op, key_len, value_len = BODY_HEADER.unpack_from(
        body, 0
    )
    start = BODY_HEADER.size
    if start + key_len + value_len != len(body):
        raise ValueError(
            f"record lengths disagree: key {key_len} + value {value_len} "
            f"in a body of {len(body)} bytes"
        )
    op &= ~ENTRY_END
    if op not in _OPS:
        raise ValueError(f"unknown record op {op}")
    key = bytes(body[start : start + key_len])
    value = bytes(body[start + key_len :])
    return Record(offset, raft_index, timestamp_ms, _OPS[op], key, value, create)


def max_record_bytes(max_value_bytes: int, max_key_bytes: int) -> int:
    """The largest record a valid command can produce (framing included)."""
    return HEADER_BYTES + max_key_bytes + max_value_bytes
