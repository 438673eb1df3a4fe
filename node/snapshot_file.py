"""Snapshot files (RIP-22 phase 2): a node's whole state at one applied index.

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
              (node/record.py: length, CRC-32, offset, raft_index, timestamp,
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

Export (:func:`write_snapshot`) reads ONE LMDB read transaction: the records,
the count and the applied index/offset all come from the same consistent view.
Memory is bounded by one chunk of items (1000 items or 4 MiB of values).

Restore (:func:`restore_snapshot`) seeds a fresh data directory. Commit-log
offsets must be strictly increasing, but the file is in key order, so restore
sorts by offset with a bounded external merge sort: records are cut into runs
of at most 100 000 records or 32 MiB, each run sorted in memory and spilled to
a file, and the runs merged (in passes of at most 64 files). A snapshot that
fits in one run never touches the disk. Nothing is written to the commit log
before the whole file has been verified. The sorted records are appended to a
new commit log, replayed into a new LMDB (node/replay.py), and LMDB's applied
index and offset are set to the snapshot's. Everything is built in
``<data_dir>/.restore-staging`` and renamed into place at the end, so an
interrupted restore leaves no partial ``log/`` or ``state/`` behind.

Raft index. A restored node's raft journal is new. By default (a new
cluster) the restored applied index is 0 and the records carry raft index 0:
the new cluster's raft numbers its entries from 1 again, and an applied index
left at the old cluster's value would make the state machine skip (as already
applied) every new entry up to it. ``keep_raft_index=True`` keeps the
snapshot's index instead, for rebuilding a member of the SAME cluster (same
id and addresses, its ``raft/`` directory absent): entries at or below the
index are then already in the state and are skipped, as they must be.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import operator
import os
import shutil
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

from node.commit_log import CommitLog
from node.errors import SnapshotFormatError, StorageError, StoreError
from node.keyspace import MAX_KEY_BYTES
from node.lmdb_store import LmdbStore, ReadView, lmdb_key
from node.record import BODY_HEADER, PREFIX, Record, RecordOp, decode_body, encode_record
from node.recovery import LOG_DIR, STATE_DIR
from node.replay import replay
from node.segment_swap import fsync_directory
from node.storage_config import FsyncPolicy, StorageConfig

logger = logging.getLogger(__name__)

MAGIC = b"RKVSNAP"
FORMAT_VERSION = 1
TRAILER_MAGIC = b"RKVSNEND"
CONTENT_TYPE = "application/octet-stream"
STAGING_DIR = ".restore-staging"

_HEADER_FIELDS = struct.Struct(">7sBQQQq")
_HEADER_CRC = struct.Struct(">I")
HEADER_BYTES = _HEADER_FIELDS.size + _HEADER_CRC.size
_TRAILER = struct.Struct(">8sQ32s")
TRAILER_BYTES = _TRAILER.size
# The largest record any valid configuration can produce (64 MiB values at most).
_MAX_BODY_BYTES = BODY_HEADER.size + MAX_KEY_BYTES + 64 * 1024 * 1024
_OFFSET = struct.Struct(">Q")
_PROGRESS_SECONDS = 2.0
_READ_BUFFER = 1024 * 1024
# Restore: records per log append, sort-run limits, merge fan-in.
_APPEND_RECORDS = 1000
RUN_RECORDS = 100_000
RUN_BYTES = 32 * 1024 * 1024
MERGE_FAN_IN = 64
_RUN_READ_BUFFER = 256 * 1024
# Entries a fresh data directory may hold (a mount point's lost+found; a staging
# directory an interrupted restore left behind, which is removed).
_IGNORABLE = frozenset({"lost+found", STAGING_DIR})

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
        fields = _HEADER_FIELDS.pack(
            MAGIC,
            self.format_version,
            self.applied_index,
            self.applied_offset,
            self.record_count,
            self.created_at_ms,
        )
        return fields + _HEADER_CRC.pack(zlib.crc32(fields))


class RestoreResult(NamedTuple):
    header: SnapshotHeader
    raft_index: int
    """The applied index LMDB now holds: 0, or the snapshot's with keep_raft_index."""
    log_bytes: int
    seconds: float


class _Reporter:
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


# -- writing ----------------------------------------------------------------------


def write_snapshot(
    view: ReadView,
    out: BinaryIO,
    *,
    created_at_ms: int | None = None,
    progress: SnapshotProgress | None = None,
) -> SnapshotHeader:
    """Write every key of ``view`` (one LMDB read transaction) to ``out``.

    The applied index and offset, the count and the records all come from the
    view, so the file is the state at exactly one applied index.
    """
    applied_index, applied_offset = view.applied()
    count = view.count(include_internal=True)
    now = int(time.time() * 1000) if created_at_ms is None else created_at_ms
    header = SnapshotHeader(FORMAT_VERSION, applied_index, applied_offset, count, now)
    digest = hashlib.sha256()
    report = _Reporter("export", count, progress)

    def emit(data: bytes) -> None:
        digest.update(data)
        out.write(data)

    emit(header.encode())
    written = 0
    for chunk in view.all_items():
        emit(
            b"".join(
                encode_record(
                    Record(
                        stored.version,
                        applied_index,
                        now,
                        RecordOp.PUT,
                        key,
                        stored.value,
                        stored.create_version,
                    )
                )
                for key, stored in chunk
            )
        )
        written += len(chunk)
        report(written)
    if written != count:  # impossible inside one read transaction
        raise StoreError(f"LMDB counted {count} keys but the export read {written}")
    out.write(_TRAILER.pack(TRAILER_MAGIC, count, digest.digest()))
    out.flush()
    return header


def export_snapshot(
    store: LmdbStore, out: BinaryIO, progress: SnapshotProgress | None = None
) -> SnapshotHeader:
    """:func:`write_snapshot` from one read transaction of ``store``.

    The transaction stays open while the file is written: LMDB keeps the pages
    it sees (the map may grow meanwhile) and a map resize waits for it.
    """
    with store.reader() as view:
        return write_snapshot(view, out, progress=progress)


# -- reading ----------------------------------------------------------------------


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
        fields = raw[: _HEADER_FIELDS.size]
        (crc,) = _HEADER_CRC.unpack_from(raw, _HEADER_FIELDS.size)
        if zlib.crc32(fields) != crc:
            raise self._fail("damaged header: its CRC-32 does not match")
        _, version, index, offset, count, created = _HEADER_FIELDS.unpack(fields)
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
        magic, trailer_count, digest = _TRAILER.unpack(raw)
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
    with open(path, "rb", buffering=_READ_BUFFER) as f:
        reader = SnapshotReader(f, str(path))
        report = _Reporter("verify", reader.header.record_count, progress)
        done = 0
        for _ in reader.records():
            done += 1
            if done % 1000 == 0:
                report(done)
        report(done)
        return reader.header


# -- restoring --------------------------------------------------------------------


def check_fresh_data_dir(data_dir: Path) -> None:
    """Raise StorageError unless ``data_dir`` is absent or empty."""
    if not data_dir.exists():
        return
    if not data_dir.is_dir():
        raise StorageError(f"cannot restore into {data_dir}: it is not a directory")
    found = sorted(p.name for p in data_dir.iterdir() if p.name not in _IGNORABLE)
    if found:
        shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
        raise StorageError(
            f"refusing to restore into {data_dir}: it is not empty (it holds {shown}); "
            f"restore into a new, empty directory"
        )


def restore_snapshot(
    snapshot: Path,
    data_dir: Path,
    *,
    config: StorageConfig | None = None,
    keep_raft_index: bool = False,
    progress: SnapshotProgress | None = None,
    run_records: int = RUN_RECORDS,
    run_bytes: int = RUN_BYTES,
    merge_fan_in: int = MERGE_FAN_IN,
) -> RestoreResult:
    """Seed the fresh data directory ``data_dir`` from the snapshot file.

    Raises SnapshotFormatError for a bad file and StorageError for a non-empty
    directory or a value above ``config.max_value_bytes``; nothing is left in
    ``data_dir`` then. See the module docstring for the raft index.
    """
    started = time.monotonic()
    config = config or StorageConfig(fsync=FsyncPolicy.ON_SYNC)
    check_fresh_data_dir(data_dir)
    created_dir = not data_dir.exists()
    data_dir.mkdir(parents=True, exist_ok=True)
    staging = data_dir / STAGING_DIR
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    installed: list[Path] = []
    try:
        sorter = _RunSorter(staging / "runs", run_records, run_bytes, merge_fan_in)
        header = _verify_into(snapshot, sorter, config.max_value_bytes, progress)
        # The whole file is verified: only now is anything written to a log.
        raft_index = header.applied_index if keep_raft_index else 0
        log_bytes = _build_storage(
            staging,
            sorter,
            header,
            config,
            raft_index=raft_index,
            source=str(snapshot),
            progress=progress,
        )
        for name in (LOG_DIR, STATE_DIR):
            os.replace(staging / name, data_dir / name)
            installed.append(data_dir / name)
        fsync_directory(data_dir)
        shutil.rmtree(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for path in installed:
            shutil.rmtree(path, ignore_errors=True)
        if created_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
        raise
    seconds = time.monotonic() - started
    logger.info(
        "restored %d keys into %s at offset %d (raft index %d) in %.2fs",
        header.record_count,
        data_dir,
        header.applied_offset,
        raft_index,
        seconds,
    )
    return RestoreResult(header, raft_index, log_bytes, seconds)


def _verify_into(
    snapshot: Path, sorter: _RunSorter, max_value_bytes: int, progress: SnapshotProgress | None
) -> SnapshotHeader:
    """Read and verify the whole file, handing each record's frame to ``sorter``."""
    with open(snapshot, "rb", buffering=_READ_BUFFER) as f:
        reader = SnapshotReader(f, str(snapshot))
        report = _Reporter("verify", reader.header.record_count, progress)
        done = 0
        for record, frame in reader.records():
            if len(record.value) > max_value_bytes:
                raise StorageError(
                    f"{snapshot}: the value of record {done} is {len(record.value)} bytes, "
                    f"above the limit of {max_value_bytes}: restore with the cluster's "
                    f"--max-value-bytes"
                )
            sorter.add(record.offset, frame)
            done += 1
            if done % 1000 == 0:
                report(done)
        report(done)
        return reader.header


def _build_storage(
    staging: Path,
    sorter: _RunSorter,
    header: SnapshotHeader,
    config: StorageConfig,
    *,
    raft_index: int,
    source: str,
    progress: SnapshotProgress | None,
) -> int:
    """Write the sorted records to ``staging/log``, replay them into ``staging/state``
    and set LMDB's applied index and offset; returns the log's size in bytes."""
    log = CommitLog.open(staging / LOG_DIR, config)
    try:
        _write_log(
            log,
            sorter.sorted(),
            raft_index=raft_index,
            header=header,
            source=source,
            progress=progress,
        )
        sorter.discard()
        # The log's next offset must follow the snapshot's applied offset even
        # when the last offsets were deletes (no key holds them any more).
        log.advance_to(header.applied_offset + 1)
        log.sync()
        store = LmdbStore.open(staging / STATE_DIR, config.lmdb_map_size)
        try:
            load = _Reporter("load lmdb", header.record_count, progress)
            replay(log, store, lambda n, _offset: load(n))
            store.write([], raft_index, header.applied_offset)
            store.sync()
        finally:
            store.close()
        return log.size_bytes
    finally:
        log.close()


def _write_log(
    log: CommitLog,
    frames: Iterable[tuple[int, bytes]],
    *,
    raft_index: int,
    header: SnapshotHeader,
    source: str,
    progress: SnapshotProgress | None,
) -> None:
    report = _Reporter("write log", header.record_count, progress)
    batch: list[Record] = []
    previous = 0
    done = 0
    for offset, frame in frames:
        if offset <= previous:
            raise SnapshotFormatError(source, f"bad records: offset {offset} belongs to two keys")
        previous = offset
        record = decode_body(memoryview(frame)[PREFIX.size :])
        if record.raft_index != raft_index:
            record = record._replace(raft_index=raft_index)
        batch.append(record)
        if len(batch) >= _APPEND_RECORDS:
            log.append(batch)
            done += len(batch)
            batch = []
            report(done)
    if batch:
        log.append(batch)
        done += len(batch)
    report(done)


class _RunSorter:
    """External merge sort of (offset, frame) pairs with bounded memory.

    At most ``run_records`` pairs or ``run_bytes`` of frames are held; a full
    buffer is sorted and spilled to a run file of frames. :meth:`sorted`
    merges the runs (in passes of at most ``fan_in`` open files).
    """

    def __init__(self, directory: Path, run_records: int, run_bytes: int, fan_in: int) -> None:
        self._directory = directory
        self._run_records = run_records
        self._run_bytes = run_bytes
        self._fan_in = max(2, fan_in)
        self._buffer: list[tuple[int, bytes]] = []
        self._size = 0
        self._runs: list[Path] = []
        self._next_run = 0

    def add(self, offset: int, frame: bytes) -> None:
        self._buffer.append((offset, frame))
        self._size += len(frame)
        if len(self._buffer) >= self._run_records or self._size >= self._run_bytes:
            self._spill()

    def _new_run_path(self) -> Path:
        self._directory.mkdir(exist_ok=True)
        path = self._directory / f"run-{self._next_run:06d}"
        self._next_run += 1
        return path

    def _spill(self) -> None:
        self._buffer.sort(key=operator.itemgetter(0))
        path = self._new_run_path()
        _write_run(path, self._buffer)
        self._runs.append(path)
        self._buffer = []
        self._size = 0

    def sorted(self) -> Iterator[tuple[int, bytes]]:
        """Every pair added, in ascending offset order."""
        if not self._runs:
            self._buffer.sort(key=operator.itemgetter(0))
            buffer, self._buffer = self._buffer, []
            yield from buffer
            return
        if self._buffer:
            self._spill()
        while len(self._runs) > self._fan_in:
            group, self._runs = self._runs[: self._fan_in], self._runs[self._fan_in :]
            merged = self._new_run_path()
            _write_run(merged, _merge(group))
            for path in group:
                path.unlink()
            self._runs.append(merged)
        yield from _merge(self._runs)

    def discard(self) -> None:
        shutil.rmtree(self._directory, ignore_errors=True)
        self._runs = []


def _write_run(path: Path, pairs: Iterable[tuple[int, bytes]]) -> None:
    with open(path, "wb", buffering=_READ_BUFFER) as f:
        for _, frame in pairs:
            f.write(frame)


def _read_run(path: Path) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb", buffering=_RUN_READ_BUFFER) as f:
        while True:
            prefix = f.read(PREFIX.size)
            if not prefix:
                return
            (length, _crc) = PREFIX.unpack(prefix)
            body = f.read(length)
            yield _OFFSET.unpack_from(body, 0)[0], prefix + body


def _merge(paths: list[Path]) -> Iterator[tuple[int, bytes]]:
    return heapq.merge(*(_read_run(p) for p in paths), key=operator.itemgetter(0))
