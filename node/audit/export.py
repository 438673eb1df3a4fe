"""A consistency audit's export: one node's state at the audit's cut, and its log.

This docstring is the contract between the nodes that write an export and the
comparison (spark_tools/) that reads them. Format 1.

The cut
-------
``POST /v1/audit`` on the leader picks split points (:func:`choose_split_points`
on its own LMDB) and proposes ``AuditCut(audit_id, split_points)`` through
the raft log (node/state/commands.py, tag 12). Every node, once it has applied the
entry holding it, exports the state as of exactly that entry from one LMDB read
transaction: the same raft index and, on replicas that agree, the same applied
offset, keys and digests. Writes go on meanwhile. Split points travel in the
command, never computed per node, because replicas may diverge.

Directory
---------
For audit id A (``[A-Za-z0-9._-]{1,64}``, not "." or "..") on node N (its
``--id``): ``<audit_dir>/<A>/<N>/`` (``--audit-dir``, default
``<data-dir>/audit``; a shared volume works, every node writes its own N).

``bucket-00000.rkvsnap`` ... ``bucket-<B-1>.rkvsnap`` (five digits)
    The state in the snapshot file format of node/snapshot/format.py (header
    with magic RKVSNAP, format version 1, the cut's applied raft index and
    applied offset, the bucket's record count, created-at ms, CRC-32; one
    commit-log framed PUT record per key, offset = the key's version, create
    version, raft index = the cut's, timestamp = created-at; a trailer with the
    count and a SHA-256 of everything before it). One file per key-range
    bucket, B = len(split points) + 1, every file present even when empty.
    Bucket i holds the keys k with ``split[i-1] <= k < split[i]`` in plain
    byte order (split[-1] = -inf, split[B-1] = +inf), in LMDB order, which
    within a bucket is byte order except among keys longer than 511 bytes
    sharing their first 495 bytes (LMDB orders those by a digest). Split points
    are at most 495 bytes, so every bucket is a contiguous run of LMDB's order.
    Internal keys (the ``\\x00rkv/`` prefix: members, producers, checkpoints)
    are included: they are state. Every header carries the same applied index
    and offset (the cut). Each file passes ``node.snapshot.file.verify_snapshot``.
``log.rkvlog``
    This node's commit-log records with offset <= the cut's applied offset, in
    offset order, concatenated in the framing ``GET /v1/log`` streams
    (node/storage/log_feed.py, node/storage/record.py: length u32, CRC-32 u32, offset u64,
    raft index u64, timestamp i64, create version u64, op u8 (1 put, 2 delete;
    bit 0x80 set on every record), key length u32, value length u32, key,
    value; big-endian), no header or trailer. The log may be compacted (the
    latest record of each key, and tombstones still in retention): replaying
    it (the last record of each key wins; a delete removes the key) gives the
    exported state, keys, versions, create versions and values.
``manifest.json``
    Written last, atomically (temporary file, fsync, rename, fsync of the
    directory): its presence means the export is complete. A JSON object::

        {"format": 1, "audit_id": A, "replica": N,
         "raft_index": I, "applied_offset": O,
         "key_count": K,                     # internal keys included
         "buckets": B,
         "split_points": [base64, ...],      # B - 1 of them, standard base64
         "bucket_counts": [int, ...],        # B
         "bucket_digests": [hex, ...],       # B, see below
         "files": {"state": ["bucket-00000.rkvsnap", ...], "log": "log.rkvlog"},
         "log_records": n,
         "created_ms": t,                    # when the export started (= headers)
         "seconds": d}                       # how long it took

    A bucket digest is the hex SHA-256 over, for each key of the bucket in
    file order: the key's length (4 bytes, big-endian), the key, its version
    (8 bytes, big-endian) and the SHA-256 of its value (32 bytes).
``error.json``
    Only when the export failed: ``{"code", "message"}`` (code
    ``audit_export_failed``, or ``audit_running`` for a cut this node skipped
    because another export was running). Not part of an export;
    ``GET /v1/audit/{A}`` reports it.

Each node deletes its own older export directories (node/audit/retention.py):
it first renames ``<A>/<N>/`` into ``<audit_dir>/~deleting/<N>/`` (``~`` starts
no audit id), then removes it, so a directory under its own name with a
manifest is always a complete export. Readers must not look into ``~deleting``.

Writing streams chunk by chunk (1000 keys or 4 MiB of values, one log batch of
1 MiB): memory never holds the state. Progress is logged every 2 s.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import json
import logging
import os
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from node.errors import ExportInterrupted
from node.snapshot.export import SnapshotWriter
from node.snapshot.format import FORMAT_VERSION as SNAPSHOT_FORMAT_VERSION
from node.snapshot.format import SnapshotHeader
from node.state.commands import MAX_AUDIT_BUCKETS
from node.storage.commit_log import FIRST_OFFSET, CommitLog
from node.storage.datadir import fsync_directory
from node.storage.key_order import LONG_KEY_PREFIX
from node.storage.lmdb_store import DetachedView, ReadView, StoredValue
from node.storage.log_feed import encoded_records

logger = logging.getLogger(__name__)

FORMAT = 1
MANIFEST_NAME = "manifest.json"
LOG_NAME = "log.rkvlog"
ERROR_NAME = "error.json"
DEFAULT_BUCKETS = 16
_LOG_CHUNK_BYTES = 1024 * 1024
_PROGRESS_SECONDS = 2.0
_KEY_LENGTH = struct.Struct(">I")
_VERSION = struct.Struct(">Q")


def bucket_name(index: int) -> str:
    return f"bucket-{index:05d}.rkvsnap"


def export_directory(audit_dir: Path, audit_id: str, replica: str) -> Path:
    return audit_dir / audit_id / replica


def choose_split_points(view: ReadView, buckets: int) -> list[bytes]:
    """Up to ``buckets - 1`` split points that cut ``view``'s keys (internal ones
    included) into runs of about equal count: the key at every (count/B)-th
    position, cut to 495 bytes (so that buckets follow LMDB's order), fewer when
    there are fewer keys or cut keys coincide. One pass over the keys, no values."""
    if not 1 <= buckets <= MAX_AUDIT_BUCKETS:
        raise ValueError(f"buckets must be 1 to {MAX_AUDIT_BUCKETS}, not {buckets}")
    count = view.count(include_internal=True)
    parts = min(buckets, max(count, 1))
    positions = [i * count // parts for i in range(1, parts)]
    points: list[bytes] = []
    wanted = 0
    for position, key in enumerate(view.lmdb_keys()):
        if wanted >= len(positions):
            break
        if position == positions[wanted]:
            point = key[:LONG_KEY_PREFIX]
            if not points or point > points[-1]:
                points.append(point)
            wanted += 1
    return points


def key_digest_part(key: bytes, stored: StoredValue) -> bytes:
    """What one key adds to its bucket's digest (see the module docs)."""
    return b"".join(
        (
            _KEY_LENGTH.pack(len(key)),
            key,
            _VERSION.pack(stored.version),
            hashlib.sha256(stored.value).digest(),
        )
    )


@dataclass
class ExportProgress:
    """Where a running export is; read by the status endpoint from another thread."""

    phase: str = "count"  # "count" (keys per bucket), "state", then "log"
    records: int = 0
    total_keys: int = 0
    bytes: int = 0
    log_records: int = 0
    started: float = field(default_factory=time.monotonic)

    def as_json(self) -> dict[str, Any]:
        elapsed = time.monotonic() - self.started
        return {
            "phase": self.phase,
            "records": self.records,
            "total_keys": self.total_keys,
            "log_records": self.log_records,
            "bytes": self.bytes,
            "seconds": round(elapsed, 3),
        }


class _ProgressLog:
    """A log line every 2 s: records, MB and the rate."""

    def __init__(self, audit_id: str, progress: ExportProgress) -> None:
        self._audit_id = audit_id
        self._progress = progress
        self._last = time.monotonic()

    def tick(self) -> None:
        now = time.monotonic()
        if now - self._last < _PROGRESS_SECONDS:
            return
        self._last = now
        p = self._progress
        done = p.log_records if p.phase == "log" else p.records
        logger.info(
            "audit %s: %s: %d records, %.1f MB written (%.0f records/s)",
            self._audit_id,
            p.phase,
            done,
            p.bytes / 1e6,
            done / max(now - p.started, 1e-9),
        )


@dataclass(frozen=True, slots=True)
class StateExport:
    raft_index: int
    applied_offset: int
    created_ms: int
    bucket_counts: list[int]
    bucket_digests: list[str]
    files: list[str]


def _fsync_close(out: BinaryIO) -> None:
    out.flush()
    os.fsync(out.fileno())
    out.close()


def _count_buckets(
    view: ReadView,
    split_points: Sequence[bytes],
    check: Callable[[], None],
    progress: ExportProgress,
    ticker: _ProgressLog,
) -> list[int]:
    """Keys per bucket (a snapshot header needs its count first): a pass over the
    LMDB keys. A long key compares by its first 495 bytes, like its user key
    would against a split point of at most 495 bytes."""
    progress.phase = "count"
    counts = [0] * (len(split_points) + 1)
    for n, key in enumerate(view.lmdb_keys(), 1):
        counts[bisect.bisect_right(split_points, key)] += 1
        if n % 10_000 == 0:
            check()
            progress.records = n
            ticker.tick()
    progress.phase, progress.records = "state", 0
    return counts


class _BucketFiles:
    """The bucket files, written one after the other in key order."""

    def __init__(self, directory: Path, counts: list[int], header: SnapshotHeader) -> None:
        self._directory = directory
        self._counts = counts
        self._header = header
        self.files = [bucket_name(i) for i in range(len(counts))]
        self.digests: list[str] = []
        self._out: BinaryIO | None = None
        self._writer: SnapshotWriter | None = None
        self._digest = hashlib.sha256()
        self._done_bytes = 0

    @property
    def size(self) -> int:
        """Bytes written so far."""
        return self._done_bytes + (0 if self._writer is None else self._writer.bytes)

    @property
    def current(self) -> int:
        return len(self.digests) if self._writer is not None else len(self.digests) - 1

    def advance_to(self, bucket: int) -> None:
        while self.current < bucket:
            self._finish_current()
            index = len(self.digests)
            self._out = open(self._directory / self.files[index], "wb")  # noqa: SIM115
            self._writer = SnapshotWriter(
                self._out, self._header._replace(record_count=self._counts[index])
            )
            self._digest = hashlib.sha256()

    def add(self, items: list[tuple[bytes, StoredValue]]) -> None:
        assert self._writer is not None
        for key, stored in items:
            self._digest.update(key_digest_part(key, stored))
        self._writer.add(items)

    def _finish_current(self) -> None:
        if self._writer is None or self._out is None:
            return
        self._writer.finish()
        self._done_bytes += self._writer.bytes
        _fsync_close(self._out)
        self.digests.append(self._digest.hexdigest())
        self._writer = self._out = None

    def finish(self) -> None:
        self.advance_to(len(self._counts) - 1)
        self._finish_current()
        fsync_directory(self._directory)

    def abandon(self) -> None:
        if self._out is not None:
            self._out.close()


def write_state(
    view: DetachedView | ReadView,
    directory: Path,
    split_points: Sequence[bytes],
    progress: ExportProgress,
    *,
    audit_id: str = "",
    stop: Callable[[], bool] = lambda: False,
) -> StateExport:
    """Write the bucket files of ``view`` into ``directory`` (which exists).

    Raises :class:`ExportInterrupted` when ``stop()`` turns true or the view is
    interrupted (a map resize waits for it), checked between chunks.
    """
    interrupted = view.interrupted if isinstance(view, DetachedView) else None

    def check() -> None:
        if interrupted is not None and interrupted.is_set():
            raise ExportInterrupted(
                "LMDB had to grow its map or replace its files during the export "
                "(it cannot while a read transaction is open); run a new audit"
            )
        if stop():
            raise ExportInterrupted("the node is stopping")

    check()
    raft_index, applied_offset = view.applied()
    created_ms = int(time.time() * 1000)
    ticker = _ProgressLog(audit_id, progress)
    counts = _count_buckets(view, split_points, check, progress, ticker)
    progress.total_keys = sum(counts)
    header = SnapshotHeader(SNAPSHOT_FORMAT_VERSION, raft_index, applied_offset, 0, created_ms)
    buckets = _BucketFiles(directory, counts, header)
    try:
        buckets.advance_to(0)
        for chunk in view.all_items():
            check()
            run: list[tuple[bytes, StoredValue]] = []
            for item in chunk:
                bucket = bisect.bisect_right(split_points, item[0])
                if bucket != buckets.current:
                    buckets.add(run)
                    run = []
                    buckets.advance_to(bucket)
                run.append(item)
            buckets.add(run)
            progress.records += len(chunk)
            progress.bytes = buckets.size
            ticker.tick()
        buckets.finish()
    except BaseException:
        buckets.abandon()
        raise
    progress.bytes = buckets.size
    return StateExport(
        raft_index, applied_offset, created_ms, counts, buckets.digests, buckets.files
    )


def write_log(
    log: CommitLog,
    directory: Path,
    applied_offset: int,
    progress: ExportProgress,
    *,
    audit_id: str = "",
    stop: Callable[[], bool] = lambda: False,
) -> int:
    """Write ``log``'s records up to ``applied_offset`` to ``directory/log.rkvlog``;
    how many. The caller holds ``log.rewriting`` (no compaction meanwhile)."""
    progress.phase = "log"
    ticker = _ProgressLog(audit_id, progress)
    records = 0
    with open(directory / LOG_NAME, "wb") as out:
        chunk: list[bytes] = []
        size = 0
        for data in encoded_records(log, FIRST_OFFSET, applied_offset):
            chunk.append(data)
            size += len(data)
            records += 1
            if size >= _LOG_CHUNK_BYTES:
                if stop():
                    raise ExportInterrupted("the node is stopping")
                out.write(b"".join(chunk))
                progress.bytes += size
                progress.log_records = records
                chunk, size = [], 0
                ticker.tick()
        out.write(b"".join(chunk))
        progress.bytes += size
        progress.log_records = records
        out.flush()
        os.fsync(out.fileno())
    return records


def build_manifest(
    audit_id: str,
    replica: str,
    *,
    split_points: Sequence[bytes],
    state: StateExport,
    log_records: int,
    seconds: float,
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "audit_id": audit_id,
        "replica": replica,
        "raft_index": state.raft_index,
        "applied_offset": state.applied_offset,
        "key_count": sum(state.bucket_counts),
        "buckets": len(state.bucket_counts),
        "split_points": [base64.b64encode(p).decode("ascii") for p in split_points],
        "bucket_counts": state.bucket_counts,
        "bucket_digests": state.bucket_digests,
        "files": {"state": state.files, "log": LOG_NAME},
        "log_records": log_records,
        "created_ms": state.created_ms,
        "seconds": round(seconds, 3),
    }


def write_json_atomically(directory: Path, name: str, body: dict[str, Any]) -> None:
    """``directory/name`` appears whole or not at all: a temporary file, fsynced,
    renamed into place, then the directory fsynced."""
    tmp = directory / f".{name}.tmp"
    with open(tmp, "wb") as out:
        out.write(json.dumps(body, indent=1).encode())
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, directory / name)
    fsync_directory(directory)


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or None if absent or unreadable."""
    try:
        body = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def manifest_files(manifest: dict[str, Any]) -> set[str]:
    """The file names a finished export's manifest lists."""
    files = manifest.get("files")
    if not isinstance(files, dict):
        return set()
    names = {name for name in files.get("state", []) if isinstance(name, str)}
    if isinstance(files.get("log"), str):
        names.add(files["log"])
    return names
