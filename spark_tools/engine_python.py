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
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spark_tools.audit_plan import AuditPlan, Pair
from spark_tools.divergence import (
    DivergenceRow,
    Observation,
    ReplayRow,
    divergence_rows,
)
from spark_tools.export_reading import (
    read_log,
    read_state,
)
from spark_tools.export_scan import LogScan, StateScan, scan_log, scan_state
from spark_tools.findings import LogAgreement
from spark_tools.log_replay import LogSpill, replay_mismatches
from spark_tools.progress import Progress


class PythonEngine:
    def __init__(self) -> None:
        self._spill_root = Path(tempfile.mkdtemp(prefix="rkv-audit-"))
        self._spills: dict[int, LogSpill] = {}

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
            spill = LogSpill(self._spill_root / str(replica), plan.split_sort_keys)
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
                summary = spill.fingerprint(bucket)
                if summary is not None:
                    result[replica, bucket] = summary
        return result

    def replay_rows(
        self, plan: AuditPlan, pairs: list[Pair], emit: Callable[[ReplayRow], None]
    ) -> None:
        for replica, bucket in sorted(pairs):
            state_path = plan.exports[replica].state_path(bucket)
            replayed = self._spills[replica].replay(bucket)
            for row in replay_mismatches(replica, bucket, state_path, replayed):
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
