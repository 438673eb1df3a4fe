"""The Python engine: one process, streaming, memory bounded by one bucket.

- Bucket files are read one at a time; the buckets that differ are merged
  side by side (one open reader per replica, keys in order).
- Each log is read once in the scan and spilled into per-bucket files; a
  bucket's replay then holds only that bucket's keys in memory.
- The logs are compared by merging them by offset, one record per replica
  in memory.
"""

from __future__ import annotations

import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from spark_tools.audit_plan import AuditPlan, Pair
from spark_tools.divergence import (
    DivergenceRow,
    Observation,
    ReplayRow,
    divergence_rows,
    replay_class,
)
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
from spark_tools.export_scan import LogScan, StateScan, scan_log, scan_state
from spark_tools.findings import LogAgreement
from spark_tools.progress import Progress

_SPILL_HEADER = struct.Struct(">QBI")
_SHA_BYTES = 32
_SPILL_BUFFER_BYTES = 32 * 1024 * 1024


class _LogSpill:
    """A replica's log records split into one file per bucket (offset order kept)."""

    def __init__(self, directory: Path, splits: list[bytes]) -> None:
        self._directory = directory
        self._splits = splits
        self._buffers: dict[int, list[bytes]] = {}
        self._buffered = 0
        directory.mkdir(parents=True)

    def path(self, bucket: int) -> Path:
        return self._directory / f"bucket-{bucket:05d}.spill"

    def add(self, item: LogItem) -> None:
        frame = (
            _SPILL_HEADER.pack(item.offset, item.op, len(item.key))
            + item.key
            + bytes.fromhex(item.value_sha)
        )
        self._buffers.setdefault(bucket_of(item.sort_key, self._splits), []).append(frame)
        self._buffered += len(frame)
        if self._buffered >= _SPILL_BUFFER_BYTES:
            self.flush()

    def flush(self) -> None:
        for bucket, frames in self._buffers.items():
            with open(self.path(bucket), "ab") as f:
                f.write(b"".join(frames))
        self._buffers.clear()
        self._buffered = 0

    def replay(self, bucket: int) -> list[tuple[bytes, bytes, int, str]]:
        """The bucket's replayed state: (sort key, key, version, value sha), in key order."""
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


def _merge_state_and_replay(
    replica: int,
    bucket: int,
    state: Iterator[tuple[bytes, bytes, Observation]],
    replay: Iterator[tuple[bytes, bytes, Observation]],
) -> Iterator[ReplayRow]:
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


class PythonEngine:
    def __init__(self) -> None:
        self._spill_root = Path(tempfile.mkdtemp(prefix="rkv-audit-"))
        self._spills: dict[int, _LogSpill] = {}

    def describe(self) -> dict[str, Any]:
        return {"name": "python"}

    def scan(self, plan: AuditPlan, progress: Progress) -> tuple[list[StateScan], list[LogScan]]:
        tasks = plan.state_tasks()
        progress.start("scan", len(tasks), "bucket files")
        states: list[StateScan] = []
        keys = 0
        for task in tasks:
            states.append(scan_state(task))
            keys += states[-1].keys
            progress.tick(len(states), keys)
        progress.finish(len(states), keys)
        log_replicas = plan.log_replicas
        progress.start("log scan", len(log_replicas), "logs", "records")
        logs: list[LogScan] = []
        records = 0
        for replica in log_replicas:
            spill = _LogSpill(self._spill_root / str(replica), plan.split_sort_keys)
            logs.append(scan_log(plan.log_task(replica), spill.add))
            spill.flush()
            self._spills[replica] = spill
            records += logs[-1].records
            progress.tick(len(logs), records)
        progress.finish(len(logs), records)
        return states, logs

    def replay_fingerprints(self, plan: AuditPlan) -> dict[Pair, tuple[int, int]]:
        result: dict[Pair, tuple[int, int]] = {}
        for replica, spill in self._spills.items():
            for bucket in range(plan.buckets):
                total = 0
                items = spill.replay(bucket)
                for _order, key, version, sha in items:
                    total = add_fingerprints(total, fingerprint(key, version, sha))
                if items:
                    result[replica, bucket] = (len(items), total)
        return result

    def replay_rows(
        self, plan: AuditPlan, pairs: list[Pair], emit: Callable[[ReplayRow], None]
    ) -> None:
        for replica, bucket in sorted(pairs):
            state = (
                (item.sort_key, item.key, (item.version, item.value_sha))
                for item in read_state(plan.exports[replica].state_path(bucket))
            )
            replay = (
                (order, key, (version, sha))
                for order, key, version, sha in self._spills[replica].replay(bucket)
            )
            for row in _merge_state_and_replay(replica, bucket, state, replay):
                emit(row)

    def log_agreement(self, plan: AuditPlan, replicas: list[int]) -> LogAgreement:
        agreement = LogAgreement(replicas=replicas)
        readers = [
            read_log(Path(plan.log_task(r).path), plan.manifest(r).applied_offset) for r in replicas
        ]
        heads = [next(reader, None) for reader in readers]
        while True:
            present = [h.offset for h in heads if h is not None]
            if not present:
                break
            offset = min(present)
            at = {
                replicas[i]: h for i, h in enumerate(heads) if h is not None and h.offset == offset
            }
            if len(at) >= 2:
                agreement.offsets_compared += 1
                identities = {(h.raft_index, h.op, h.key, h.value_sha) for h in at.values()}
                if len(identities) > 1:
                    agreement.divergent_offsets += 1
                    if agreement.first_offset is None:
                        agreement.first_offset = offset
                        agreement.first_records = {r: at.get(r) for r in replicas}
            for i, h in enumerate(heads):
                if h is not None and h.offset == offset:
                    heads[i] = next(readers[i], None)
        return agreement

    def compare_buckets(
        self,
        plan: AuditPlan,
        buckets: list[int],
        emit: Callable[[DivergenceRow], None],
        progress: Progress,
    ) -> dict[int, int]:
        distinct: dict[int, int] = {}
        n = len(plan.exports)
        progress.start("compare", len(buckets), "buckets")
        keys = 0
        for done, bucket in enumerate(sorted(buckets), 1):
            readers = [read_state(e.state_path(bucket)) for e in plan.exports]
            heads = [next(reader, None) for reader in readers]
            count = 0
            while True:
                present = [h.sort_key for h in heads if h is not None]
                if not present:
                    break
                order = min(present)
                observations: list[Observation] = [None] * n
                key = b""
                for i, h in enumerate(heads):
                    if h is not None and h.sort_key == order:
                        observations[i] = (h.version, h.value_sha)
                        key = h.key
                        heads[i] = next(readers[i], None)
                count += 1
                for row in divergence_rows(bucket, key, order, observations):
                    emit(row)
            distinct[bucket] = count
            keys += count
            progress.tick(done, keys)
        progress.finish(len(buckets), keys)
        return distinct

    def close(self) -> None:
        shutil.rmtree(self._spill_root, ignore_errors=True)
