"""Secure by default on real node processes over real sockets (TLS from `rkv certs create`'s
code): auth from the first start with --root-password-file, the refusal to serve beyond
loopback without TLS and auth, and member URL changes there once auth is on.

Beyond loopback means ``--listen 0.0.0.0:PORT`` (reached at 127.0.0.1, advertised as
``https://127.0.0.1:PORT``): binding every interface is what makes a node non-loopback.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import (
    REPO,
    ClusterTls,
    LocalCluster,
    NodeProcess,
    Response,
    http,
    wait_until,
)

PASSWORD = "first-root-password"


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


ROOT = basic("root", PASSWORD)


def call(node: NodeProcess, method: str, path: str, body: Any = None, **headers: str) -> Response:
    data = None if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    return http(method, node.url + path, body=data, headers=headers)


def write_password(path: Path, password: str) -> Path:
    path.write_text(password + "\n")
    path.chmod(0o600)
    return path


def auth_status(node: NodeProcess, headers: dict[str, str]) -> dict[str, Any] | None:
    try:
        answer = http("GET", node.url + "/v1/auth/status", headers=headers, timeout=5)
    except OSError:
        return None
    return answer.json() if answer.status == 200 else None


def wait_auth(cluster: LocalCluster, headers: dict[str, str], enabled: bool, revision: int) -> None:
    """Every node has applied auth ``enabled`` at ``revision`` (a bounded wait)."""
    wanted = {"enabled": enabled, "revision": revision}
    for node in cluster.nodes:

        def applied(node: NodeProcess = node) -> bool:
            return auth_status(node, headers) == wanted

        wait_until(applied, 30, f"{node.node_id}: auth enabled={enabled} at revision {revision}")


def beyond_loopback(cluster: LocalCluster) -> None:
    """Every node listens on 0.0.0.0 and advertises its 127.0.0.1 URL."""
    for node in cluster.nodes:
        at = node.args.index("--listen")
        node.args[at + 1] = f"0.0.0.0:{node.http_port}"
        node.args += ["--advertise-url", node.url]


@pytest.fixture
def bootstrapped(tmp_path: Path) -> Iterator[tuple[LocalCluster, Path]]:
    """Three TLS nodes, each given the same --root-password-file at their first start."""
    password_file = write_password(tmp_path / "root.password", PASSWORD)
    cluster = LocalCluster(
        tmp_path / "cluster",
        tls=ClusterTls(),
        extra_args=["--root-password-file", str(password_file)],
    )
    try:
        cluster.start()
        cluster.use_headers(ROOT)
        yield cluster, password_file
    finally:
        cluster.stop()


def test_the_root_password_file_sets_auth_up_once_and_never_again(
    bootstrapped: tuple[LocalCluster, Path],
) -> None:
    cluster, password_file = bootstrapped
    # Three nodes proposed it at once at most; one entry applied: revision 1.
    wait_auth(cluster, ROOT, enabled=True, revision=1)
    leader = cluster.leader()
    assert call(leader, "PUT", "/v1/kv/greeting", b"hello", **ROOT).status == 200
    for node in cluster.nodes:
        assert call(node, "GET", "/v1/kv/greeting", **ROOT).body == b"hello"
        anonymous = call(node, "GET", "/v1/kv/greeting")
        assert anonymous.status == 401 and anonymous.json()["code"] == "unauthenticated"
        assert call(node, "PUT", "/v1/kv/greeting", b"open?").status == 401
    users = call(leader, "GET", "/v1/auth/users", **ROOT).json()
    assert users == {"users": [{"name": "root", "roles": ["root"]}]}
    assert all(PASSWORD not in n.log_path.read_text() for n in cluster.nodes)

    # A restart with another password in the file changes nothing: the first one stays.
    write_password(password_file, "another-password")
    cluster.stop()
    cluster.start()
    wait_auth(cluster, ROOT, enabled=True, revision=1)
    another = basic("root", "another-password")
    assert call(cluster.nodes[0], "GET", "/v1/auth/status", **another).status == 401
    assert call(cluster.nodes[2], "GET", "/v1/kv/greeting", **ROOT).body == b"hello"

    # An operator disables auth: it stays disabled across a restart with the file.
    assert call(cluster.leader(), "POST", "/v1/auth/disable", **ROOT).status == 200
    wait_auth(cluster, {}, enabled=False, revision=2)
    for node in cluster.nodes:
        node.log_path.write_text("")
    cluster.stop()
    cluster.start()
    for node in cluster.nodes:  # each node's bootstrap task has looked and given up

        def ignored(node: NodeProcess = node) -> bool:
            return "--root-password-file ignored" in node.log_path.read_text()

        wait_until(ignored, 30, f"{node.node_id} to ignore the root password file")
    wait_auth(cluster, {}, enabled=False, revision=2)
    assert call(cluster.nodes[1], "GET", "/v1/kv/greeting").body == b"hello"


def run_node(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", "node", *args],
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_a_node_beyond_loopback_refuses_to_start_without_tls_and_auth(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "cluster", size=1, tls=ClusterTls())
    beyond_loopback(cluster)
    node = cluster.nodes[0]
    tls_at = node.args.index("--tls-cert")
    plain = node.args[:tls_at] + node.args[tls_at + 6 :]  # without --tls-cert/-key/-ca
    plain[plain.index("--advertise-url") + 1] = f"http://127.0.0.1:{node.http_port}"

    refused = run_node(plain)
    assert refused.returncode == 2, refused.stderr
    assert "--listen 0.0.0.0 is not loopback" in refused.stderr
    assert "missing: TLS (--tls-cert and --tls-key) and auth (--root-password-file" in (
        refused.stderr
    )
    assert "Traceback" not in refused.stderr

    # TLS but no auth: the node opens its (fresh) state, finds auth off and refuses.
    refused = run_node(node.args)
    assert refused.returncode == 2, refused.stderr
    assert "auth is not enabled in this node's state; missing: auth (--root-password-file)" in (
        refused.stderr
    )
    assert "Traceback" not in refused.stderr

    # TLS without auth, explicitly: it starts, says so loudly and in /v1/status.
    node.args = [*plain, "--insecure-no-auth"]
    node.scheme = "http"
    try:
        cluster.start()
        status = node.status()
        assert status is not None
        security = status["security"]
        assert security["insecure_no_auth"] is True and security["loopback_only"] is False
        assert (security["tls"], security["auth_enabled"]) == (False, False)
        assert "INSECURE" in security["warning"] and "TLS and auth off" in security["warning"]
        assert "INSECURE: HTTP listens beyond loopback" in node.log_path.read_text()
        # Without auth, a member's url cannot change here.
        moved = call(node, "PUT", "/v1/cluster/members/n0", {"url": node.url})
        assert moved.status == 403 and moved.json()["code"] == "auth_required"
    finally:
        cluster.stop()


def test_beyond_loopback_with_auth_from_the_file_a_member_url_can_change(
    tmp_path: Path,
) -> None:
    password_file = write_password(tmp_path / "root.password", PASSWORD)
    cluster = LocalCluster(
        tmp_path / "cluster",
        size=1,
        tls=ClusterTls(),
        extra_args=["--root-password-file", str(password_file)],
    )
    beyond_loopback(cluster)
    node = cluster.nodes[0]
    try:
        cluster.start()
        wait_auth(cluster, ROOT, enabled=True, revision=1)
        security = call(node, "GET", "/v1/status", **ROOT).json()["security"]
        assert security == {
            "tls": True,
            "auth_enabled": True,
            "loopback_only": False,
            "insecure_no_auth": False,
            "warning": None,
        }
        anonymous = call(node, "PUT", "/v1/cluster/members/n0", {"url": node.url})
        assert anonymous.status == 401
        moved = call(node, "PUT", "/v1/cluster/members/n0", {"url": node.url + "/"}, **ROOT)
        assert moved.status == 200, moved.body
        assert moved.json()["member"]["url"] == node.url
    finally:
        cluster.stop()
    # Once auth is set up and then disabled, the file does not let it start beyond loopback.
    loopback = list(node.args)
    loopback[loopback.index("--listen") + 1] = f"127.0.0.1:{node.http_port}"
    node.args = loopback
    try:
        cluster.start()
        wait_auth(cluster, ROOT, enabled=True, revision=1)
        assert call(node, "POST", "/v1/auth/disable", **ROOT).status == 200
    finally:
        cluster.stop()
    beyond = list(loopback)
    beyond[beyond.index("--listen") + 1] = f"0.0.0.0:{node.http_port}"
    refused = run_node(beyond)
    assert refused.returncode == 2, refused.stderr
    assert "auth was set up in this cluster but is disabled (auth revision 2)" in refused.stderr
