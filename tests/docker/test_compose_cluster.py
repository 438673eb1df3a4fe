"""The container tier: docker-compose.yml's cluster under faults, through published ports.

The tests run in file order on one compose project (tests/docker/conftest.py)
and share its ledger of acknowledged writes: every later test checks every
write acknowledged so far, so a write lost by an earlier fault is caught too.
Faults are Docker's own: ``docker kill`` of the leader, ``docker stop``,
``docker pause`` of a follower, ``docker network disconnect`` of a follower.
Then the compose ``audit`` service must find the three replicas identical.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.docker.compose import NODE_SERVICES
from tests.docker.conftest import TEST_SUBNET, ComposeCluster, read_secret
from tests.docker.images import NODE_IMAGE
from tests.support.cluster import REPO, http

# Set-up (base image, wheelhouse, image build) counts against the first test.
pytestmark = pytest.mark.timeout(900)


def _inspect(cluster: ComposeCluster, container: str, template: str) -> str:
    return cluster.engine.docker("inspect", "-f", template, container).stdout.strip()


def _wait_healthy(cluster: ComposeCluster, timeout: float = 90.0) -> None:
    """Docker's own health status of the three nodes (what depends_on conditions read)."""
    deadline = time.monotonic() + timeout
    health: dict[str, str] = {}
    while time.monotonic() < deadline:
        health = {
            service: _inspect(
                cluster, cluster.compose.container_id(service), "{{.State.Health.Status}}"
            )
            for service in NODE_SERVICES
        }
        if set(health.values()) == {"healthy"}:
            return
        time.sleep(1)
    raise AssertionError(f"nodes not healthy within {timeout:.0f} s: {health}")


def _follower(cluster: ComposeCluster) -> tuple[str, str]:
    leader = cluster.kv.leader()
    follower = next(s for s in NODE_SERVICES if s != leader)
    return leader, follower


def test_every_published_port_writes_and_reads(compose_cluster: ComposeCluster) -> None:
    kv = compose_cluster.kv
    for service in NODE_SERVICES:
        assert kv.write(f"hello/{service}", f"written through {service}", via=[service])
    for service in NODE_SERVICES:
        assert kv.missing_on(service) == []
    _wait_healthy(compose_cluster)


def test_tls_and_auth_are_on_with_the_generated_credentials(
    compose_cluster: ComposeCluster, tmp_path: Path
) -> None:
    kv = compose_cluster.kv
    for service in NODE_SERVICES:
        status = kv.get_response("GET", service, "/v1/status").json()
        assert status["security"]["tls"] and status["security"]["auth_enabled"], status
        assert status["security"]["warning"] is None
        anonymous = kv.get_response("GET", service, "/v1/kv/hello%2Fnode1", headers={})
        assert anonymous.status == 401 and anonymous.json()["code"] == "unauthenticated"
        # Plain HTTP to the TLS port: no answer, the handshake fails and it is closed.
        with pytest.raises(OSError):
            http("GET", kv.url(service, scheme="http") + "/readyz", timeout=5)
    # The rkv CLI from the host, as README shows: the CA and root's password from the volume.
    compose = compose_cluster.compose
    ca, password = tmp_path / "ca.crt", tmp_path / "root.password"
    for name, path in (("ca.crt", ca), ("root.password", password)):
        path.write_text(read_secret(compose_cluster.engine, compose, name))
    password.chmod(0o600)
    cli = [sys.executable, "-m", "node.cli"]
    # Reads and status: the CLI's writes (and linearizable reads) go to the leader's
    # advertised https://nodeN:8001, a name only the compose network resolves.
    flags = ["--url", kv.url("node2"), "--cacert", str(ca), "--user", "root"]
    flags += ["--password-file", str(password)]
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}

    def rkv(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*cli, *args], capture_output=True, text=True, env=env, timeout=60, check=False
        )

    got = rkv("get", "hello/node1", "--consistency", "stale", *flags)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == kv.acknowledged["hello/node1"]
    status = rkv("status", "--json", *flags)
    assert status.returncode == 0 and json.loads(status.stdout)["security"]["tls"], status.stderr
    refused = rkv("get", "hello/node1", "--consistency", "stale", *flags[:4])  # no --user
    assert refused.returncode != 0 and "unauthenticated" in refused.stderr, refused.stderr


def test_redis_writes_reach_rkv_through_the_replicator(compose_cluster: ComposeCluster) -> None:
    compose_cluster.compose.run("exec", "-T", "redis", "redis-cli", "SET", "greeting", "hello")
    kv = compose_cluster.kv
    deadline = time.monotonic() + 120
    found: list[dict[str, object]] = []
    while time.monotonic() < deadline and not found:
        response = kv.get_response("GET", "node1", "/v1/kv?prefix=redis/&encoding=utf-8")
        if response.status == 200:
            found = [
                item
                for item in response.json()["items"]
                if str(item["key"]).endswith("/d0/k/greeting")
            ]
        if not found:
            time.sleep(1)
    assert found, compose_cluster.compose.run("logs", "replicator", check=False).stdout[-3000:]
    assert str(found[0]["value"]).endswith("\nhello")


def test_killing_the_leader_loses_no_acknowledged_write(compose_cluster: ComposeCluster) -> None:
    kv, engine = compose_cluster.kv, compose_cluster.engine
    assert kv.write_many("before-kill", 20) == []
    leader = kv.leader()
    container = compose_cluster.compose.container_id(leader)
    engine.docker("kill", container)
    survivors = [s for s in NODE_SERVICES if s != leader]
    assert kv.write_many("leader-killed", 30, via=survivors) == []
    assert kv.leader(among=survivors) in survivors
    for service in survivors:
        assert kv.missing_on(service) == []
    engine.docker("start", container)
    kv.wait_converged(NODE_SERVICES)
    assert kv.missing_on(leader) == []


def test_docker_stop_ends_a_node_cleanly_on_sigterm(compose_cluster: ComposeCluster) -> None:
    kv, engine = compose_cluster.kv, compose_cluster.engine
    _, follower = _follower(compose_cluster)
    container = compose_cluster.compose.container_id(follower)
    started = time.monotonic()
    engine.docker("stop", container)
    seconds = time.monotonic() - started
    print(f"docker stop of {follower}: {seconds:.2f} s")
    # 0: rkv exited on SIGTERM; 137 would mean Docker had to SIGKILL it after 10 s.
    assert _inspect(compose_cluster, container, "{{.State.ExitCode}}") == "0"
    others = [s for s in NODE_SERVICES if s != follower]
    assert kv.write_many("follower-stopped", 10, via=others) == []
    engine.docker("start", container)
    kv.wait_converged(NODE_SERVICES)


def test_a_paused_follower_does_not_stop_writes(compose_cluster: ComposeCluster) -> None:
    kv, engine = compose_cluster.kv, compose_cluster.engine
    _, follower = _follower(compose_cluster)
    container = compose_cluster.compose.container_id(follower)
    others = [s for s in NODE_SERVICES if s != follower]
    engine.docker("pause", container)
    try:
        assert kv.write_many("follower-paused", 20, via=others) == []
    finally:
        engine.docker("unpause", container)
    kv.wait_converged(NODE_SERVICES)


def test_a_disconnected_follower_converges_after_reconnecting(
    compose_cluster: ComposeCluster,
) -> None:
    kv, engine, compose = compose_cluster.kv, compose_cluster.engine, compose_cluster.compose
    _, follower = _follower(compose_cluster)
    container = compose.container_id(follower)
    address = f"{TEST_SUBNET}.1{follower[-1]}"  # the static address docker-compose.yml gives it
    others = [s for s in NODE_SERVICES if s != follower]
    engine.docker("network", "disconnect", compose.network, container)
    try:
        assert kv.write_many("follower-disconnected", 20, via=others) == []
    finally:
        engine.docker(
            "network", "connect", "--ip", address, "--alias", follower, compose.network, container
        )
    kv.wait_converged(NODE_SERVICES, timeout=180)


def test_the_audit_service_finds_the_replicas_identical(compose_cluster: ComposeCluster) -> None:
    compose, engine = compose_cluster.compose, compose_cluster.engine
    _wait_healthy(compose_cluster)  # a node unhealthy during a fault may lag by one interval
    result = compose.run("run", "--rm", "-T", "audit", check=False, profile="audit", timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(
        engine.docker(
            "run", "--rm", "--network", "none", "--entrypoint", "cat",
            "--volume", f"{compose.volume('reports')}:/reports:ro",
            NODE_IMAGE, "/reports/report.json",
        ).stdout
    )  # fmt: skip
    assert report["status"] == "PASS", report["reasons"]
    assert sorted(r["replica"] for r in report["replicas"]) == ["n1", "n2", "n3"]
    # Read in place from the nodes' shared volume, not downloaded into /reports.
    assert all(r["export"].startswith("/exports/") for r in report["replicas"]), report["replicas"]
    assert report["totals"]["distinct_keys"] >= len(compose_cluster.kv.acknowledged)
