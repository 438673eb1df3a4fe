"""Snapshot restore (RIP-22 phase 2): seed a fresh data directory from a snapshot file.

Restore (:func:`restore_snapshot`) seeds a fresh data directory. Commit-log
offsets must be strictly increasing, but the file is in key order, so restore
sorts by offset with a bounded external merge sort: records are cut into runs
of at most 100 000 records or 32 MiB, each run sorted in memory and spilled to
a file, and the runs merged (in passes of at most 64 files). A snapshot that
fits in one run never touches the disk. Nothing is written to the commit log
before the whole file has been verified. The sorted records are appended to a
new commit log, the file's records are put into a new LMDB in the file's (key)
order, which keeps its pages full, and LMDB's applied index and offset are set
to the snapshot's. Everything is built in
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

The format and its validating reader are node/snapshot/format.py.
"""

from __future__ import annotations

import heapq
import logging
import operator
import os
import shutil
import struct
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from node.errors import SnapshotFormatError, StorageError
from node.snapshot.format import (
    READ_BUFFER,
    ProgressReporter,
    SnapshotHeader,
    SnapshotProgress,
    SnapshotReader,
)
from node.storage.commit_log import CommitLog
from node.storage.config import FsyncPolicy, StorageConfig
from node.storage.datadir import LOG_DIR, STATE_DIR, fsync_directory, make_directories
from node.storage.lmdb_store import LmdbStore
from node.storage.record import PREFIX, Record, decode_body

logger = logging.getLogger(__name__)

STAGING_DIR = ".restore-staging"
_OFFSET = struct.Struct(">Q")
# Restore: records per log append, sort-run limits, merge fan-in.
_APPEND_RECORDS = 1000
RUN_RECORDS = 100_000
RUN_BYTES = 32 * 1024 * 1024
MERGE_FAN_IN = 64
_RUN_READ_BUFFER = 256 * 1024
# Entries a fresh data directory may hold (a mount point's lost+found; a staging
# directory an interrupted restore left behind, which is removed).
_IGNORABLE = frozenset({"lost+found", STAGING_DIR})


class RestoreResult(NamedTuple):
    header: SnapshotHeader
    raft_index: int
    """The applied index LMDB now holds: 0, or the snapshot's with keep_raft_index."""
    log_bytes: int
    seconds: float


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
    make_directories(data_dir)
    staging = data_dir / STAGING_DIR
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    installed: list[Path] = []
    try:
        header, raft_index, log_bytes = build_staging(
            snapshot,
            staging,
            config,
            keep_raft_index=keep_raft_index,
            progress=progress,
            run_records=run_records,
            run_bytes=run_bytes,
            merge_fan_in=merge_fan_in,
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


def build_staging(
    snapshot: Path,
    staging: Path,
    config: StorageConfig,
    *,
    keep_raft_index: bool,
    progress: SnapshotProgress | None = None,
    run_records: int = RUN_RECORDS,
    run_bytes: int = RUN_BYTES,
    merge_fan_in: int = MERGE_FAN_IN,
) -> tuple[SnapshotHeader, int, int]:
    """Verify the snapshot file and build ``staging/log`` and ``staging/state`` from it.

    Returns the header, the applied raft index LMDB holds (see the module
    docstring) and the log's size in bytes. ``staging`` must exist; the sort
    runs go in ``staging/runs`` and are removed.
    """
    sorter = _RunSorter(staging / "runs", run_records, run_bytes, merge_fan_in)
    try:
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
    finally:
        sorter.discard()
    return header, raft_index, log_bytes


def _verify_into(
    snapshot: Path, sorter: _RunSorter, max_value_bytes: int, progress: SnapshotProgress | None
) -> SnapshotHeader:
    """Read and verify the whole file, handing each record's frame to ``sorter``."""
    with open(snapshot, "rb", buffering=READ_BUFFER) as f:
        reader = SnapshotReader(f, str(snapshot))
        report = ProgressReporter("verify", reader.header.record_count, progress)
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
    """Write the sorted records to ``staging/log``, put the file's records into
    ``staging/state`` in key order and set LMDB's applied index and offset; returns
    the log's size in bytes."""
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
            _load_in_key_order(Path(source), store, raft_index, header, progress)
            store.write([], raft_index, header.applied_offset)
            store.sync()
        finally:
            store.close()
        return log.size_bytes
    finally:
        log.close()


def _load_in_key_order(
    snapshot: Path,
    store: LmdbStore,
    raft_index: int,
    header: SnapshotHeader,
    progress: SnapshotProgress | None,
) -> None:
    """Put the (verified) snapshot's records into LMDB in the file's order, which is
    LMDB's key order: every put appends to the last page (see LmdbStore), so the new
    LMDB is as compact as LMDB gets."""
    report = ProgressReporter("load lmdb", header.record_count, progress)
    done = 0
    batch: list[Record] = []
    with open(snapshot, "rb", buffering=READ_BUFFER) as f:
        for record, _ in SnapshotReader(f, str(snapshot)).records():
            batch.append(record)
            if len(batch) >= _APPEND_RECORDS:
                store.apply_records(batch, raft_index)
                done += len(batch)
                batch = []
                report(done)
    if batch:
        store.apply_records(batch, raft_index)
        done += len(batch)
    report(done)


def _write_log(
    log: CommitLog,
    frames: Iterable[tuple[int, bytes]],
    *,
    raft_index: int,
    header: SnapshotHeader,
    source: str,
    progress: SnapshotProgress | None,
) -> None:
    report = ProgressReporter("write log", header.record_count, progress)
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
    with open(path, "wb", buffering=READ_BUFFER) as f:
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
