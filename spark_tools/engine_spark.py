"""The Spark engine: the same audit with the files read and joined in executors.

- Phase one: one task per file ((replica, bucket) files and logs) running the
  shared scan on an executor; only the small summaries come back.
- Buckets that differ: their files are decoded with node's reader in
  flatMap tasks into a DataFrame, grouped by key across the replicas, and
  only the keys whose replicas disagree come back to the driver, in key
  order, where the shared code classifies them and writes the Parquet file.
- Logs: the replay runs in executor tasks, one per (replica, group of
  buckets), each reading its log once and replaying it bucket by bucket
  (spark_tools/log_replay.py, as the Python engine does): only per-bucket
  fingerprints come back, and, for buckets where those differ from the state,
  the mismatching keys. The logs are compared by grouping (replica, offset,
  record identity) rows by offset.

Exports must be readable at the same path from the driver and every executor.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from spark_tools.audit_plan import AuditPlan, Pair
from spark_tools.divergence import (
    DivergenceRow,
    Observation,
    ReplayRow,
    divergence_rows,
)
from spark_tools.export_reading import (
    LogItem,
    read_log,
    read_state,
)
from spark_tools.export_scan import (
    LogScan,
    LogScanTask,
    ScanTask,
    StateScan,
    StateScanTask,
    run_scan_task,
)
from spark_tools.findings import LogAgreement
from spark_tools.log_replay import (
    ReplayTask,
    record_identity,
    replay_fingerprint_task,
    replay_rows_task,
)
from spark_tools.progress import INTERVAL_SECONDS, Progress
from spark_tools.spark_session import get_session

_MAX_SLICES = 10_000

STATE_SCHEMA = StructType(
    [
        StructField("replica", IntegerType(), False),
        StructField("bucket", IntegerType(), False),
        StructField("key", BinaryType(), False),
        StructField("sort_key", BinaryType(), True),
        StructField("version", LongType(), False),
        StructField("value_sha", StringType(), False),
    ]
)
IDENTITY_SCHEMA = StructType(
    [
        StructField("replica", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("identity", LongType(), False),
    ]
)
_SLICES_PER_CORE = 4

StateRow = tuple[int, int, bytes, bytes | None, int, str]


def _order(key: bytes, sort_key: bytes) -> bytes | None:
    """The sort key when it differs from the key (long keys only), else None:
    rows carry it only where needed, and columns use coalesce(sort_key, key)."""
    return None if sort_key == key else sort_key


def state_rows(task: StateScanTask) -> Iterator[StateRow]:
    """A bucket file's keys as DataFrame rows (runs in an executor)."""
    for item in read_state(Path(task.path)):
        yield (
            task.replica,
            task.bucket,
            item.key,
            _order(item.key, item.sort_key),
            item.version,
            item.value_sha,
        )


def identity_rows(task: LogScanTask) -> Iterator[tuple[int, int, int]]:
    """A log export's records as (replica, offset, identity) rows (in an executor)."""
    for item in read_log(Path(task.path), task.applied_offset):
        yield task.replica, item.offset, record_identity(item)


def record_at(task: LogScanTask, offset: int) -> LogItem | None:
    """The log's record at ``offset``, if it holds one (in an executor)."""
    for item in read_log(Path(task.path), task.applied_offset):
        if item.offset >= offset:
            return item if item.offset == offset else None
    return None


def _in_order(frame: DataFrame, *columns: str) -> Iterator[Any]:
    """The rows (findings: few, normally) to the driver in order, one partition
    sorted (spilling if it must) rather than a range sort's job per partition."""
    return frame.repartition(1).sortWithinPartitions(*columns).toLocalIterator()


def _differs(*columns: str) -> Any:
    """An aggregate: whether the group's rows differ in any of ``columns`` (none is
    null). min/max per column, cheaper than a multi-column count_distinct."""
    checks = [F.min(c) != F.max(c) for c in columns]
    result = checks[0]
    for check in checks[1:]:
        result = result | check
    return result


def _order_column(prefix: str = "") -> Any:
    return F.coalesce(F.col(f"{prefix}sort_key"), F.col(f"{prefix}key"))


class _StageProgress:
    """Reports the running stages' finished tasks every couple of seconds."""

    def __init__(self, sc: SparkContext, progress: Progress, total: int) -> None:
        self._sc = sc
        self._progress = progress
        self._total = total
        self._reading: int | None = None
        self._later: set[int] = set()
        self._done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="audit-progress", daemon=True)

    def _run(self) -> None:
        tracker = self._sc.statusTracker()
        while not self._stop.wait(INTERVAL_SECONDS):
            # The first active stage reads the files; the stages after it
            # (shuffles) have other task counts: count the first one's tasks only,
            # and never go back once it is done.
            active = sorted(tracker.getActiveStageIds())
            info = tracker.getStageInfo(active[0]) if active else None
            if info is not None and info.stageId not in self._later:
                if self._reading is None:
                    self._reading = info.stageId
                if info.stageId == self._reading:
                    self._done = max(self._done, info.numCompletedTasks)
                else:
                    self._later.add(info.stageId)
                    self._done = self._total
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
        tasks: list[ScanTask] = [*plan.state_tasks(), *map(plan.log_task, plan.log_replicas)]
        progress.start("scan", len(tasks), "files")
        with _StageProgress(self._sc, progress, len(tasks)):
            results = (
                self._sc.parallelize(tasks, self._slices(len(tasks))).map(run_scan_task).collect()
            )
        states = [r for r in results if isinstance(r, StateScan)]
        logs = [r for r in results if isinstance(r, LogScan)]
        progress.finish(len(tasks), sum(s.keys for s in states))
        return states, logs

    def _replay_tasks(
        self, plan: AuditPlan, pairs: list[Pair], with_state: bool
    ) -> list[ReplayTask]:
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
                state_paths = (
                    tuple(str(plan.exports[replica].state_path(b)) for b in chosen)
                    if with_state
                    else None
                )
                tasks.append(
                    ReplayTask(
                        replica, log.path, manifest.applied_offset, splits, chosen, state_paths
                    )
                )
        return tasks

    def replay_fingerprints(self, plan: AuditPlan) -> dict[Pair, tuple[int, int]]:
        pairs = [(r, b) for r in plan.log_replicas for b in range(plan.buckets)]
        if not pairs:
            return {}
        tasks = self._replay_tasks(plan, pairs, with_state=False)
        found = self._sc.parallelize(tasks, len(tasks)).flatMap(replay_fingerprint_task).collect()
        return {(replica, bucket): (keys, fp) for replica, bucket, keys, fp in found}

    def replay_rows(
        self, plan: AuditPlan, pairs: list[Pair], emit: Callable[[ReplayRow], None]
    ) -> None:
        if not pairs:
            return
        tasks = self._replay_tasks(plan, pairs, with_state=True)
        rows = self._sc.parallelize(tasks, len(tasks)).flatMap(replay_rows_task).collect()
        rows.sort(key=lambda row: (row.replica, row.bucket, row.sort_key))
        for row in rows:
            emit(row)

    def log_agreement(self, plan: AuditPlan, replicas: list[int]) -> LogAgreement:
        agreement = LogAgreement(replicas=replicas)
        tasks = [plan.log_task(r) for r in replicas]
        rows = self._sc.parallelize(tasks, len(tasks)).flatMap(identity_rows)
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
        if not buckets:
            return {}
        n = len(plan.exports)
        tasks = plan.state_tasks(sorted(buckets))
        progress.start("compare", len(tasks), "files")
        state = self._spark.createDataFrame(
            self._sc.parallelize(tasks, self._slices(len(tasks))).flatMap(state_rows),
            STATE_SCHEMA,
            verifySchema=False,
        )
        grouped = (
            state.groupBy("bucket", "key")
            .agg(
                F.min(_order_column()).alias("sort_key"),
                F.collect_list(F.struct("replica", "version", "value_sha")).alias("obs"),
                F.count("*").alias("n"),
                _differs("version", "value_sha").alias("d"),
            )
            .persist()
        )
        try:
            with _StageProgress(self._sc, progress, len(tasks)):
                distinct = {
                    int(row["bucket"]): int(row["count"])
                    for row in grouped.groupBy("bucket").count().collect()
                }
            progress.finish(len(tasks), sum(distinct.values()))
            divergent = grouped.filter((F.col("n") < n) | F.col("d")).select(
                "bucket", "sort_key", "key", "obs"
            )
            for row in _in_order(divergent, "bucket", "sort_key"):
                observations: list[Observation] = [None] * n
                for o in row["obs"]:
                    observations[o["replica"]] = (o["version"], o["value_sha"])
                for found in divergence_rows(
                    row["bucket"], bytes(row["key"]), bytes(row["sort_key"]), observations
                ):
                    emit(found)
        finally:
            grouped.unpersist()
        return distinct

    def close(self) -> None:
        if self._owns_session:
            self._spark.stop()
