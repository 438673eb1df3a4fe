"""The Spark engine: the same audit with the files read and joined in executors.

- Phase one: one task per file ((replica, bucket) files and logs) running the
  shared scan on an executor; only the small summaries come back.
- Buckets that differ: their files are decoded with node's reader in
  flatMap tasks into a DataFrame, grouped by key across the replicas, and
  only the keys whose replicas disagree come back to the driver, in key
  order, where the shared code classifies them and writes the Parquet file.
- Logs: decoded the same way into a cached DataFrame; the replay is the last
  record per (replica, key) (max_by offset), summed into per-bucket
  fingerprints, and joined with the state where those differ; the logs are
  compared by grouping records by offset.

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
    replay_class,
)
from spark_tools.export_reading import (
    FINGERPRINT_BITS,
    PUT,
    LogItem,
    add_fingerprints,
    bucket_of,
    fingerprint,
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
from spark_tools.progress import INTERVAL_SECONDS, Progress
from spark_tools.spark_session import get_session

_MAX_SLICES = 10_000
_CHUNK_BITS = 32
_CHUNK_MASK = (1 << _CHUNK_BITS) - 1
FINGERPRINT_CHUNKS = FINGERPRINT_BITS // _CHUNK_BITS

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
LOG_SCHEMA = StructType(
    [
        StructField("replica", IntegerType(), False),
        StructField("bucket", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("raft_index", LongType(), False),
        StructField("op", IntegerType(), False),
        StructField("key", BinaryType(), False),
        StructField("sort_key", BinaryType(), True),
        StructField("value_sha", StringType(), False),
        *(StructField(f"fp{i}", LongType(), False) for i in range(FINGERPRINT_CHUNKS)),
    ]
)
_SLICES_PER_CORE = 4

StateRow = tuple[int, int, bytes, bytes | None, int, str]
LogRow = tuple[Any, ...]


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


def log_rows(task: LogScanTask, splits: list[bytes]) -> Iterator[LogRow]:
    """A log export's records as DataFrame rows (runs in an executor), each with
    its fingerprint as the key's state (were it the last record) in 32-bit chunks,
    so that per-bucket sums are plain SQL sums."""
    for item in read_log(Path(task.path), task.applied_offset):
        yield (
            task.replica,
            bucket_of(item.sort_key, splits),
            item.offset,
            item.raft_index,
            item.op,
            item.key,
            _order(item.key, item.sort_key),
            item.value_sha,
            *fingerprint_chunks(fingerprint(item.key, item.offset, item.value_sha)),
        )


def fingerprint_chunks(value: int) -> list[int]:
    return [(value >> (_CHUNK_BITS * i)) & _CHUNK_MASK for i in range(FINGERPRINT_CHUNKS)]


def join_fingerprint_chunks(sums: list[int]) -> int:
    """Sum of fingerprints mod 2**128 from the sums of their chunks."""
    total = 0
    for i, chunk_sum in enumerate(sums):
        total = add_fingerprints(total, chunk_sum << (_CHUNK_BITS * i))
    return total


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

    def __init__(self, sc: SparkContext, progress: Progress) -> None:
        self._sc = sc
        self._progress = progress
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
            self._progress.tick(done)

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
        self._logs: DataFrame | None = None
        self._latest: DataFrame | None = None

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
        with _StageProgress(self._sc, progress):
            results = (
                self._sc.parallelize(tasks, self._slices(len(tasks))).map(run_scan_task).collect()
            )
        states = [r for r in results if isinstance(r, StateScan)]
        logs = [r for r in results if isinstance(r, LogScan)]
        progress.finish(len(tasks), sum(s.keys for s in states))
        return states, logs

    def _log_frame(self, plan: AuditPlan) -> DataFrame:
        if self._logs is None:
            tasks = [plan.log_task(r) for r in plan.log_replicas]
            splits = plan.split_sort_keys
            rows = self._sc.parallelize(tasks, self._slices(len(tasks))).flatMap(
                lambda task: log_rows(task, splits)
            )
            self._logs = self._spark.createDataFrame(rows, LOG_SCHEMA, verifySchema=False).persist()
        return self._logs

    def _latest_frame(self, plan: AuditPlan) -> DataFrame:
        """Each (replica, key)'s last record, when it is a put: the replayed state."""
        if self._latest is None:
            columns = ["offset", "op", "value_sha", "bucket", "sort_key"]
            columns += [f"fp{i}" for i in range(FINGERPRINT_CHUNKS)]
            last = F.max_by(F.struct(*columns), "offset")
            self._latest = (
                self._log_frame(plan)
                .groupBy("replica", "key")
                .agg(last.alias("last"))
                .select("replica", "key", "last.*")
                .filter(F.col("op") == PUT)
                .persist()
            )
        return self._latest

    def replay_fingerprints(self, plan: AuditPlan) -> dict[Pair, tuple[int, int]]:
        if not plan.log_replicas:
            return {}
        sums = (
            self._latest_frame(plan)
            .groupBy("replica", "bucket")
            .agg(
                F.count("*").alias("keys"),
                *(F.sum(f"fp{i}").alias(f"fp{i}") for i in range(FINGERPRINT_CHUNKS)),
            )
            .collect()
        )
        return {
            (int(row["replica"]), int(row["bucket"])): (
                int(row["keys"]),
                join_fingerprint_chunks([int(row[f"fp{i}"]) for i in range(FINGERPRINT_CHUNKS)]),
            )
            for row in sums
        }

    def replay_rows(
        self, plan: AuditPlan, pairs: list[Pair], emit: Callable[[ReplayRow], None]
    ) -> None:
        if not pairs:
            return
        tasks = [plan.state_task(r, b) for r, b in sorted(pairs)]
        state = self._spark.createDataFrame(
            self._sc.parallelize(tasks, self._slices(len(tasks))).flatMap(state_rows),
            STATE_SCHEMA,
            verifySchema=False,
        )
        chosen = self._spark.createDataFrame(
            [(r, b) for r, b in pairs],
            StructType(
                [
                    StructField("replica", IntegerType(), False),
                    StructField("bucket", IntegerType(), False),
                ]
            ),
        )
        replayed = self._latest_frame(plan).join(F.broadcast(chosen), ["replica", "bucket"])
        s, log = state.alias("s"), replayed.alias("l")
        joined = s.join(log, ["replica", "bucket", "key"], "full_outer").select(
            "replica",
            "bucket",
            "key",
            F.coalesce(F.col("s.sort_key"), F.col("l.sort_key"), F.col("key")).alias("order"),
            F.col("s.version").alias("state_version"),
            F.col("s.value_sha").alias("state_sha"),
            F.col("l.offset").alias("log_version"),
            F.col("l.value_sha").alias("log_sha"),
        )
        differing = joined.filter(
            ~(
                F.col("state_version").eqNullSafe(F.col("log_version"))
                & F.col("state_sha").eqNullSafe(F.col("log_sha"))
            )
        )
        for row in _in_order(differing, "replica", "bucket", "order"):
            state_obs: Observation = (
                None if row["state_version"] is None else (row["state_version"], row["state_sha"])
            )
            log_obs: Observation = (
                None if row["log_version"] is None else (row["log_version"], row["log_sha"])
            )
            klass = replay_class(state_obs, log_obs)
            assert klass is not None
            emit(
                ReplayRow(
                    row["replica"],
                    row["bucket"],
                    bytes(row["order"]),
                    bytes(row["key"]),
                    klass,
                    state_obs,
                    log_obs,
                )
            )

    def log_agreement(self, plan: AuditPlan, replicas: list[int]) -> LogAgreement:
        agreement = LogAgreement(replicas=replicas)
        logs = self._log_frame(plan).filter(F.col("replica").isin(replicas))
        per_offset = (
            logs.groupBy("offset")
            .agg(
                F.count("*").alias("n"),
                _differs("raft_index", "op", "key", "value_sha").alias("d"),
            )
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
            found = {
                int(row["replica"]): LogItem(
                    first,
                    row["raft_index"],
                    row["op"],
                    bytes(row["key"]),
                    bytes(row["sort_key"] if row["sort_key"] is not None else row["key"]),
                    row["value_sha"],
                )
                for row in logs.filter(F.col("offset") == first).collect()
            }
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
            with _StageProgress(self._sc, progress):
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
        for frame in (self._latest, self._logs):
            if frame is not None:
                frame.unpersist()
        self._latest = self._logs = None
        if self._owns_session:
            self._spark.stop()
