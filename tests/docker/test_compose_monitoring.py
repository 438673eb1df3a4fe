"""The container tier: docker-compose.yml's ``monitoring`` profile (docs/DOCKER.md).

On the compose project of tests/docker/conftest.py (up without a profile, so
no Prometheus yet), ``--profile monitoring up`` starts Prometheus from the
locally built image (docs/prometheus/Dockerfile); its HTTP API, through the
published port, must see the three nodes over HTTPS (the compose CA) with a
leader each, the Redis replicator's target up and rkv's alert rules loaded.
The profile's containers are removed at the end (its volumes with the project).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.docker.compose import NODE_SERVICES, ComposeProject
from tests.docker.conftest import ComposeCluster
from tests.docker.engine import cache_dir
from tests.support.cluster import http
from tests.support.prometheus import Prometheus

pytestmark = pytest.mark.timeout(900)

MONITORING = ("prometheus-ca", "prometheus")
NODE_JOB = "rkv"
REPLICATOR_JOB = "rkv-redis-replicator"


def _containers(compose: ComposeProject, service: str) -> list[str]:
    return compose.run("ps", "-q", service, profile="monitoring").stdout.split()


def _ready(prometheus: Prometheus) -> bool:
    try:
        return http("GET", prometheus.url + "/-/ready", headers={}, timeout=2).status == 200
    except OSError:
        return False


def _targets(prometheus: Prometheus) -> dict[str, dict[str, str]]:
    """Active targets by instance: their job, health and last error."""
    active: list[dict[str, Any]] = prometheus.api("/api/v1/targets?state=active")["data"][
        "activeTargets"
    ]
    return {
        t["labels"]["instance"]: {
            "job": t["labels"]["job"],
            "health": t["health"],
            "error": t["lastError"],
        }
        for t in active
    }


def _logs(compose: ComposeProject) -> str:
    return compose.run("logs", "--no-color", *MONITORING, check=False, profile="monitoring").stdout


def _scraped(prometheus: Prometheus) -> bool:
    leaders = prometheus.scalar(f'sum(rkv_server_has_leader{{job="{NODE_JOB}"}})')
    replicator = prometheus.scalar(f'up{{job="{REPLICATOR_JOB}"}}')
    return leaders == len(NODE_SERVICES) and replicator == 1


def test_the_monitoring_profile_scrapes_the_nodes_and_the_replicator(
    compose_cluster: ComposeCluster,
) -> None:
    compose = compose_cluster.compose
    assert _containers(compose, "prometheus") == [], "a plain `up` started Prometheus"
    prometheus = Prometheus(
        f"http://127.0.0.1:{compose_cluster.prometheus_port}", cache_dir() / "last-compose.log"
    )
    try:
        compose.run("up", "--detach", "--no-build", profile="monitoring")
        deadline = time.monotonic() + 120
        while not _ready(prometheus) and time.monotonic() < deadline:
            time.sleep(1)
        assert _ready(prometheus), _logs(compose)[-3000:]
        # Scrapes every 15 s (docs/prometheus/prometheus.yml): a few rounds at most.
        deadline = time.monotonic() + 180
        while not _scraped(prometheus) and time.monotonic() < deadline:
            time.sleep(2)
        targets = _targets(prometheus)
        assert _scraped(prometheus), (targets, _logs(compose)[-3000:])
        expected = {f"{service}:8001": NODE_JOB for service in NODE_SERVICES}
        expected["replicator:9108"] = REPLICATOR_JOB
        assert {instance: t["job"] for instance, t in targets.items()} == expected
        assert all(t["health"] == "up" for t in targets.values()), targets
        # Through HTTPS: the nodes' own series, not only Prometheus's `up`.
        assert prometheus.scalar('count(rkv_server_is_leader{job="rkv"} == 1)') == 1
        assert prometheus.scalar('count(rkv_redis_master_link_up{job="rkv-redis-replicator"})')
        groups = prometheus.api("/api/v1/rules")["data"]["groups"]
        alerts = {rule["name"] for group in groups for rule in group["rules"]}
        assert {"RkvNoLeader", "RkvRedisMasterLinkDown"} <= alerts, alerts
    finally:
        compose.run("rm", "--stop", "--force", *MONITORING, check=False, profile="monitoring")
    assert _containers(compose, "prometheus") == []
