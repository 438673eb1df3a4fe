"""Snapshot file format (RIP-22 phase 2): a node's whole state at one applied index.

Format version 1. All integers are big-endian::

    header    44 bytes
      magic           7s   b"RKVSNAP"
      format_version  u8   1
      applied_index   u64  the raft index the state reflects
      applied_offset  u64  the commit-log offset the state reflects
      record_count    u64  how many records the body holds
      created_at_ms   i64  when the export started (Unix milliseconds)
      header_crc      u32  zlib CRC-32 of the 40 header bytes before it
    body      record_count records, each framed exactly like a commit-log record
              (node/storage/record.py: length, CRC-32, offset, raft_index, timestamp,
              create_version, op, key_len, value_len, key, value), in LMDB key
              order, one per key:
                op             PUT, with the end-of-entry bit set
                offset         the key's version
                create_version the key's create version
                raft_index     applied_index
                timestamp      created_at_ms
              Keys under the reserved prefix (\\x00rkv/) are included: they are state.
    trailer   48 bytes
      magic           8s   b"RKVSNEND"
      record_count    u64  again
      sha256          32s  SHA-256 of every byte before the trailer

What a reader checks, in order: the magic, the format version, the header's
CRC-32; then every record's length, CRC-32 and fields (a put, at the header's
raft index, 0 < create_version <= offset <= applied_offset, keys strictly
ascending in LMDB order); then that the trailer follows the last record, that
it repeats the count, that the SHA-256 matches and that nothing follows it.
Any failure raises :class:`node.errors.SnapshotFormatError` naming what is
wrong and at which byte, so a truncated or damaged file is never used.

Writing is node/snapshot/export.py, restoring node/snapshot/restore.py;
node/snapshot/file.py re-exports the public names of all three.
"""

from __future__ import annotations

import hashlib
import logging
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

from node.errors import SnapshotFormatError
from node.keyspace import MAX_KEY_BYTES
from node.storage.key_order import lmdb_key
from node.storage.record import BODY_HEADER, PREFIX, Record, RecordOp, decode_body

logger = logging.getLogger(__name__)

MAGIC = b"RKVSNAP"
FORMAT_VERSION = 1
TRAILER_MAGIC = b"RKVSNEND"
CONTENT_TYPE = "application/octet-stream"

HEADER_FIELDS = struct.Struct(">7sBQQQq")
HEADER_CRC = struct.Struct(">I")
HEADER_BYTES = HEADER_FIELDS.size + HEADER_CRC.size
TRAILER = struct.Struct(">8sQ32s")
TRAILER_BYTES = TRAILER.size
# The largest record any valid configuration can produce (64 MiB values at most).
_MAX_BODY_BYTES = BODY_HEADER.size + MAX_KEY_BYTES + 64 * 1024 * 1024
_PROGRESS_SECONDS = 2.0
READ_BUFFER = 1024 * 1024

SnapshotProgress = Callable[[str, int, int], None]
"""Called with (phase, records done, records in total). Phases: "export",
"verify", "write log", "load lmdb"."""


class SnapshotHeader(NamedTuple):
    format_version: int
    applied_index: int
    applied_offset: int
    record_count: int
    created_at_ms: int

    def encode(self) -> bytes:
        fields = HEADER_FIELDS.pack(
            MAGIC,
            self.format_version,
            self.applied_index,
            self.applied_offset,
            self.record_count,
            self.created_at_ms,
        )
        return fields + HEADER_CRC.pack(zlib.crc32(fields))


class ProgressReporter:
    """Forwards progress to a callback and logs a line every 2 s."""

    def __init__(self, phase: str, total: int, callback: SnapshotProgress | None) -> None:
        self._phase = phase
        self._total = total
        self._callback = callback
        self._start = time.monotonic()
        self._last_log = self._start

    def __call__(self, done: int) -> None:
        if self._callback is not None:
            self._callback(self._phase, done, self._total)
        now = time.monotonic()
        if now - self._last_log >= _PROGRESS_SECONDS:
            self._last_log = now
            logger.info(
                "snapshot %s: %d of %d records (%.0f records/s)",
                self._phase,
                done,
                self._total,
                done / max(now - self._start, 1e-9),
            )


class SnapshotReader:
    """Reads and verifies a snapshot from ``f``; the header is read at once.

    :meth:`records` yields each record with its frame and, once the body is
    exhausted, checks the trailer; any problem raises SnapshotFormatError.
    """

    def __init__(self, f: BinaryIO, source: str) -> None:
        self._f = f
        self._source = source
        self._digest = hashlib.sha256()
        self._position = 0
        self.header = self._read_header()

    def _fail(self, reason: str) -> SnapshotFormatError:
        return SnapshotFormatError(self._source, reason)

    def _read(self, n: int) -> bytes:
        data = self._f.read(n)
        self._digest.update(data)
        self._position += len(data)
        return data

    def _read_header(self) -> SnapshotHeader:
        raw = self._read(HEADER_BYTES)
        if raw[: len(MAGIC)] != MAGIC[: len(raw)] or not raw:
            shown = raw[: len(MAGIC)]
            raise self._fail(
                f"not an rkv snapshot: wrong magic {shown!r} (expected {MAGIC!r})"
                if raw
                else "not an rkv snapshot: the file is empty"
            )
        if len(raw) > len(MAGIC) and raw[len(MAGIC)] != FORMAT_VERSION:
            raise self._fail(
                f"unsupported snapshot format version {raw[len(MAGIC)]} "
                f"(this rkv reads version {FORMAT_VERSION})"
            )
        if len(raw) < HEADER_BYTES:
            raise self._fail(
                f"truncated: the file ends inside the header ({len(raw)} of {HEADER_BYTES} bytes)"
            )
        fields = raw[: HEADER_FIELDS.size]
        (crc,) = HEADER_CRC.unpack_from(raw, HEADER_FIELDS.size)
        if zlib.crc32(fields) != crc:
            raise self._fail("damaged header: its CRC-32 does not match")
        _, version, index, offset, count, created = HEADER_FIELDS.unpack(fields)
        return SnapshotHeader(version, index, offset, count, created)

    def records(self) -> Iterator[tuple[Record, bytes]]:
        """Every record with its frame (the bytes as stored), verified; then the trailer."""
        header = self.header
        previous_key: bytes | None = None
        for i in range(header.record_count):
            start = self._position
            prefix = self._read(PREFIX.size)
            if len(prefix) < PREFIX.size:
                raise self._truncated_in_record(i, start, header.record_count)
            length, crc = PREFIX.unpack(prefix)
            if not BODY_HEADER.size <= length <= _MAX_BODY_BYTES:
                raise self._fail(f"damaged record {i} at byte {start}: impossible length {length}")
            body = self._read(length)
            if len(body) < length:
                raise self._truncated_in_record(i, start, header.record_count)
            if zlib.crc32(body) != crc:
                raise self._fail(f"damaged record {i} at byte {start}: its CRC-32 does not match")
            try:
                record = decode_body(body)
            except ValueError as exc:
                raise self._fail(f"damaged record {i} at byte {start}: {exc}") from None
            problem = _record_problem(record, header)
            if problem is not None:
                raise self._fail(f"bad record {i} at byte {start}: {problem}")
            stored_key = lmdb_key(record.key)
            if previous_key is not None and stored_key <= previous_key:
                raise self._fail(f"bad record {i} at byte {start}: keys are not in ascending order")
            previous_key = stored_key
            yield record, prefix + body
        self._check_trailer()

    def _truncated_in_record(self, i: int, start: int, count: int) -> SnapshotFormatError:
        return self._fail(
            f"truncated: the file ends inside record {i} of {count} (which starts at byte {start})"
        )

    def _check_trailer(self) -> None:
        expected = self._digest.digest()
        start = self._position
        raw = self._f.read(TRAILER_BYTES)
        count = self.header.record_count
        if not raw:
            raise self._fail(
                f"truncated: the file ends after record {count} of {count}, before the trailer "
                f"(byte {start})"
            )
        if len(raw) < TRAILER_BYTES:
            raise self._fail(
                f"truncated: the file ends inside the trailer ({len(raw)} of {TRAILER_BYTES} "
                f"bytes at byte {start})"
            )
        magic, trailer_count, digest = TRAILER.unpack(raw)
        if magic != TRAILER_MAGIC:
            raise self._fail(f"damaged trailer at byte {start}: wrong trailer magic {magic!r}")
        if trailer_count != count:
            raise self._fail(
                f"damaged trailer at byte {start}: it counts {trailer_count} records, "
                f"the header {count}"
            )
        if digest != expected:
            raise self._fail(
                "checksum mismatch: the SHA-256 in the trailer does not match the file's contents"
            )
        if self._f.read(1):
            raise self._fail(
                f"unexpected bytes after the trailer (at byte {start + TRAILER_BYTES})"
            )


def _record_problem(record: Record, header: SnapshotHeader) -> str | None:
    if record.op is not RecordOp.PUT:
        return f"op {record.op.name} (a snapshot holds only puts)"
    if record.raft_index != header.applied_index:
        return f"raft index {record.raft_index}, not the snapshot's {header.applied_index}"
    if not 0 < record.offset <= header.applied_offset:
        return f"offset {record.offset} outside 1..{header.applied_offset}"
    if record.create_version > record.offset:
        return f"create version {record.create_version} above the offset {record.offset}"
    if not 0 < len(record.key) <= MAX_KEY_BYTES:
        return f"key of {len(record.key)} bytes"
    return None


def verify_snapshot(path: Path, progress: SnapshotProgress | None = None) -> SnapshotHeader:
    """Read the whole file and check everything; returns its header."""
    with open(path, "rb", buffering=READ_BUFFER) as f:
        reader = SnapshotReader(f, str(path))
        report = ProgressReporter("verify", reader.header.record_count, progress)
        done = 0
        for _ in reader.records():
            done += 1
            if done % 1000 == 0:
                report(done)
        report(done)
        return reader.header
