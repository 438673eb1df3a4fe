"""The Spark engine: the same audit with the files read and compared in executors.

- Phase one: one task per file ((replica, bucket) files and logs) running the
  shared scan on an executor; only the small summaries come back.
- Buckets that differ: one task per bucket merges its files side by side
  (spark_tools/bucket_compare.py, the Python engine's code) and returns only
  the divergent keys, classified; the driver takes them a wave of buckets at a
  time, in bucket order, and writes the Parquet file.
- Logs: a log's phase-one task also replays it, in the same read: its
  records are spilled per bucket on the executor's local disk and replayed
  bucket by bucket (spark_tools/log_replay.py, as the Python engine does), and
  only per-bucket fingerprints come back. For buckets where those differ from
  the state, tasks per (replica, group of buckets) read the log again and
  return the mismatching keys. The same read packs the log's (offset, record
  identity) pairs (spark_tools/log_identity.py), kept on the executors: logs
  whose digests agree are done; otherwise the pairs are grouped by offset in
  a DataFrame.

Exports must be readable at the same path from the driver and every executor.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from pyspark import RDD, SparkContext, StorageLevel
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StructField,
    StructType,
)

from spark_tools.audit_plan import AuditPlan, Pair
from spark_tools.bucket_compare import compare_bucket_task
from spark_tools.divergence import (
    DivergenceRow,
    ReplayRow,
)
from spark_tools.export_scan import (
    LogScan,
    LogScanTask,
    ScanResult,
    ScanTask,
    StateScan,
    run_scan_task,
)
from spark_tools.findings import LogAgreement
from spark_tools.log_identity import agree_by_digest, record_at, unpack
from spark_tools.log_replay import LogPass, ReplayTask, log_pass, replay_rows_task
from spark_tools.progress import INTERVAL_SECONDS, Progress
from spark_tools.spark_session import get_session

_MAX_SLICES = 10_000

IDENTITY_SCHEMA = StructType(
    [
        StructField("replica", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("identity", LongType(), False),
    ]
)
_SLICES_PER_CORE = 4


def _differs(*columns: str) -> Any:
    """An aggregate: whether the group's rows differ in any of ``columns`` (none is
    null). min/max per column, cheaper than a multi-column count_distinct."""
    checks = [F.min(c) != F.max(c) for c in columns]
    result = checks[0]
    for check in checks[1:]:
        result = result | check
    return result


class _StageProgress:
    """Reports the finished tasks of a one-stage job every couple of seconds."""

    def __init__(self, sc: SparkContext, progress: Progress, total: int) -> None:
        self._sc = sc
        self._progress = progress
        self._total = total
        self._done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="audit-progress", daemon=True)

    def _run(self) -> None:
        tracker = self._sc.statusTracker()
        while not self._stop.wait(INTERVAL_SECONDS):
            done = 0
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
            self._done = max(self._done, done)
            self._progress.tick(min(self._done, self._total))

    def __enter__(self) -> _StageProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class SparkEngine:
    def __init__(self, spark: SparkSession, owns_session: bool, session_seconds: float) -> None:
        self._spark = spark
        self._sc = spark.sparkContext
        self._owns_session = owns_session
        self.session_seconds = session_seconds
        self._fingerprints: dict[Pair, tuple[int, int]] = {}
        self._log_digests: dict[int, str] = {}
        self._log_records: dict[int, int] = {}
        self._scanned: RDD[Any] | None = None

    @classmethod
    def start(cls, master: str | None, conf: dict[str, str] | None = None) -> SparkEngine:
        began = time.monotonic()
        spark, owns = get_session(master, conf)
        return cls(spark, owns, time.monotonic() - began)

    def describe(self) -> dict[str, Any]:
        return {
            "name": "spark",
            "master": self._sc.master,
            "spark_version": self._spark.version,
            "default_parallelism": self._sc.defaultParallelism,
        }

    def _slices(self, n: int) -> int:
        """Tasks for ``n`` files: a few per core keeps them balanced without paying
        a task's overhead per small file."""
        return max(1, min(n, self._sc.defaultParallelism * _SLICES_PER_CORE, _MAX_SLICES))

    def scan(self, plan: AuditPlan, progress: Progress) -> tuple[list[StateScan], list[LogScan]]:
        """Every bucket file and log once. A log's task also replays it and packs
        its identity pairs; those stay on the executors (a persisted RDD) for the
        log check, and only the summaries, fingerprints and digests come back."""
        state_tasks: list[ScanTask] = list(plan.state_tasks())
        log_tasks: list[ScanTask] = [plan.log_task(r) for r in plan.log_replicas]
        splits, buckets = plan.split_sort_keys, plan.buckets

        def run(task: ScanTask) -> ScanResult | LogPass:
            if isinstance(task, LogScanTask):
                return log_pass(task, splits, buckets)
            return run_scan_task(task)

        def summary(result: ScanResult | LogPass) -> ScanResult | LogPass:
            return result._replace(pairs=b"") if isinstance(result, LogPass) else result

        # A log (read, spilled and replayed) is the longest task: each gets a
        # partition of its own, scheduled first; the bucket files fill the rest.
        parts = [self._sc.parallelize(state_tasks, self._slices(len(state_tasks)))]
        if log_tasks:
            parts.insert(0, self._sc.parallelize(log_tasks, len(log_tasks)))
        scan = self._sc.union(parts) if len(parts) > 1 else parts[0]
        partitions = scan.getNumPartitions()
        progress.start("scan", partitions, "tasks")
        self._scanned = scan.map(run).persist(StorageLevel.MEMORY_AND_DISK)
        with _StageProgress(self._sc, progress, partitions):
            results = self._scanned.map(summary).collect()
        states = [r for r in results if isinstance(r, StateScan)]
        passes = [r for r in results if isinstance(r, LogPass)]
        self._fingerprints = {
            (replica, bucket): (keys, fp)
            for found in passes
            for replica, bucket, keys, fp in found.fingerprints
        }
        self._log_digests = {p.scan.replica: p.digest for p in passes}
        self._log_records = {p.scan.replica: p.scan.records for p in passes}
        progress.finish(partitions, sum(s.keys for s in states))
        return states, [p.scan for p in passes]

    def _replay_tasks(self, plan: AuditPlan, pairs: list[Pair]) -> list[ReplayTask]:
        """Tasks replaying ``pairs``: per replica, its buckets in as many groups as
        it takes to give every core a task (each group reads the whole log, so no
        more than that)."""
        by_replica: dict[int, list[int]] = {}
        for replica, bucket in sorted(pairs):
            by_replica.setdefault(replica, []).append(bucket)
        groups = max(1, -(-self._sc.defaultParallelism // max(1, len(by_replica))))
        splits = plan.split_sort_keys
        tasks = []
        for replica, buckets in by_replica.items():
            manifest = plan.manifest(replica)
            log = plan.log_task(replica)
            size = -(-len(buckets) // min(groups, len(buckets)))
            for i in range(0, len(buckets), size):
                chosen = tuple(buckets[i : i + size])
                state_paths = tuple(str(plan.exports[replica].state_path(b)) for b in chosen)
                tasks.append(
                    ReplayTask(
                        replica, log.path, manifest.applied_offset, splits, chosen, state_paths
                    )
                )
        return tasks

    def replay_fingerprints(self, plan: AuditPlan) -> dict[Pair, tuple[int, int]]:
        return self._fingerprints

    def replay_rows(
        self, plan: AuditPlan, pairs: list[Pair], emit: Callable[[ReplayRow], None]
    ) -> None:
        if not pairs:
            return
        tasks = self._replay_tasks(plan, pairs)
        rows = self._sc.parallelize(tasks, len(tasks)).flatMap(replay_rows_task).collect()
        rows.sort(key=lambda row: (row.replica, row.bucket, row.sort_key))
        for row in rows:
            emit(row)

    def log_agreement(self, plan: AuditPlan, replicas: list[int]) -> LogAgreement:
        agreement = agree_by_digest(replicas, self._log_digests, self._log_records)
        if agreement is not None:
            return agreement
        agreement = LogAgreement(replicas=replicas)
        assert self._scanned is not None
        chosen = set(replicas)
        rows = self._scanned.flatMap(
            lambda r: (
                ((r.scan.replica, o, i) for o, i in unpack(r.pairs))
                if isinstance(r, LogPass) and r.scan.replica in chosen
                else ()
            )
        )
        logs = self._spark.createDataFrame(rows, IDENTITY_SCHEMA, verifySchema=False)
        per_offset = (
            logs.groupBy("offset")
            .agg(F.count("*").alias("n"), _differs("identity").alias("d"))
            .filter(F.col("n") >= 2)
        )
        summary = per_offset.agg(
            F.count("*").alias("compared"),
            F.count_if(F.col("d")).alias("divergent"),
            F.min(F.when(F.col("d"), F.col("offset"))).alias("first"),
        ).collect()[0]
        agreement.offsets_compared = int(summary["compared"])
        agreement.divergent_offsets = int(summary["divergent"] or 0)
        if summary["first"] is not None:
            first = int(summary["first"])
            agreement.first_offset = first
            tasks = [plan.log_task(r) for r in replicas]
            found = dict(
                self._sc.parallelize(tasks, len(tasks))
                .map(lambda task: (task.replica, record_at(task, first)))
                .collect()
            )
            agreement.first_records = {r: found.get(r) for r in replicas}
        return agreement

    def compare_buckets(
        self,
        plan: AuditPlan,
        buckets: list[int],
        emit: Callable[[DivergenceRow], None],
        progress: Progress,
    ) -> dict[int, int]:
        """One task per differing bucket merging its files side by side; waves of
        a few buckets per core, so that the driver holds one wave's divergent
        rows at a time and emits them in bucket order."""
        distinct: dict[int, int] = {}
        ordered = sorted(buckets)
        wave = max(1, self._sc.defaultParallelism * 2)
        progress.start("compare", len(ordered), "buckets")
        keys = 0
        for start in range(0, len(ordered), wave):
            tasks = [
                (b, [str(e.state_path(b)) for e in plan.exports])
                for b in ordered[start : start + wave]
            ]
            results = self._sc.parallelize(tasks, len(tasks)).map(compare_bucket_task).collect()
            for result in sorted(results, key=lambda r: r.bucket):
                distinct[result.bucket] = result.keys
                keys += result.keys
                for row in result.rows:
                    emit(row)
            progress.tick(start + len(tasks), keys)
        progress.finish(len(ordered), keys)
        return distinct

    def close(self) -> None:
        if self._scanned is not None:
            self._scanned.unpersist()
            self._scanned = None
        if self._owns_session:
            self._spark.stop()
