"""report.json: the audit's verdict and findings, engine-independent.

Everything but the ``engine`` and ``timings`` fields is computed from the
findings by this module alone, so both engines write the same bytes for the
rest. Keys are in a fixed order; JSON is indented, UTF-8.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from spark_tools.export_layout import ReplicaExport
from spark_tools.export_scan import LogScan, StateScan
from spark_tools.findings import LogAgreement, log_item_json

REPORT_FORMAT = 1
PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"
REPORT_JSON = "report.json"
REPORT_HTML = "report.html"
DIVERGENCES_PARQUET = "divergences.parquet"


def _replica_entry(export: ReplicaExport, key_count: int | None = None) -> dict[str, Any]:
    manifest = export.manifest
    return {
        "replica": export.replica,
        "export": str(export.directory),
        "complete": export.problem is None,
        "problem": export.problem,
        "raft_index": None if manifest is None else manifest.raft_index,
        "applied_offset": None if manifest is None else manifest.applied_offset,
        "key_count": key_count
        if key_count is not None
        else (None if manifest is None else manifest.key_count),
        "log_records": None if manifest is None else manifest.log_records,
    }


def _skeleton(status: str, reasons: list[str], max_rate: float) -> dict[str, Any]:
    return {
        "format": REPORT_FORMAT,
        "status": status,
        "reasons": reasons,
        "audit_id": None,
        "cut": None,
        "thresholds": {"max_divergence_rate": max_rate},
        "replicas": [],
        "buckets": None,
        "totals": None,
        "by_class": None,
        "by_replica": None,
        "by_bucket": None,
        "samples": [],
        "replay": None,
        "log_check": None,
        "outputs": {"report": REPORT_JSON, "html": REPORT_HTML, "divergences": None},
    }


def inconclusive_report(
    exports: Sequence[ReplicaExport],
    reasons: list[str],
    max_rate: float,
    scans: Sequence[StateScan] = (),
) -> dict[str, Any]:
    report = _skeleton(INCONCLUSIVE, reasons, max_rate)
    ids = {e.manifest.audit_id for e in exports if e.manifest is not None}
    indexes = {e.manifest.raft_index for e in exports if e.manifest is not None}
    offsets = {e.manifest.applied_offset for e in exports if e.manifest is not None}
    report["audit_id"] = ids.pop() if len(ids) == 1 else None
    if len(indexes) == 1:
        report["cut"] = {
            "raft_index": indexes.pop(),
            "applied_offset": offsets.pop() if len(offsets) == 1 else None,
        }
    counts: dict[int, int] = {}
    for scan in scans:
        counts[scan.replica] = counts.get(scan.replica, 0) + scan.keys
    report["replicas"] = [
        _replica_entry(e, counts.get(i) if scans else None) for i, e in enumerate(exports)
    ]
    return report


@dataclass
class CompletedAudit:
    """The findings of an audit that ran to its end, in engine-independent form."""

    exports: Sequence[ReplicaExport]
    max_rate: float
    states: Sequence[StateScan]
    logs: Sequence[LogScan]
    differing_buckets: list[int]
    distinct_keys: int
    state_summary: dict[str, Any]
    divergent_keys: int
    divergences: int
    replay: dict[str, dict[str, Any]] | None
    agreement: LogAgreement | None
    log_skip_reason: str | None
    reasons: list[str] = field(default_factory=list)


def _bucket_section(audit: CompletedAudit, names: list[str]) -> dict[str, Any]:
    counts = {(s.replica, s.bucket): s.keys for s in audit.states}
    buckets = max((s.bucket for s in audit.states), default=-1) + 1
    return {
        "count": buckets,
        "differing": audit.differing_buckets,
        "differing_counts": [
            {"bucket": b, "key_counts": {n: counts[i, b] for i, n in enumerate(names)}}
            for b in audit.differing_buckets
        ],
    }


def _log_section(audit: CompletedAudit, names: list[str]) -> dict[str, Any]:
    records = {names[log.replica]: log.records for log in audit.logs}
    agreement = audit.agreement
    if agreement is None:
        return {
            "status": "skipped",
            "reason": audit.log_skip_reason,
            "replicas": sorted(records),
            "records": records,
            "offsets_compared": 0,
            "divergent_offsets": 0,
            "first_divergence": None,
        }
    first = None
    if agreement.first_offset is not None:
        first = {
            "offset": agreement.first_offset,
            "records": {
                names[r]: log_item_json(item) for r, item in agreement.first_records.items()
            },
        }
    return {
        "status": "diverge" if agreement.divergent_offsets else "agree",
        "reason": None,
        "replicas": [names[r] for r in agreement.replicas],
        "records": records,
        "offsets_compared": agreement.offsets_compared,
        "divergent_offsets": agreement.divergent_offsets,
        "first_divergence": first,
    }


def completed_report(audit: CompletedAudit) -> dict[str, Any]:
    names = [e.replica for e in audit.exports]
    key_counts = [0] * len(names)
    for scan in audit.states:
        key_counts[scan.replica] += scan.keys
    rate = audit.divergent_keys / audit.distinct_keys if audit.distinct_keys else 0.0
    reasons = list(audit.reasons)
    if rate > audit.max_rate:
        reasons.insert(
            0,
            f"{audit.divergent_keys} of {audit.distinct_keys} keys diverge "
            f"(rate {rate:.6g} > {audit.max_rate:g})",
        )
    report = _skeleton(FAIL if reasons else PASS, reasons, audit.max_rate)
    first = audit.exports[0].manifest
    assert first is not None
    offsets = {e.manifest.applied_offset for e in audit.exports if e.manifest is not None}
    report["audit_id"] = first.audit_id
    report["cut"] = {
        "raft_index": first.raft_index,
        "applied_offset": offsets.pop() if len(offsets) == 1 else None,
    }
    report["replicas"] = [_replica_entry(e, key_counts[i]) for i, e in enumerate(audit.exports)]
    report["buckets"] = _bucket_section(audit, names)
    report["totals"] = {
        "distinct_keys": audit.distinct_keys,
        "divergent_keys": audit.divergent_keys,
        "divergences": audit.divergences,
        "divergence_rate": rate,
    }
    summary = audit.state_summary
    report["by_class"] = summary["by_class"]
    report["by_replica"] = summary["by_replica"]
    report["by_bucket"] = summary["by_bucket"]
    report["samples"] = summary["samples"]
    report["replay"] = audit.replay
    report["log_check"] = _log_section(audit, names)
    report["outputs"]["divergences"] = DIVERGENCES_PARQUET
    return report


def split_points_json(points: Sequence[bytes]) -> list[str]:
    return [base64.b64encode(p).decode("ascii") for p in points]


def encode_report(report: dict[str, Any]) -> bytes:
    return (json.dumps(report, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
