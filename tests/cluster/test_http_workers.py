"""HTTP worker processes (--http-workers 2) on real nodes over real sockets: reads
handed to workers answer as main would at every consistency level, the rest of a
handed connection is served (key-value writes: tests/cluster/test_http_worker_writes.py)
or forwarded to main, auth and TLS behave the same, and no worker
outlives its node."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from http.client import HTTPConnection, HTTPException, HTTPResponse, HTTPSConnection
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import (
    ClusterTls,
    LocalCluster,
    NodeProcess,
    http,
    wait_until,
)

WORKERS = ["--http-workers", "2"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = LocalCluster(tmp_path_factory.mktemp("workers") / "cluster", extra_args=WORKERS)
    try:
        running.start()
        yield running
    finally:
        running.stop()


def connect(node: NodeProcess, context: ssl.SSLContext | None = None) -> HTTPConnection:
    """A connection to ``node`` once its workers are ready (before, main keeps it)."""
    worker_connections(node)
    host, port = "127.0.0.1", node.http_port
    if context is not None:
        return HTTPSConnection(host, port, timeout=15, context=context)
    return HTTPConnection(host, port, timeout=15)


def request(
    conn: HTTPConnection,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes, HTTPResponse]:
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    return response.status, response.read(), response


def worker_connections(node: NodeProcess, headers: dict[str, str] | None = None) -> int:
    """Connections the node's workers hold, once both are ready (a node opens its port
    before its workers are: main serves everything until then)."""
    workers: list[dict[str, Any]] = []

    def ready() -> bool:
        answer = http("GET", node.url + "/v1/status", headers=headers or node.headers)
        assert answer.status == 200, answer.body[:300]
        workers[:] = answer.json()["http_workers"]
        return len(workers) == 2 and all(w["ready"] for w in workers)

    wait_until(ready, timeout=30, what="both HTTP workers ready")
    return sum(int(w["connections"]) for w in workers)


def test_reads_on_a_worker_connection_see_every_write_at_every_level(
    cluster: LocalCluster,
) -> None:
    leader = cluster.leader()
    follower = cluster.followers()[0]
    assert http("PUT", leader.url + "/v1/kv/w/0", b"first").status == 200
    conn = connect(follower)
    try:
        status, body, _ = request(conn, "GET", "/v1/kv/w/0?consistency=linearizable")
        assert (status, body) == (200, b"first")
        assert worker_connections(follower) == 1  # this very connection, on a worker
        for i in range(40):
            value = f"v{i}".encode()
            put = http("PUT", leader.url + "/v1/kv/w/key", value)
            assert put.status == 200
            status, body, _ = request(conn, "GET", "/v1/kv/w/key?consistency=linearizable")
            assert (status, body) == (200, value), i
        # min_version: read-your-writes on any level, read from LMDB's meta.
        version = int(put.json()["version"])
        status, body, response = request(
            conn, "GET", f"/v1/kv/w/key?consistency=stale&min_version={version}"
        )
        assert (status, body) == (200, b"v39")
        assert int(response.headers["Rkv-Version"]) == version
        status, body, _ = request(conn, "GET", "/v1/kv?prefix=w/&consistency=linearizable")
        items = json.loads(body)["items"]
        assert status == 200
        assert [base64.b64decode(i["key"]) for i in items] == [b"w/0", b"w/key"]
        status, body, response = request(conn, "GET", "/v1/kv/w/key?consistency=leader")
        assert status == 307
        assert json.loads(body)["code"] == "not_leader"
        assert response.headers["Location"] == leader.url + "/v1/kv/w/key?consistency=leader"
        status, body, _ = request(conn, "GET", "/v1/kv/w/missing?consistency=stale")
        assert status == 404 and json.loads(body)["code"] == "not_found"
        status, body, _ = request(conn, "GET", "/v1/kv/w/key?min_version=abc")
        assert status == 400
    finally:
        conn.close()
    wait_until(lambda: worker_connections(follower) == 0, 10, "the worker reports it closed")


def test_linearizable_reads_on_workers_never_miss_a_write_done_before_they_began(
    cluster: LocalCluster,
) -> None:
    """A writer counts up on the leader; readers on every follower's worker connections
    must never see less than the last write acknowledged before their read began."""
    leader = cluster.leader()
    done = [0]
    stop = threading.Event()
    failures: list[str] = []
    reads = [0]

    def write() -> None:
        for value in range(1, 10_000):
            if stop.is_set():
                return
            answer = http("PUT", leader.url + "/v1/kv/counter", str(value).encode())
            assert answer.status == 200
            done[0] = value

    def read(node: NodeProcess) -> None:
        conn = connect(node)
        try:
            while not stop.is_set():
                floor = done[0]
                status, body, _ = request(conn, "GET", "/v1/kv/counter")
                reads[0] += 1
                seen = int(body) if status == 200 else 0
                if status not in (200, 404) or seen < floor:
                    failures.append(f"{node.node_id}: {status} {body[:80]!r} < {floor}")
        finally:
            conn.close()

    threads = [threading.Thread(target=write)]
    threads += [threading.Thread(target=read, args=(n,)) for n in cluster.followers() * 2]
    for thread in threads:
        thread.start()
    time.sleep(4)
    stop.set()
    for thread in threads:
        thread.join(30)
    assert not failures, failures[:5]
    assert done[0] > 10 and reads[0] > 20


def test_a_read_connection_that_goes_on_with_writes_and_other_requests_is_served(
    cluster: LocalCluster,
) -> None:
    leader = cluster.leader()
    conn = connect(leader)
    try:
        status, _, _ = request(conn, "GET", "/v1/kv/mixed/a?consistency=stale")
        assert status == 404
        assert worker_connections(leader) == 1
        status, body, _ = request(conn, "PUT", "/v1/kv/mixed/a", b"x" * 100_000)
        assert status == 200, body
        status, body, _ = request(conn, "GET", "/v1/kv/mixed/a")
        assert (status, body) == (200, b"x" * 100_000)
        txn = {
            "success": [
                {"op": "put", "key": base64.b64encode(b"mixed/b").decode(), "value": "eQ=="}
            ]
        }
        status, body, _ = request(
            conn, "POST", "/v1/txn", json.dumps(txn).encode(), {"Content-Type": "application/json"}
        )
        assert status == 200, body
        status, body, _ = request(conn, "DELETE", "/v1/kv/mixed/a")
        assert status == 200, body
        status, body, _ = request(conn, "GET", "/v1/status")
        assert status == 200 and json.loads(body)["id"] == leader.node_id
        status, body, _ = request(conn, "GET", "/v1/no/such/route")
        assert status == 404 and json.loads(body)["code"] == "no_such_endpoint"
        assert worker_connections(leader) == 1  # still the same worker connection
    finally:
        conn.close()
    assert http("GET", leader.url + "/v1/kv/mixed/a").status == 404
    assert http("GET", leader.url + "/v1/kv/mixed/b").body == b"y"


def test_a_watch_on_a_worker_connection_streams_each_change_as_it_comes(
    cluster: LocalCluster,
) -> None:
    leader = cluster.leader()
    conn = connect(leader)
    try:
        assert request(conn, "GET", "/v1/kv/watched/a?consistency=stale")[0] in (200, 404)
        assert worker_connections(leader) == 1
        conn.request("GET", "/v1/watch?prefix=watched/&encoding=utf-8")
        stream = conn.getresponse()
        assert stream.status == 200
        for value in ("one", "two"):  # each line arrives while the stream stays open
            assert http("PUT", leader.url + "/v1/kv/watched/a", value.encode()).status == 200
            line = json.loads(stream.readline())
            while "keepalive" in line:
                line = json.loads(stream.readline())
            assert (line["op"], line["key"], line["value"]) == ("put", "watched/a", value)
    finally:
        conn.close()


def test_worker_requests_are_counted_in_the_node_metrics(cluster: LocalCluster) -> None:
    node = cluster.followers()[0]

    def served() -> float:
        text = http("GET", node.url + "/metrics").body.decode()
        total = 0.0
        for line in text.splitlines():
            wanted = 'route="/v1/kv/{key}"' in line and 'method="GET"' in line
            if line.startswith("rkv_http_requests_total{") and wanted:
                total += float(line.rsplit(" ", 1)[1])
        return total

    before = served()
    conn = connect(node)
    try:
        for _ in range(25):
            assert request(conn, "GET", "/v1/kv/metrics-key?consistency=stale")[0] == 404
        assert worker_connections(node) == 1
    finally:
        conn.close()
    wait_until(lambda: served() >= before + 25, 10, "the worker's counts reach /metrics")


def test_a_worker_that_dies_is_replaced_and_its_connections_released(
    cluster: LocalCluster,
) -> None:
    node = cluster.followers()[0]
    assert http("PUT", cluster.leader().url + "/v1/kv/dies", b"d").status == 200
    conn = connect(node)
    try:
        assert request(conn, "GET", "/v1/kv/dies")[:2] == (200, b"d")
        before = http("GET", node.url + "/v1/status").json()["http_workers"]
        holder = next(w for w in before if w["connections"] == 1)
        os.kill(int(holder["pid"]), signal.SIGKILL)
        with pytest.raises((OSError, HTTPException)):  # its connection died with it
            request(conn, "GET", "/v1/kv/dies")
    finally:
        conn.close()

    def replaced() -> bool:
        now = http("GET", node.url + "/v1/status").json()["http_workers"]
        again = next(w for w in now if w["index"] == holder["index"])
        return bool(again["ready"]) and again["pid"] != holder["pid"]

    wait_until(replaced, 30, "main starts the worker again")
    assert worker_connections(node) == 0  # the dead worker's connection is not counted
    conn = connect(node)
    try:
        assert request(conn, "GET", "/v1/kv/dies")[:2] == (200, b"d")
        assert worker_connections(node) == 1
    finally:
        conn.close()


def test_killing_the_node_leaves_no_worker_and_frees_the_port(cluster: LocalCluster) -> None:
    victim = cluster.followers()[-1]
    index = cluster.nodes.index(victim)
    assert http("PUT", cluster.leader().url + "/v1/kv/survives", b"s").status == 200
    workers = http("GET", victim.url + "/v1/status").json()["http_workers"]
    pids = [int(w["pid"]) for w in workers]
    assert len(pids) == 2
    cluster.kill(index, signal.SIGKILL)
    assert victim.proc is not None
    victim.proc.wait(timeout=10)
    wait_until(lambda: not any(_alive(pid) for pid in pids), 10, "workers gone with their node")
    with pytest.raises(OSError):  # nobody accepts on the port any more
        socket.create_connection(("127.0.0.1", victim.http_port), timeout=2).close()
    cluster.start_node(index)
    cluster.wait_ready()
    assert http("GET", victim.url + "/v1/kv/survives").body == b"s"
    assert len(http("GET", victim.url + "/v1/status").json()["http_workers"]) == 2


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_the_connection_cap_counts_the_workers_connections(tmp_path: Path) -> None:
    capped = LocalCluster(
        tmp_path / "cluster", size=1, extra_args=[*WORKERS, "--max-connections", "3"]
    )
    try:
        capped.start()
        node = capped.nodes[0]
        conns = [connect(node) for _ in range(3)]
        for conn in conns:
            assert request(conn, "GET", "/v1/kv/a?consistency=stale")[0] == 404
        refused = http("GET", node.url + "/v1/kv/a?consistency=stale")
        assert refused.status == 503 and refused.json()["code"] == "too_many_connections"
        conns.pop().close()

        def room() -> bool:
            return http("GET", node.url + "/v1/kv/a?consistency=stale").status == 404

        wait_until(room, 10, "a closed worker connection frees its place")
        for conn in conns:
            conn.close()
    finally:
        capped.stop()


# -- auth ----------------------------------------------------------------------------------


def _basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": "Basic " + token}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        tmp_path_factory.mktemp("workers-auth") / "cluster",
        size=1,
        extra_args=[*WORKERS, "--max-failed-logins", "2"],
    )
    try:
        cluster.start()
        url = cluster.nodes[0].url

        def ok(method: str, path: str, body: Any) -> None:
            answer = http(method, url + path, json.dumps(body).encode() if body else None)
            assert answer.status == 200, answer.body[:300]

        ok("POST", "/v1/auth/users", {"name": "root", "password": "root-pw"})
        ok("PUT", "/v1/auth/users/root/roles/root", None)
        ok("POST", "/v1/auth/roles", {"name": "app"})
        ok(
            "POST",
            "/v1/auth/roles/app/permissions?encoding=utf-8",
            {"prefix": "app/", "permission": "readwrite"},
        )
        ok("POST", "/v1/auth/users", {"name": "alice", "password": "alice-pw", "roles": ["app"]})
        ok("POST", "/v1/auth/enable", None)
        cluster.use_headers(_basic("root", "root-pw"))
        yield cluster
    finally:
        cluster.stop()


def test_auth_on_a_worker_is_main_s(secured: LocalCluster) -> None:
    node = secured.nodes[0]
    alice = _basic("alice", "alice-pw")
    assert http("PUT", node.url + "/v1/kv/app/k", b"v", headers=alice).status == 200
    answer = http("POST", node.url + "/v1/auth/token", b'{"user":"alice","password":"alice-pw"}')
    token = {"Authorization": "Bearer " + answer.json()["token"]}
    conn = connect(node)
    try:
        status, body, response = request(conn, "GET", "/v1/kv/app/k")
        assert status == 401 and json.loads(body)["code"] == "unauthenticated"
        assert response.headers["WWW-Authenticate"] == 'Basic realm="rkv", Bearer'
        assert worker_connections(node) == 1
        assert request(conn, "GET", "/v1/kv/app/k", headers=alice)[:2] == (200, b"v")
        assert request(conn, "GET", "/v1/kv/app/k", headers=token)[:2] == (200, b"v")
        status, body, _ = request(conn, "GET", "/v1/kv/other/k", headers=token)
        assert status == 403 and json.loads(body)["code"] == "permission_denied"
        status, body, _ = request(conn, "GET", "/v1/kv?prefix=other/", headers=alice)
        assert status == 403 and json.loads(body)["code"] == "permission_denied"
        # A write on the worker's connection is authorized by main, as the client.
        status, body, _ = request(conn, "PUT", "/v1/kv/other/k", b"v", headers=alice)
        assert status == 403 and json.loads(body)["code"] == "permission_denied"
        assert request(conn, "PUT", "/v1/kv/app/k2", b"w", headers=token)[0] == 200
        # Failed logins are the node's (main counts them): the third is refused unhashed.
        for _ in range(2):
            status, body, _ = request(conn, "GET", "/v1/kv/app/k", headers=_basic("alice", "no"))
            assert status == 401 and json.loads(body)["code"] == "invalid_credentials"
        status, body, response = request(conn, "GET", "/v1/kv/app/k", headers=_basic("alice", "no"))
        assert status == 429 and json.loads(body)["code"] == "too_many_failed_logins"
        assert "Retry-After" in response.headers
        assert worker_connections(node) == 1
    finally:
        conn.close()
    wrong = _basic("alice", "no")
    answer = http("GET", node.url + "/v1/status", headers=wrong)  # main: same counts
    assert answer.status == 429 and answer.json()["code"] == "too_many_failed_logins"


# -- TLS -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        tmp_path_factory.mktemp("workers-tls") / "cluster",
        size=1,
        extra_args=WORKERS,
        tls=ClusterTls(client_ca=True),
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_https_connections_are_shared_with_workers(tls_cluster: LocalCluster) -> None:
    node = tls_cluster.nodes[0]
    assert http("PUT", node.url + "/v1/kv/t", b"tls").status == 200
    context = tls_cluster.client_context("alice")
    conns = [connect(node, context) for _ in range(6)]
    try:
        for conn in conns:
            assert request(conn, "GET", "/v1/kv/t?consistency=linearizable")[:2] == (200, b"tls")
        # Round robin over main and two workers: 4 of these 6 on workers (and maybe the
        # connection asking for the status).
        assert worker_connections(node) in (4, 5)
        for conn in conns:  # writes on any of them
            assert request(conn, "PUT", "/v1/kv/t", b"again")[0] == 200
            assert request(conn, "GET", "/v1/kv/t")[:2] == (200, b"again")
    finally:
        for conn in conns:
            conn.close()


def test_a_client_certificate_user_is_known_on_a_worker_and_in_main(
    tls_cluster: LocalCluster,
) -> None:
    node = tls_cluster.nodes[0]
    root = {"Authorization": "Basic " + base64.b64encode(b"root:pw").decode()}
    steps: list[tuple[str, str, dict[str, Any] | None]] = [
        ("POST", "/v1/auth/users", {"name": "root", "password": "pw"}),
        ("PUT", "/v1/auth/users/root/roles/root", None),
        ("POST", "/v1/auth/roles", {"name": "reader"}),
        (
            "POST",
            "/v1/auth/roles/reader/permissions?encoding=utf-8",
            {"prefix": "t", "permission": "read"},
        ),
        ("POST", "/v1/auth/users", {"name": "alice", "password": "a", "roles": ["reader"]}),
        ("POST", "/v1/auth/enable", None),
    ]
    for method, path, step in steps:
        data = None if step is None else json.dumps(step).encode()
        answer = http(method, node.url + path, data, headers=root)
        assert answer.status == 200, (path, answer.body[:200])
    tls_cluster.use_headers(root)
    context = tls_cluster.client_context("alice")  # CN=alice, no password
    conns = [connect(node, context) for _ in range(3)]
    try:
        for conn in conns:
            assert request(conn, "GET", "/v1/kv/t")[:2] == (200, b"again")
            status, body, _ = request(conn, "PUT", "/v1/kv/t", b"no")  # read-only: forwarded
            assert status == 403 and json.loads(body)["code"] == "permission_denied", body
        assert worker_connections(node, root) >= 2
    finally:
        for conn in conns:
            conn.close()
