"""docs/grafana/rkv-cluster.json: valid JSON of a Grafana dashboard whose every query is
PromQL that promtool parses and reads only metrics a node or the replicator serves."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support.promql_names import exposed_series, metric_names, replicator_series

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "rkv-cluster.json"
# Grafana's variables, as Grafana would fill them in.
VARIABLES = {"$__rate_interval": "1m", "$replicator_job": "redis", "$job": "rkv"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def expressions() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query."""
    return [
        (panel["title"], target["expr"])
        for panel in dashboard()["panels"]
        for target in panel.get("targets", ())
    ]


def test_the_dashboard_is_well_formed() -> None:
    loaded = dashboard()
    assert loaded["uid"] and loaded["title"]
    panels = loaded["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    for panel in panels:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])


def test_every_query_reads_only_metrics_that_exist() -> None:
    exposed = exposed_series() | replicator_series()
    read: set[str] = set()
    for title, expr in expressions():
        names = metric_names(expr)
        assert names, title
        assert names <= exposed, (title, names - exposed)
        read |= names
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            (metric,) = re.findall(r"label_values\((\w+),", variable["definition"])
            assert metric in exposed, variable["name"]
    # The dashboard shows what matters: leadership, proposals, fsyncs, disk, the replicator.
    assert {
        "rkv_server_has_leader",
        "rkv_server_proposals_committed_total",
        "rkv_disk_journal_fsync_duration_seconds_bucket",
        "rkv_commit_log_bytes",
        "rkv_http_requests_total",
        "rkv_redis_lag_seconds",
    } <= read


def test_promtool_parses_every_query(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is missing: `make test` installs Debian's prometheus"
    rules = []
    for i, (_, expr) in enumerate(expressions()):
        filled = expr
        for variable, value in VARIABLES.items():
            filled = filled.replace(variable, value)
        rules.append({"record": f"dashboard:query_{i}", "expr": filled})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = subprocess.run(
        [promtool, "check", "rules", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
