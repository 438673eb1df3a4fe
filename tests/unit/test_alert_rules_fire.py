"""The alert rules' behaviour, with `promtool test rules`: each alert fires (labels and
rendered annotations exact) on the series that should trip it, not before its ``for``,
and none fires on a healthy cluster."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.unit.test_alert_rules import RULES, rules

NODE = {"job": "rkv", "instance": "n1"}
DESCRIPTIONS = {rule["alert"]: rule["annotations"]["description"] for rule in rules()}
GIB = 1024**3


def series(name: str, values: str, **labels: str) -> dict[str, str]:
    all_labels = {**NODE, **labels}
    text = ",".join(f'{k}="{v}"' for k, v in sorted(all_labels.items()))
    return {"series": f"{name}{{{text}}}", "values": values}


def histogram(name: str, slow_bound: str) -> list[dict[str, str]]:
    """10 observations a minute, each between ``slow_bound`` and twice it."""
    upper = str(2 * float(slow_bound))
    return [
        series(f"{name}_bucket", "0+0x30", le=slow_bound),
        series(f"{name}_bucket", "0+10x30", le=upper),
        series(f"{name}_bucket", "0+10x30", le="+Inf"),
    ]


def fired(
    alert: str, at: str, summary: str, severity: str = "warning", **labels: str
) -> dict[str, Any]:
    return {
        "eval_time": at,
        "alertname": alert,
        "exp_alerts": [
            {
                "exp_labels": {**NODE, "severity": severity, **labels},
                "exp_annotations": {"summary": summary, "description": DESCRIPTIONS[alert]},
            }
        ],
    }


def quiet(alert: str, at: str) -> dict[str, Any]:
    return {"eval_time": at, "alertname": alert, "exp_alerts": []}


CASES: list[dict[str, Any]] = [
    {
        "input_series": [
            series("rkv_server_has_leader", "1 0 0 0 0"),
            series("rkv_server_has_leader", "1 1 1 1 1", instance="n2"),
        ],
        "alert_rule_test": [
            quiet("RkvNoLeader", "1m"),  # pending: 0 for less than its 1 minute
            fired("RkvNoLeader", "2m", "rkv node n1 has no leader", "critical"),
        ],
    },
    {
        "input_series": [series("rkv_server_leader_changes_seen_total", "0+1x30")],
        "alert_rule_test": [
            fired(
                "RkvFrequentLeaderChanges",
                "20m",
                "rkv node n1 saw 15 leader changes in 15 minutes",
            )
        ],
    },
    {
        "input_series": [series("rkv_server_apply_lag_entries", "5000x10")],
        "alert_rule_test": [
            quiet("RkvApplyLag", "4m"),
            fired("RkvApplyLag", "6m", "rkv node n1 is 5k entries behind its commit index"),
        ],
    },
    {
        "input_series": [
            series("rkv_server_applied_index", "100000x10", instance="n2"),
            series("rkv_server_applied_index", "100000x10", instance="n3"),
            series("rkv_server_applied_index", "50000x10"),
        ],
        "alert_rule_test": [
            fired(
                "RkvFollowerBehind",
                "6m",
                "rkv node n1 has applied 50k entries fewer than the most advanced node",
            )
        ],
    },
    {
        "input_series": [series("rkv_server_ready", "0x10")],
        "alert_rule_test": [
            fired("RkvNotReady", "6m", "rkv node n1 has not been ready for 5 minutes")
        ],
    },
    {
        "input_series": [series("rkv_space_nospace_alarms", "0 1x10")],
        "alert_rule_test": [
            quiet("RkvNoSpaceAlarm", "1m"),  # raised at 1m: pending for its minute
            fired("RkvNoSpaceAlarm", "3m", "rkv node n1 holds 1 NOSPACE alarm(s)", "critical"),
        ],
    },
    {
        "input_series": [
            series("rkv_space_data_bytes", "900x20"),
            series("rkv_space_quota_bytes", "1000x20"),
        ],
        "alert_rule_test": [
            quiet("RkvNearQuota", "9m"),
            fired("RkvNearQuota", "12m", "rkv node n1's data is at 900B, over 80% of its quota"),
        ],
    },
    {
        "input_series": [
            *histogram("rkv_disk_journal_fsync_duration_seconds", "0.5"),
            *histogram("rkv_disk_commit_log_fsync_duration_seconds", "0.5"),
            *histogram("rkv_disk_lmdb_write_txn_duration_seconds", "0.25"),
        ],
        "alert_rule_test": [
            quiet("RkvSlowJournalFsync", "9m"),
            # p99 of observations spread over (0.5, 1]: 0.5 + 0.99 * 0.5.
            fired("RkvSlowJournalFsync", "16m", "rkv node n1: raft journal fsync p99 is 995ms"),
            fired("RkvSlowCommitLogFsync", "16m", "rkv node n1: commit-log fsync p99 is 995ms"),
            fired(
                "RkvSlowLmdbWrites",
                "16m",
                "rkv node n1: LMDB write transaction p99 is 497.5ms",
            ),
        ],
    },
    {
        "input_series": [
            series("rkv_server_proposals_failed_total", "0+120x20", reason="overloaded")
        ],
        "alert_rule_test": [fired("RkvProposalsFailing", "12m", "rkv node n1: 2 proposals/s fail")],
    },
    {
        "input_series": [
            series("rkv_commit_log_bytes", f"{5 * GIB}x70"),
            series("rkv_store_lmdb_map_used_bytes", f"{100 * 1024**2}x70"),
        ],
        "alert_rule_test": [
            quiet("RkvCommitLogNotCompacted", "59m"),
            fired(
                "RkvCommitLogNotCompacted",
                "65m",
                "rkv node n1: commit log is 5GiB, over 4x the live state",
            ),
        ],
    },
    {
        # 2 GiB, then one more each hour: it would double well within a day.
        "input_series": [
            series("rkv_commit_log_bytes", f"{2 * GIB}+{GIB // 60}x600"),
            series("rkv_store_lmdb_map_used_bytes", "0x600"),
        ],
        "alert_rule_test": [
            fired(
                "RkvDataGrowingFast",
                "8h",
                "rkv node n1: data will double within a day at this rate",
                "info",
            )
        ],
    },
    {
        "input_series": [
            series("rkv_redis_master_link_up", "0x10", job="redis", instance="r1"),
            series("rkv_redis_lag_seconds", "120x10", job="redis", instance="r1"),
        ],
        "alert_rule_test": [
            fired(
                "RkvRedisMasterLinkDown",
                "3m",
                "the Redis replicator r1 is not connected to its master",
                "critical",
                job="redis",
                instance="r1",
            ),
            fired(
                "RkvRedisReplicatorLag",
                "6m",
                "the Redis replicator r1 is 2m 0s behind its master",
                job="redis",
                instance="r1",
            ),
        ],
    },
    {
        # A healthy cluster: nothing fires.
        "input_series": [
            series("rkv_server_has_leader", "1x90"),
            series("rkv_server_ready", "1x90"),
            series("rkv_server_leader_changes_seen_total", "1x90"),
            series("rkv_server_apply_lag_entries", "3x90"),
            series("rkv_server_applied_index", "1000+100x90"),
            series("rkv_server_proposals_failed_total", "0x90", reason="overloaded"),
            series("rkv_commit_log_bytes", f"{GIB // 10}x90"),
            series("rkv_store_lmdb_map_used_bytes", f"{GIB // 5}x90"),
            series("rkv_disk_journal_fsync_duration_seconds_bucket", "0+100x90", le="0.001"),
            series("rkv_disk_journal_fsync_duration_seconds_bucket", "0+100x90", le="+Inf"),
            series("rkv_redis_master_link_up", "1x90", job="redis", instance="r1"),
            series("rkv_redis_lag_seconds", "0x90", job="redis", instance="r1"),
        ],
        "alert_rule_test": [quiet(alert, "85m") for alert in sorted(DESCRIPTIONS)],
    },
]


def test_every_alert_fires_when_it_should_and_only_then(tmp_path: Path) -> None:
    tested = {
        step["alertname"]
        for case in CASES
        for step in case["alert_rule_test"]
        if step["exp_alerts"]
    }
    assert tested == set(DESCRIPTIONS), "every alert needs a case where it fires"
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is missing: `make test` installs Debian's prometheus"
    spec = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", **case} for case in CASES],
    }
    path = tmp_path / "rkv-alerts-test.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    checked = subprocess.run(
        [promtool, "test", "rules", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout
