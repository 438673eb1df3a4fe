"""The Python engine: one process, streaming, memory bounded by one bucket.

- Bucket files are read one at a time; the buckets that differ are merged
  side by side (one open reader per replica, keys in order;
  spark_tools/bucket_compare.py).
- Each log is read once in the scan and spilled into per-bucket files; a
  bucket's replay then holds only that bucket's keys in memory.
- The logs are compared by their (offset, record identity) pairs, packed
  during the scan (16 bytes per record): equal digests, else merged by offset
  (spark_tools/log_identity.py).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spark_tools.audit_plan import AuditPlan, Pair
from spark_tools.bucket_compare import merge_bucket
from spark_tools.divergence import (
    DivergenceRow,
    ReplayRow,
)
from spark_tools.export_reading import (
    LogItem,
)
from spark_tools.export_scan import LogScan, StateScan, scan_log, scan_state
from spark_tools.findings import LogAgreement
from spark_tools.log_identity import (
    PAIR,
    IdentityLog,
    agree_by_digest,
    merge_pairs,
    record_at,
)
from spark_tools.log_replay import LogSpill, replay_mismatches
from spark_tools.progress import Progress


class PythonEngine:
    def __init__(self) -> None:
        self._spill_root = Path(tempfile.mkdtemp(prefix="rkv-audit-"))
        self._spills: dict[int, LogSpill] = {}
        self._identities: dict[int, IdentityLog] = {}

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
            identities = self._identities[replica] = IdentityLog()

            def sink(item: LogItem, spill: LogSpill = spill, ids: IdentityLog = identities) -> None:
                spill.add(item)
                ids.add(item)

            logs.append(scan_log(plan.log_task(replica), sink))
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
        pairs = {r: bytes(self._identities[r].pairs) for r in replicas}
        digests = {r: self._identities[r].digest() for r in replicas}
        records = {r: len(pairs[r]) // PAIR.size for r in replicas}
        agreement = agree_by_digest(replicas, digests, records) or merge_pairs(replicas, pairs)
        if agreement.first_offset is not None:
            first = agreement.first_offset
            agreement.first_records = {r: record_at(plan.log_task(r), first) for r in replicas}
        return agreement

    def compare_buckets(
        self,
        plan: AuditPlan,
        buckets: list[int],
        emit: Callable[[DivergenceRow], None],
        progress: Progress,
    ) -> dict[int, int]:
        distinct: dict[int, int] = {}
        progress.start("compare", len(buckets), "buckets")
        keys = 0
        for done, bucket in enumerate(sorted(buckets), 1):
            paths = [e.state_path(bucket) for e in plan.exports]
            distinct[bucket] = merge_bucket(bucket, paths, emit)
            keys += distinct[bucket]
            progress.tick(done, keys)
        progress.finish(len(buckets), keys)
        return distinct

    def close(self) -> None:
        shutil.rmtree(self._spill_root, ignore_errors=True)
