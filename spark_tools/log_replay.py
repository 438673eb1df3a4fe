"""Replaying a replica's log export bucket by bucket, shared by both engines.

A log is read once and its records are split into one spill file per key-range
bucket (offset order kept), so that a bucket's replay (the last record of each
key; a delete removes it) holds only that bucket's keys in memory. The Python
engine spills every log during its scan; the Spark engine runs the same thing
in executor tasks, one per (replica, group of buckets), and only fingerprints or
mismatching keys come back. Also the identity of a record, which the Spark
engine's log comparison groups by offset.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from spark_tools.divergence import Observation, ReplayRow, replay_class
from spark_tools.export_reading import (
    PUT,
    LogItem,
    add_fingerprints,
    bucket_of,
    fingerprint,
    read_log,
    read_state,
    sort_key,
)

_SPILL_HEADER = struct.Struct(">QBI")
_SHA_BYTES = 32
_SPILL_BUFFER_BYTES = 32 * 1024 * 1024
_IDENTITY_HEADER = struct.Struct(">QBI")

Replayed = tuple[bytes, bytes, int, str]
"""(sort key, key, version, value sha) of a replayed key."""


class LogSpill:
    """A replica's log records split into one file per bucket (offset order kept);
    records outside ``only`` (when given) are dropped."""

    def __init__(
        self, directory: Path, splits: list[bytes], only: Iterable[int] | None = None
    ) -> None:
        self._directory = directory
        self._splits = splits
        self._only = None if only is None else frozenset(only)
        self._buffers: dict[int, list[bytes]] = {}
        self._buffered = 0
        directory.mkdir(parents=True)

    def path(self, bucket: int) -> Path:
        return self._directory / f"bucket-{bucket:05d}.spill"

    def add(self, item: LogItem) -> None:
        bucket = bucket_of(item.sort_key, self._splits)
        if self._only is not None and bucket not in self._only:
            return
        frame = (
            _SPILL_HEADER.pack(item.offset, item.op, len(item.key))
            + item.key
            + bytes.fromhex(item.value_sha)
        )
        self._buffers.setdefault(bucket, []).append(frame)
        self._buffered += len(frame)
        if self._buffered >= _SPILL_BUFFER_BYTES:
            self.flush()

    def flush(self) -> None:
        for bucket, frames in self._buffers.items():
            with open(self.path(bucket), "ab") as f:
                f.write(b"".join(frames))
        self._buffers.clear()
        self._buffered = 0

    def replay(self, bucket: int) -> list[Replayed]:
        """The bucket's replayed state, in key order."""
        path = self.path(bucket)
        if not path.exists():
            return []
        data = path.read_bytes()
        latest: dict[bytes, tuple[int, int, bytes]] = {}
        position = 0
        while position < len(data):
            offset, op, key_len = _SPILL_HEADER.unpack_from(data, position)
            position += _SPILL_HEADER.size
            key = data[position : position + key_len]
            position += key_len
            latest[key] = (offset, op, data[position : position + _SHA_BYTES])
            position += _SHA_BYTES
        items = [
            (sort_key(key), key, offset, sha.hex())
            for key, (offset, op, sha) in latest.items()
            if op == PUT
        ]
        items.sort()
        return items

    def fingerprint(self, bucket: int) -> tuple[int, int] | None:
        """(key count, sum of fingerprints) of the bucket's replay; None if empty."""
        items = self.replay(bucket)
        if not items:
            return None
        total = 0
        for _order, key, version, sha in items:
            total = add_fingerprints(total, fingerprint(key, version, sha))
        return len(items), total


def merge_state_and_replay(
    replica: int,
    bucket: int,
    state: Iterator[tuple[bytes, bytes, Observation]],
    replay: Iterator[tuple[bytes, bytes, Observation]],
) -> Iterator[ReplayRow]:
    """The keys where a bucket's state file and its log replay (both in key
    order) disagree."""
    s = next(state, None)
    r = next(replay, None)
    while s is not None or r is not None:
        if r is None or (s is not None and s[0] < r[0]):
            assert s is not None
            order, key, state_obs, log_obs = s[0], s[1], s[2], None
            s = next(state, None)
        elif s is None or r[0] < s[0]:
            order, key, state_obs, log_obs = r[0], r[1], None, r[2]
            r = next(replay, None)
        else:
            order, key, state_obs, log_obs = s[0], s[1], s[2], r[2]
            s, r = next(state, None), next(replay, None)
        klass = replay_class(state_obs, log_obs)
        if klass is not None:
            yield ReplayRow(replica, bucket, order, key, klass, state_obs, log_obs)


def replay_mismatches(
    replica: int, bucket: int, state_path: Path, replayed: list[Replayed]
) -> Iterator[ReplayRow]:
    """The mismatches between a bucket file and the bucket's replay."""
    state = (
        (item.sort_key, item.key, (item.version, item.value_sha)) for item in read_state(state_path)
    )
    replay = ((order, key, (version, sha)) for order, key, version, sha in replayed)
    return merge_state_and_replay(replica, bucket, state, replay)


class ReplayTask(NamedTuple):
    """One log, replayed for some of its buckets (run where the file is readable)."""

    replica: int
    path: str
    applied_offset: int
    splits: list[bytes]
    buckets: tuple[int, ...]
    state_paths: tuple[str, ...] | None
    """Per bucket of ``buckets``, its state file: compare key by key (replay_rows)."""


def _spill(task: ReplayTask, directory: Path) -> LogSpill:
    spill = LogSpill(directory, task.splits, task.buckets)
    for item in read_log(Path(task.path), task.applied_offset):
        spill.add(item)
    spill.flush()
    return spill


def _scratch() -> Path:
    """A temporary directory on the executor's local disk."""
    local = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0] or None
    return Path(tempfile.mkdtemp(prefix="rkv-replay-", dir=local))


def replay_fingerprint_task(task: ReplayTask) -> list[tuple[int, int, int, int]]:
    """(replica, bucket, key count, fingerprint) per non-empty bucket of the task."""
    scratch = _scratch()
    try:
        spill = _spill(task, scratch / "spill")
        found = []
        for bucket in task.buckets:
            summary = spill.fingerprint(bucket)
            if summary is not None:
                found.append((task.replica, bucket, *summary))
        return found
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def replay_rows_task(task: ReplayTask) -> list[ReplayRow]:
    """Every key of the task's buckets where the state file and the replay differ."""
    assert task.state_paths is not None
    scratch = _scratch()
    try:
        spill = _spill(task, scratch / "spill")
        rows: list[ReplayRow] = []
        for bucket, state_path in zip(task.buckets, task.state_paths, strict=True):
            rows.extend(
                replay_mismatches(task.replica, bucket, Path(state_path), spill.replay(bucket))
            )
        return rows
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def record_identity(item: LogItem) -> int:
    """A signed 64-bit hash of what must agree between replicas at one offset
    (raft index, op, key, value); two different records share it with probability
    2**-64."""
    head = _IDENTITY_HEADER.pack(item.raft_index, item.op, len(item.key))
    digest = hashlib.sha256(head + item.key + bytes.fromhex(item.value_sha)).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
