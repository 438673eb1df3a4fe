"""A real Prometheus scrapes a 3-node cluster: its queries see one leader known by every
node and committed proposals going up during writes; it loads the alert rules and
none fires on a healthy cluster; every query of the Grafana dashboard runs and the main
panels have data; `promtool check metrics` accepts each node's output."""

from __future__ import annotations

import threading
from pathlib import Path

import yaml

from tests.support.cluster import LocalCluster, http, wait_until
from tests.support.prometheus import promtool, run_prometheus
from tests.unit.test_grafana_dashboard import expressions

RULES = Path(__file__).resolve().parents[2] / "docs" / "prometheus" / "rkv-alerts.yml"
WAIT = 60.0
# Panels of docs/grafana/rkv-cluster.json that must show data after writes (the others
# may be empty: no failures, no compaction, no replicator scraped here).
PANELS_WITH_DATA = {
    "Nodes that know a leader",
    "Leader",
    "Proposals committed /s",
    "Applied index",
    "Commit log",
    "LMDB write transaction p99",
    "HTTP requests /s by route",
    "Resident memory",
}


def test_promtool_accepts_every_nodes_metrics(cluster: LocalCluster) -> None:
    leader = cluster.leader()
    assert http("PUT", f"{leader.url}/v1/kv/promtool", body=b"v").status == 200
    for node in cluster.nodes:
        response = http("GET", f"{node.url}/metrics")
        assert response.status == 200
        assert b"rkv_server_has_leader" in response.body
        checked = promtool("check", "metrics", stdin=response.body)
        assert checked.returncode == 0, (node.node_id, checked.stdout, checked.stderr)


def test_prometheus_scrapes_the_cluster(cluster: LocalCluster, tmp_path: Path) -> None:
    leader = cluster.leader()
    targets = [f"127.0.0.1:{node.http_port}" for node in cluster.nodes]
    stop = threading.Event()
    written: list[int] = []

    def write() -> None:
        i = 0
        while not stop.is_set():
            response = http("PUT", f"{leader.url}/v1/kv/prom/{i % 50}", body=b"v%d" % i)
            if response.status == 200:
                written.append(i)
            i += 1
            stop.wait(0.02)

    with run_prometheus(tmp_path / "prometheus", targets, rule_files=(RULES,)) as prometheus:
        wait_until(
            lambda: prometheus.scalar('sum(up{job="rkv"})') == 3,
            WAIT,
            "prometheus to scrape all three nodes",
        )
        # Every node knows a leader, and exactly one is it.
        wait_until(
            lambda: prometheus.scalar("sum(rkv_server_has_leader)") == 3,
            WAIT,
            "three nodes with a leader",
        )
        assert prometheus.scalar("sum(rkv_server_is_leader)") == 1
        leaders = prometheus.query("rkv_server_is_leader == 1")
        assert [s["metric"]["instance"] for s in leaders] == [f"127.0.0.1:{leader.http_port}"]

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        try:
            wait_until(
                lambda: (
                    (prometheus.scalar("sum(rate(rkv_server_proposals_committed_total[5s]))") or 0)
                    > 0
                ),
                WAIT,
                "a committed-proposal rate above zero during writes",
            )
            wait_until(
                lambda: (
                    (
                        prometheus.scalar(
                            'sum(rate(rkv_http_requests_total{method="PUT",route="/v1/kv/{key}"}[5s]))'
                        )
                        or 0
                    )
                    > 0
                ),
                WAIT,
                "a PUT request rate above zero during writes",
            )
            # The dashboard's queries, as Grafana fills in its variables.
            assert {title for title, _ in expressions()} >= PANELS_WITH_DATA
            for title, expr in expressions():
                filled = expr.replace("$__rate_interval", "5s").replace("$job", "rkv")
                result = prometheus.query(filled)  # fails unless Prometheus accepts it
                if title in PANELS_WITH_DATA:
                    assert result, (title, filled)
        finally:
            stop.set()
            writer.join(30)
        assert written

        # The alert rules are loaded and evaluated, and none fires on a healthy cluster.
        alerts = {
            rule["alert"]
            for group in yaml.safe_load(RULES.read_text())["groups"]
            for rule in group["rules"]
        }

        def evaluated() -> list[dict[str, object]]:
            groups = prometheus.api("/api/v1/rules")["data"]["groups"]
            rules = [rule for group in groups for rule in group["rules"]]
            if {rule["name"] for rule in rules} == alerts and all(
                rule["health"] == "ok" for rule in rules
            ):
                return rules
            return []

        rules = wait_until(evaluated, WAIT, "the alert rules to be loaded and evaluated")
        assert all(rule["type"] == "alerting" for rule in rules)
        assert [rule["name"] for rule in rules if rule["state"] != "inactive"] == []
