"""The audit on small replicas, one case per finding, with both engines.

Each case runs with the Python engine and (when Java is there) the Spark
engine; a Spark run is also compared with a Python run of the same exports:
same exit status, report.json equal byte for byte apart from ``engine`` and
``timings``, divergences.parquet equal byte for byte.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.spark import scenarios
from tests.spark.audit_support import Outcome, audit, audit_checked

ZERO_CLASSES = {
    "missing": 0,
    "extra": 0,
    "value_differs": 0,
    "version_differs": 0,
    "no_majority": 0,
}
ZERO_REPLAY = {"not_in_log": 0, "not_in_state": 0, "value_differs": 0, "version_differs": 0}


def sha(value: bytes) -> str:
    return hashlib.sha256(value).hexdigest()


def obs(version: int, value: bytes) -> dict[str, Any]:
    return {"version": version, "value_sha256": sha(value)}


def run_case(build: Callable[[Path], Path], tmp_path: Path, engine: str, **options: Any) -> Outcome:
    return audit_checked(build(tmp_path / "exports"), tmp_path, engine, **options)


def sample_keys(report: dict[str, Any]) -> list[str | None]:
    return [s["key_utf8"] for s in report["samples"]]


def test_equal_replicas_pass(engine: str, tmp_path: Path) -> None:
    outcome = run_case(scenarios.clean, tmp_path, engine)
    assert outcome.code == 0
    report = outcome.report
    assert report["status"] == "PASS"
    assert report["reasons"] == []
    assert report["cut"] == {"raft_index": 60, "applied_offset": 46}
    assert [r["key_count"] for r in report["replicas"]] == [38, 38, 38]
    assert report["buckets"]["count"] == 4
    assert report["buckets"]["differing"] == []
    assert report["totals"] == {
        "distinct_keys": 38,
        "divergent_keys": 0,
        "divergences": 0,
        "divergence_rate": 0.0,
    }
    assert report["by_class"] == ZERO_CLASSES
    assert report["samples"] == []
    for name in ("n1", "n2", "n3"):
        assert report["replay"][name]["status"] == "match"
        assert report["replay"][name]["replayed_keys"] == 38
    assert report["replay"]["n1"]["log_records"] == 43  # compacted
    log = report["log_check"]
    assert (log["status"], log["offsets_compared"], log["divergent_offsets"]) == ("agree", 46, 0)
    assert outcome.parquet_rows() == []
    assert "audit: digests: 0 of 4 buckets differ" in outcome.stderr


def test_every_divergence_class(engine: str, tmp_path: Path) -> None:
    outcome = run_case(scenarios.classes, tmp_path, engine, check_logs=False)
    assert outcome.code == 1
    report = outcome.report
    assert report["status"] == "FAIL"
    assert report["reasons"] == ["5 of 39 keys diverge (rate 0.128205 > 0)"]
    assert report["totals"] == {
        "distinct_keys": 39,
        "divergent_keys": 5,
        "divergences": 5,
        "divergence_rate": 5 / 39,
    }
    assert report["by_class"] == {c: 1 for c in ZERO_CLASSES}
    assert report["by_replica"] == {
        "n1": {"missing": 1, "extra": 0, "value_differs": 0, "version_differs": 1},
        "n2": {"missing": 0, "extra": 1, "value_differs": 0, "version_differs": 0},
        "n3": {"missing": 0, "extra": 0, "value_differs": 1, "version_differs": 0},
    }
    assert report["buckets"]["differing"] == [0, 1, 2, 3]
    assert [(b["bucket"], b["divergent_keys"]) for b in report["by_bucket"]] == [
        (0, 2),
        (1, 1),
        (2, 1),
        (3, 1),
    ]
    assert sample_keys(report) == ["k07", "k07x", "k12", "k25", "k33"]
    findings = {s["key_utf8"]: s["findings"] for s in report["samples"]}
    assert findings == {
        "k07": [{"class": "missing", "replica": "n1"}],
        "k07x": [{"class": "extra", "replica": "n2"}],
        "k12": [{"class": "value_differs", "replica": "n3"}],
        "k25": [{"class": "version_differs", "replica": "n1"}],
        "k33": [{"class": "no_majority", "replica": None}],
    }
    k33 = report["samples"][4]["replicas"]
    assert k33 == {"n1": obs(34, b"v0-33"), "n2": obs(34, b"other"), "n3": None}
    assert report["replay"]["n1"]["status"] == "skipped"
    assert report["log_check"]["status"] == "skipped"
    assert report["log_check"]["reason"] == "skipped on request"
    rows = outcome.parquet_rows()
    assert [(r["key"], r["bucket"], r["class"], r["replica"]) for r in rows] == [
        (b"k07", 0, "missing", "n1"),
        (b"k07x", 0, "extra", "n2"),
        (b"k12", 1, "value_differs", "n3"),
        (b"k25", 2, "version_differs", "n1"),
        (b"k33", 3, "no_majority", None),
    ]
    assert rows[0]["version_n1"] is None
    assert rows[0]["version_n2"] == 8
    assert rows[0]["value_sha256_n3"] == sha(b"v0-7")
    assert rows[3]["version_n1"] == 27
    assert rows[3]["version_n2"] == 26


def test_samples_are_the_first_keys_in_key_order(tmp_path: Path) -> None:
    outcome = audit(
        scenarios.classes(tmp_path / "exports"), tmp_path / "out", samples=2, check_logs=False
    )
    assert sample_keys(outcome.report) == ["k07", "k07x"]
    assert len(outcome.parquet_rows()) == 5


def test_divergence_within_the_threshold_passes(tmp_path: Path) -> None:
    exports = scenarios.classes(tmp_path / "exports")
    within = audit(exports, tmp_path / "a", check_logs=False, max_divergence_rate=0.2)
    assert (within.code, within.report["status"]) == (0, "PASS")
    assert within.report["totals"]["divergent_keys"] == 5
    assert within.report["thresholds"] == {"max_divergence_rate": 0.2}
    beyond = audit(exports, tmp_path / "b", check_logs=False, max_divergence_rate=0.1)
    assert (beyond.code, beyond.report["status"]) == (1, "FAIL")


def test_state_that_is_not_the_replay_of_its_log(engine: str, tmp_path: Path) -> None:
    outcome = run_case(scenarios.replay_mismatch, tmp_path, engine)
    assert outcome.code == 1
    report = outcome.report
    assert report["reasons"] == [
        "replica n2's state is not the replay of its log (2 keys)",
        "replica n3's state is not the replay of its log (2 keys)",
    ]
    assert report["totals"]["divergent_keys"] == 0
    replay = report["replay"]
    assert replay["n1"] == {
        "status": "match",
        "log_records": 46,
        "state_keys": 38,
        "replayed_keys": 38,
        "mismatched_keys": 0,
        "by_class": ZERO_REPLAY,
        "samples": [],
    }
    assert replay["n2"]["status"] == "mismatch"
    assert replay["n2"]["log_records"] == 44
    assert replay["n2"]["replayed_keys"] == 37
    assert replay["n2"]["by_class"] == {**ZERO_REPLAY, "not_in_log": 1, "value_differs": 1}
    assert [
        (s["key_utf8"], s["bucket"], s["class"], s["state"], s["log"])
        for s in replay["n2"]["samples"]
    ] == [
        ("k08", 0, "not_in_log", obs(9, b"v0-8"), None),
        ("k10", 1, "value_differs", obs(43, b"v1-10"), obs(11, b"v0-10")),
    ]
    assert replay["n3"]["replayed_keys"] == 39
    assert [(s["key_utf8"], s["class"], s["state"], s["log"]) for s in replay["n3"]["samples"]] == [
        ("k30", "version_differs", obs(45, b"v0-30"), obs(31, b"v0-30")),
        ("k35", "not_in_state", None, obs(36, b"v0-35")),
    ]
    # Offsets missing from a log are compaction, not divergence.
    log = report["log_check"]
    assert (log["status"], log["offsets_compared"], log["divergent_offsets"]) == ("agree", 46, 0)


def test_logs_that_diverge(engine: str, tmp_path: Path) -> None:
    outcome = run_case(scenarios.log_divergence, tmp_path, engine)
    assert outcome.code == 1
    report = outcome.report
    assert report["reasons"] == ["the replicas' logs diverge at 2 offsets, first at offset 6"]
    assert all(r["status"] == "match" for r in report["replay"].values())
    log = report["log_check"]
    assert log["status"] == "diverge"
    assert log["records"] == {"n1": 45, "n2": 46, "n3": 46}
    assert (log["offsets_compared"], log["divergent_offsets"]) == (46, 2)
    k05 = {"key": "azA1", "key_utf8": "k05", "raft_index": 6, "op": "put"}
    assert log["first_divergence"] == {
        "offset": 6,
        "records": {
            "n1": None,
            "n2": {**k05, "value_sha256": sha(b"v0-5")},
            "n3": {**k05, "value_sha256": sha(b"tampered")},
        },
    }


def test_two_replicas_have_no_majority(engine: str, tmp_path: Path) -> None:
    outcome = run_case(scenarios.two_replicas, tmp_path, engine)
    assert outcome.code == 1
    report = outcome.report
    assert report["by_class"] == {**ZERO_CLASSES, "no_majority": 3}
    assert report["by_replica"] == {
        name: {"missing": 0, "extra": 0, "value_differs": 0, "version_differs": 0}
        for name in ("n1", "n2")
    }
    assert report["totals"]["distinct_keys"] == 39
    assert [(s["key_utf8"], s["replicas"]) for s in report["samples"]] == [
        ("k07", {"n1": obs(8, b"v0-7"), "n2": None}),
        ("k07x", {"n1": None, "n2": obs(30, b"ghost")}),
        ("k12", {"n1": obs(13, b"v0-12"), "n2": obs(13, b"other")}),
    ]
    assert [r["class"] for r in outcome.parquet_rows()] == ["no_majority"] * 3
    assert report["replay"]["n1"]["status"] == "match"
    assert report["replay"]["n2"]["status"] == "skipped"
    assert report["log_check"]["status"] == "skipped"
    assert report["log_check"]["reason"] == "fewer than 2 replicas exported a log"


def test_inconsistent_cut_is_refused(engine: str, tmp_path: Path) -> None:
    outcome = run_case(scenarios.cut_index, tmp_path, engine)
    assert outcome.code == 3
    report = outcome.report
    assert report["status"] == "INCONCLUSIVE"
    assert report["reasons"] == [
        "inconsistent cut: the replicas are at different raft indexes (n1: 60, n2: 61, n3: 60)"
    ]
    assert report["cut"] is None
    assert report["totals"] is None
    assert not outcome.parquet.exists()
    assert (outcome.out / "report.html").exists()


def test_different_split_points_are_refused(tmp_path: Path) -> None:
    outcome = audit(scenarios.cut_splits(tmp_path / "exports"), tmp_path / "out")
    assert outcome.code == 3
    assert outcome.report["reasons"] == [
        "inconsistent cut: the replicas' split points differ "
        "(n1: 4 buckets, n2: 4 buckets, n3: 3 buckets)"
    ]


def test_incomplete_export_is_inconclusive(engine: str, tmp_path: Path) -> None:
    outcome = run_case(scenarios.incomplete, tmp_path, engine)
    assert outcome.code == 3
    report = outcome.report
    assert report["status"] == "INCONCLUSIVE"
    [reason] = report["reasons"]
    assert reason.startswith("replica n3 (")
    assert reason.endswith("): no manifest.json (incomplete)")
    assert [r["complete"] for r in report["replicas"]] == [True, True, False]
    assert report["cut"] == {"raft_index": 60, "applied_offset": 46}


def test_damaged_export_is_inconclusive(engine: str, tmp_path: Path) -> None:
    outcome = run_case(scenarios.damaged, tmp_path, engine)
    assert outcome.code == 3
    [reason] = outcome.report["reasons"]
    assert reason.startswith("damaged export: replica n2: ")
    assert "bucket-00001.rkvsnap" in reason
    assert "truncated" in reason
    assert not outcome.parquet.exists()


def test_one_replica_is_inconclusive(tmp_path: Path) -> None:
    outcome = audit(scenarios.single(tmp_path / "exports"), tmp_path / "out")
    assert outcome.code == 3
    assert outcome.report["reasons"] == ["an audit needs at least 2 replicas, 1 given"]


def test_html_report_is_self_contained(tmp_path: Path) -> None:
    outcome = audit(scenarios.classes(tmp_path / "exports"), tmp_path / "out", check_logs=False)
    html = (outcome.out / "report.html").read_text()
    assert html.count("<svg") == 2
    assert "Divergences per replica, by class" in html
    assert "Divergences by key-range bucket" in html
    for external in ("src=", "href=", "<script", "<link"):
        assert external not in html
    assert "&#x27;k07x&#x27;" in html
