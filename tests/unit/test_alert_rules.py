"""docs/prometheus/rkv-alerts.yml: promtool accepts it, it has the alerts the operator
guide promises, and every metric its expressions read is one a node serves."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.promql_names import exposed_series, metric_names, replicator_series

RULES = Path(__file__).resolve().parents[2] / "docs" / "prometheus" / "rkv-alerts.yml"
DOC = RULES.parents[1] / "OBSERVABILITY.md"


def rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(RULES.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def test_promtool_accepts_the_rules() -> None:
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is missing: `make test` installs Debian's prometheus"
    checked = subprocess.run(
        [promtool, "check", "rules", str(RULES)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout


def test_the_promised_alerts_are_there_and_documented() -> None:
    names = {rule["alert"] for rule in rules()}
    promised = {
        "RkvNoLeader",
        "RkvFrequentLeaderChanges",
        "RkvApplyLag",
        "RkvSlowJournalFsync",
        "RkvSlowCommitLogFsync",
        "RkvCommitLogNotCompacted",
        "RkvRedisReplicatorLag",
    }
    assert promised <= names
    doc = DOC.read_text()
    assert [name for name in names if f"`{name}`" not in doc] == []


def test_every_rule_reads_only_metrics_a_node_or_the_replicator_serves() -> None:
    exposed = exposed_series() | replicator_series()
    for rule in rules():
        read = metric_names(rule["expr"])
        assert read, rule["alert"]
        assert read <= exposed, (rule["alert"], read - exposed)


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'histogram_quantile(0.99, sum by (instance, le) (rate(a_bucket{job="x"}[5m]))) > 0.5',
            {"a_bucket"},
        ),
        ("max by (job) (b) - on (job) group_right c > 10 and g group_left h", {"b", "c", "g", "h"}),
        ("increase(d_total[15m]) > 3 and e unless f offset 5m", {"d_total", "e", "f"}),
        ('sum(rate(g_total{route="/v1/kv/{key}"}[$__rate_interval]))', {"g_total"}),
    ],
)
def test_the_name_extraction_finds_metrics_and_nothing_else(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_an_unknown_metric_is_caught() -> None:
    assert not metric_names("rkv_server_has_lead == 0") <= exposed_series()
