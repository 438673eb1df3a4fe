"""run_audit: read N replicas' exports at one cut, compare them, write the report.

The flow is the same for both engines; an engine only does the data-heavy
steps (spark_tools/audit_plan.py, ``AuditEngine``):

1. the exports are found and their manifests checked: fewer than two
   replicas, an incomplete export, or manifests that disagree on the audit,
   the raft index or the split points make the audit INCONCLUSIVE (exit 3);
2. phase one reads every bucket file once (count, digest checked against the
   manifest, an order-free fingerprint) and every log (checked, counted); a
   damaged file is INCONCLUSIVE too;
3. phase two compares key by key only the buckets whose digests differ;
4. each replica's state is checked against the replay of its own log (per
   bucket by fingerprint, key by key where they differ), and the logs against
   each other offset by offset;
5. report.json, divergences.parquet and report.html are written to ``out``.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from spark_tools.audit_args import DEFAULT_SAMPLES, ENGINES
from spark_tools.audit_errors import (
    EXIT_CONSISTENT,
    EXIT_DIVERGENT,
    EXIT_FAILURE,
    EXIT_INCONSISTENT_CUT,
    EXIT_USAGE,
    AuditFailure,
    UsageError,
)
from spark_tools.audit_plan import AuditEngine, AuditPlan, Pair
from spark_tools.audit_report import (
    DIVERGENCES_PARQUET,
    FAIL,
    REPORT_HTML,
    REPORT_JSON,
    CompletedAudit,
    completed_report,
    encode_report,
    inconclusive_report,
)
from spark_tools.export_layout import ReplicaExport, load_export, replica_directories
from spark_tools.findings import DivergenceCollector, ReplayCollector
from spark_tools.progress import Progress
from spark_tools.report_html import render_html

logger = logging.getLogger(__name__)

OUTPUT_FILES = (REPORT_JSON, REPORT_HTML, DIVERGENCES_PARQUET)


def cut_problems(
    exports: Sequence[ReplicaExport], expected_replicas: int | None = None
) -> list[str]:
    """Why these exports do not form one consistent, complete cut ([] if they do)."""
    problems = [f"replica {e.replica} ({e.directory}): {e.problem}" for e in exports if e.problem]
    manifests = [(e.replica, e.manifest) for e in exports if e.manifest is not None]
    if len(exports) < 2:
        problems.append(f"an audit needs at least 2 replicas, {len(exports)} given")
    if expected_replicas is not None and len(exports) != expected_replicas:
        problems.append(f"{expected_replicas} replicas expected, {len(exports)} exports found")
    if len({m.audit_id for _, m in manifests}) > 1:
        problems.append(
            "the exports come from different audits: "
            + ", ".join(f"{r}: {m.audit_id}" for r, m in manifests)
        )
    if len({m.raft_index for _, m in manifests}) > 1:
        problems.append(
            "inconsistent cut: the replicas are at different raft indexes ("
            + ", ".join(f"{r}: {m.raft_index}" for r, m in manifests)
            + ")"
        )
    if len({m.split_points for _, m in manifests}) > 1:
        problems.append(
            "inconsistent cut: the replicas' split points differ ("
            + ", ".join(f"{r}: {m.buckets} buckets" for r, m in manifests)
            + ")"
        )
    return problems


def _check_arguments(engine: str, samples: int, max_divergence_rate: float) -> None:
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r} (choose {' or '.join(ENGINES)})")
    if samples < 0:
        raise UsageError("--samples must not be negative")
    if not (0.0 <= max_divergence_rate <= 1.0) or math.isnan(max_divergence_rate):
        raise UsageError("--max-divergence-rate must be between 0 and 1")


def _load(exports: list[Path] | Path) -> list[ReplicaExport]:
    paths = [exports] if isinstance(exports, Path) else list(exports)
    loaded = sorted((load_export(d) for d in replica_directories(paths)), key=lambda e: e.replica)
    ids = [e.replica for e in loaded]
    duplicates = sorted({r for r in ids if ids.count(r) > 1})
    if duplicates:
        raise UsageError(f"replica {', '.join(duplicates)} is given more than once")
    return loaded


def _write(
    out: Path, report: dict[str, Any], engine: dict[str, Any], timings: dict[str, float]
) -> None:
    report = {**report, "engine": engine, "timings": {k: round(v, 3) for k, v in timings.items()}}
    (out / REPORT_JSON).write_bytes(encode_report(report))
    (out / REPORT_HTML).write_text(render_html(report), encoding="utf-8")


def _start_engine(
    engine: str, master: str | None, spark_conf: dict[str, str] | None
) -> AuditEngine:
    if engine == "python":
        from spark_tools.engine_python import PythonEngine  # noqa: PLC0415

        return PythonEngine()
    try:
        from spark_tools.engine_spark import SparkEngine  # noqa: PLC0415
        from spark_tools.spark_session import java_problem  # noqa: PLC0415
    except ImportError as exc:
        raise AuditFailure(
            f"the Spark engine needs pyspark ({exc}); install rkv[spark] or use --engine python"
        ) from None
    problem = java_problem()
    if problem is not None:
        raise AuditFailure(f"the Spark engine cannot start: {problem}; or use --engine python")
    return SparkEngine.start(master, spark_conf)


class _Audit:
    """One audit of a consistent cut with a started engine."""

    def __init__(
        self,
        plan: AuditPlan,
        *,
        engine: AuditEngine,
        out: Path,
        samples: int,
        max_rate: float,
        progress: Progress,
    ) -> None:
        self.plan = plan
        self.engine = engine
        self.out = out
        self.samples = samples
        self.max_rate = max_rate
        self.progress = progress
        self.timings: dict[str, float] = {}

    def _timed(self, name: str, began: float) -> float:
        now = time.monotonic()
        self.timings[f"{name}_seconds"] = now - began
        return now

    def run(self) -> dict[str, Any]:
        plan, engine = self.plan, self.engine
        names = plan.replicas
        began = time.monotonic()
        states, logs = engine.scan(plan, self.progress)
        began = self._timed("scan", began)
        errors = sorted(
            [(s.replica, s.bucket, s.error) for s in states if s.error is not None]
            + [(log.replica, plan.buckets, log.error) for log in logs if log.error is not None]
        )
        damage = [f"replica {names[replica]}: {error}" for replica, _, error in errors]
        if damage:
            return inconclusive_report(
                plan.exports, ["damaged export: " + d for d in damage], self.max_rate, states
            )
        scans = {(s.replica, s.bucket): s for s in states}
        differing = [
            b
            for b in range(plan.buckets)
            if len({scans[r, b].digest for r in range(len(names))}) > 1
        ]
        self.progress.line(
            f"digests: {len(differing)} of {plan.buckets} buckets differ between replicas"
        )
        try:
            from spark_tools.divergence_parquet import DivergenceParquetWriter  # noqa: PLC0415
        except ImportError as exc:
            raise AuditFailure(
                f"writing Parquet needs pyarrow ({exc}): install rkv[spark]"
            ) from None
        collector: DivergenceCollector
        with DivergenceParquetWriter(self.out / DIVERGENCES_PARQUET, names) as writer:
            collector = DivergenceCollector(names, self.samples, writer.add)
            distinct_differing = engine.compare_buckets(
                plan, differing, collector.add, self.progress
            )
        distinct = sum(
            distinct_differing.get(b, 0) if b in differing else scans[0, b].keys
            for b in range(plan.buckets)
        )
        began = self._timed("compare", began)
        replay, reasons = self._replay(states, logs)
        began = self._timed("replay", began)
        agreement, skip_reason = None, None
        if len(plan.log_replicas) >= 2:
            agreement = engine.log_agreement(plan, plan.log_replicas)
            self.progress.line(
                f"log check: {agreement.offsets_compared:,} offsets compared, "
                f"{agreement.divergent_offsets:,} diverge"
            )
            if agreement.divergent_offsets:
                reasons.append(
                    f"the replicas' logs diverge at {agreement.divergent_offsets} offsets, "
                    f"first at offset {agreement.first_offset}"
                )
        else:
            skip_reason = (
                "skipped on request"
                if not plan.check_logs
                else "fewer than 2 replicas exported a log"
            )
        self._timed("log", began)
        offsets = {plan.manifest(r).applied_offset for r in range(len(names))}
        if len(offsets) > 1:
            reasons.insert(
                0,
                f"the replicas applied different offsets at raft index {plan.raft_index}: "
                + ", ".join(f"{n}: {plan.manifest(i).applied_offset}" for i, n in enumerate(names)),
            )
        found = collector.findings
        return completed_report(
            CompletedAudit(
                exports=plan.exports,
                max_rate=self.max_rate,
                states=states,
                logs=logs,
                differing_buckets=differing,
                distinct_keys=distinct,
                state_summary=collector.summary(),
                divergent_keys=found.divergent_keys,
                divergences=found.divergences,
                replay=replay,
                agreement=agreement,
                log_skip_reason=skip_reason,
                reasons=reasons,
            )
        )

    def _replay(
        self, states: Sequence[Any], logs: Sequence[Any]
    ) -> tuple[dict[str, dict[str, Any]], list[str]]:
        plan, names = self.plan, self.plan.replicas
        checked = plan.log_replicas
        fingerprints = self.engine.replay_fingerprints(plan) if checked else {}
        pairs: list[Pair] = [
            (s.replica, s.bucket)
            for s in states
            if s.replica in checked
            and (s.keys, s.fingerprint) != fingerprints.get((s.replica, s.bucket), (0, 0))
        ]
        collector = ReplayCollector(names, self.samples)
        self.engine.replay_rows(plan, sorted(pairs), collector.add)
        records = {log.replica: log.records for log in logs}
        replay: dict[str, dict[str, Any]] = {}
        reasons: list[str] = []
        for i, name in enumerate(names):
            state_keys = sum(s.keys for s in states if s.replica == i)
            if i not in checked:
                replay[name] = {
                    "status": "skipped",
                    "log_records": None,
                    "state_keys": state_keys,
                    "replayed_keys": None,
                    "mismatched_keys": 0,
                    "by_class": None,
                    "samples": [],
                }
                continue
            summary = collector.summary(i)
            mismatched = summary["mismatched_keys"]
            replay[name] = {
                "status": "mismatch" if mismatched else "match",
                "log_records": records[i],
                "state_keys": state_keys,
                "replayed_keys": sum(
                    count for (r, _), (count, _) in fingerprints.items() if r == i
                ),
                **summary,
            }
            if mismatched:
                reasons.append(
                    f"replica {name}'s state is not the replay of its log ({mismatched} keys)"
                )
        self.progress.line(
            f"replay: {len(checked)} logs replayed, {len(pairs)} buckets differ from their state"
        )
        return replay, reasons


def run_audit(
    exports: list[Path] | Path,
    out: Path,
    engine: str = "spark",
    master: str | None = None,
    *,
    samples: int = DEFAULT_SAMPLES,
    max_divergence_rate: float = 0.0,
    check_logs: bool = True,
    expected_replicas: int | None = None,
    progress: TextIO | None = sys.stderr,
    spark_conf: dict[str, str] | None = None,
) -> int:
    """Audit the exports and write report.json, report.html and divergences.parquet
    into ``out``. Returns the exit status: 0 consistent, 1 divergent beyond the
    threshold, 2 usage error, 3 inconsistent or incomplete cut (INCONCLUSIVE),
    4 the audit failed.

    ``exports``: an audit directory (one subdirectory per replica) or replicas'
    export directories. ``master``: the Spark master (None: spark-submit's or
    spark-defaults', else local[*]); an active SparkSession is used as it is.
    ``expected_replicas``: INCONCLUSIVE unless exactly that many exports are
    found (a node that skipped the cut leaves no directory at all).
    ``progress``: where progress lines go (None: nowhere)."""
    began = time.monotonic()
    reporter = Progress(progress)
    try:
        _check_arguments(engine, samples, max_divergence_rate)
        loaded = _load(exports)
        out.mkdir(parents=True, exist_ok=True)
        for name in OUTPUT_FILES:
            (out / name).unlink(missing_ok=True)
    except UsageError as exc:
        _complain(str(exc))
        return EXIT_USAGE
    except OSError as exc:
        _complain(f"cannot use the output directory {out}: {exc}")
        return EXIT_USAGE
    reporter.line(f"{len(loaded)} replica exports: " + ", ".join(e.replica for e in loaded))
    engine_info: dict[str, Any] = {"name": engine}
    problems = cut_problems(loaded, expected_replicas)
    if problems:
        for problem in problems:
            reporter.line(f"INCONCLUSIVE: {problem}")
        _write(
            out,
            inconclusive_report(loaded, problems, max_divergence_rate),
            engine_info,
            {"total_seconds": time.monotonic() - began},
        )
        return EXIT_INCONSISTENT_CUT
    first = loaded[0].manifest
    assert first is not None
    plan = AuditPlan(tuple(loaded), first.raft_index, first.split_points, check_logs)
    try:
        started = _start_engine(engine, master, spark_conf)
        try:
            engine_info = started.describe()
            audit = _Audit(
                plan,
                engine=started,
                out=out,
                samples=samples,
                max_rate=max_divergence_rate,
                progress=reporter,
            )
            report = audit.run()
        finally:
            started.close()
    except Exception as exc:
        for name in OUTPUT_FILES:  # nothing half-written is left to be mistaken for a report
            (out / name).unlink(missing_ok=True)
        if isinstance(exc, AuditFailure):
            _complain(str(exc))
        else:
            logger.debug("the audit failed", exc_info=True)
            _complain(f"the audit failed: {type(exc).__name__}: {_first_line(exc)}")
        return EXIT_FAILURE
    timings = dict(audit.timings)
    session = getattr(started, "session_seconds", None)
    if session is not None:
        timings["session_seconds"] = session
    timings["total_seconds"] = time.monotonic() - began
    _write(out, report, engine_info, timings)
    reporter.line(f"{report['status']}: report in {out / REPORT_JSON}")
    if report["status"] == FAIL:
        return EXIT_DIVERGENT
    if report["status"] == "INCONCLUSIVE":
        return EXIT_INCONSISTENT_CUT
    return EXIT_CONSISTENT


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def _complain(text: str) -> None:
    sys.stderr.write(f"rkv audit: {text}\n")
    sys.stderr.flush()
