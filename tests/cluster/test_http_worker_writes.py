"""Key-value writes served by HTTP workers (--http-workers 2) on real nodes: a
connection whose first request is a write goes to a worker, which checks and
builds the command as main does and has main propose it (node/cli/write_link.py);
every answer is main's, on the leader and on a follower.

Which process served a write is told by /v1/status ``http_workers``: ``writes``
counts the commands main proposed for each worker, and ``connections`` the
client connections each holds."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterator
from http.client import HTTPConnection, HTTPResponse
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import LocalCluster, NodeProcess, http, wait_until

MAX_VALUE = 4096
ARGS = ["--http-workers", "2", "--max-value-bytes", str(MAX_VALUE)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = LocalCluster(tmp_path_factory.mktemp("worker-writes") / "cluster", extra_args=ARGS)
    try:
        running.start()
        yield running
    finally:
        running.stop()


def connect(node: NodeProcess) -> HTTPConnection:
    return HTTPConnection("127.0.0.1", node.http_port, timeout=15)


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


def workers(node: NodeProcess, headers: dict[str, str] | None = None) -> tuple[int, int]:
    """(connections the node's workers hold, writes main proposed for them), once both
    workers are ready (they start a few seconds after the node on a busy machine)."""

    def listed() -> list[dict[str, Any]] | None:
        answer = http("GET", node.url + "/v1/status", headers=headers or node.headers)
        assert answer.status == 200, answer.body[:300]
        found: list[dict[str, Any]] = answer.json()["http_workers"]
        return found if len(found) == 2 and all(w["ready"] for w in found) else None

    ready = wait_until(listed, 60, "both HTTP workers ready")
    return sum(w["connections"] for w in ready), sum(w["writes"] for w in ready)


def on_worker(node: NodeProcess, first: str) -> HTTPConnection:
    """A connection whose first request (``first``: a write) a worker served."""
    conn = connect(node)
    before, _ = workers(node)
    status, body, _ = request(conn, "PUT", first, b"opening")
    assert status == 200, body
    assert workers(node)[0] == before + 1
    return conn


def on_main(node: NodeProcess) -> HTTPConnection:
    """A connection main serves (its first request is none a worker serves)."""
    conn = connect(node)
    before, _ = workers(node)
    assert request(conn, "GET", "/v1/status")[0] == 200
    assert workers(node)[0] == before
    return conn


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


JSON = {"Content-Type": "application/json"}
TOO_LARGE = "payload_too_large"


@pytest.mark.parametrize("role", ["leader", "follower"])
def test_writes_on_a_worker_connection_are_proposed_by_main_and_seen_everywhere(
    cluster: LocalCluster, role: str
) -> None:
    node = cluster.leader() if role == "leader" else cluster.followers()[0]
    other = cluster.followers()[-1] if role == "leader" else cluster.leader()
    p = f"ww/{role}/"
    _, writes_before = workers(node)
    conn = on_worker(node, f"/v1/kv/{p}opened")
    try:
        status, body, _ = request(conn, "PUT", f"/v1/kv/{p}k", b"v1")
        assert status == 200, body
        put = json.loads(body)
        assert put["key"] == b64(f"{p}k".encode())
        status, body, _ = request(conn, "POST", f"/v1/kv/{p}n?op=incr&by=5")
        assert status == 200 and json.loads(body)["value"] == 5, body
        status, body, _ = request(conn, "POST", f"/v1/kv/{p}n?op=incr&by=-7")
        assert status == 200 and json.loads(body)["value"] == -2, body
        status, body, _ = request(conn, "POST", f"/v1/kv/{p}k?op=append", b"+tail")
        assert status == 200 and json.loads(body)["size"] == len(b"v1+tail"), body
        txn = {
            "compare": [{"key": b64(f"{p}k".encode()), "value": b64(b"v1+tail")}],
            "success": [
                {"op": "put", "key": b64(f"{p}t".encode()), "value": b64(b"from txn")},
                {"op": "get", "key": b64(f"{p}k".encode())},
            ],
        }
        status, body, _ = request(conn, "POST", "/v1/txn", json.dumps(txn).encode(), JSON)
        assert status == 200, body
        ran = json.loads(body)
        assert ran["succeeded"] is True
        assert ran["results"][1]["value"] == b64(b"v1+tail")
        status, body, _ = request(conn, "DELETE", f"/v1/kv/{p}opened")
        assert status == 200, body
        status, body, _ = request(conn, "DELETE", f"/v1/kv/{p}opened")
        assert status == 404 and json.loads(body)["code"] == "not_found", body
        assert workers(node) == (1, writes_before + 8)  # all proposed for the worker
    finally:
        conn.close()
    linearizable = "?consistency=linearizable"
    assert http("GET", other.url + f"/v1/kv/{p}k{linearizable}").body == b"v1+tail"
    assert http("GET", other.url + f"/v1/kv/{p}n{linearizable}").body == b"-2"
    assert http("GET", other.url + f"/v1/kv/{p}t{linearizable}").body == b"from txn"
    assert http("GET", other.url + f"/v1/kv/{p}opened{linearizable}").status == 404


def test_refused_writes_answer_on_a_worker_as_on_main(cluster: LocalCluster) -> None:
    leader = cluster.leader()
    worker = on_worker(leader, "/v1/kv/ww/same/opened")
    main = on_main(leader)
    try:
        assert request(main, "PUT", "/v1/kv/ww/same/k", b"v")[0] == 200
        _, writes_before = workers(leader)
        cases: list[tuple[str, str, bytes | None, dict[str, str], int, str]] = [
            ("PUT", "/v1/kv/ww/same/k", b"w", {"If-Match": '"1"'}, 412, "version_conflict"),
            ("PUT", "/v1/kv/ww/same/k", b"w", {"If-None-Match": "*"}, 412, "version_conflict"),
            ("DELETE", "/v1/kv/ww/same/k", None, {"If-Match": '"2"'}, 412, "version_conflict"),
            ("PUT", "/v1/kv/ww/same/big", b"x" * (MAX_VALUE + 1), {}, 413, TOO_LARGE),
            (
                "POST",
                "/v1/kv/ww/same/k?op=append",
                b"x" * (MAX_VALUE + 1),
                {},
                413,
                "payload_too_large",
            ),
            ("POST", "/v1/kv/ww/same/k?op=incr", None, {}, 409, "not_an_integer"),
            ("POST", "/v1/kv/ww/same/k?op=decr", None, {}, 400, "invalid_request"),
            ("PUT", "/v1/kv/ww/same/k", b"w", {"Rkv-Fencing": "ww-lock=7"}, 409, "fenced"),
            ("PUT", "/v1/kv/ww/same/k", b"w", {"Rkv-Fencing": "no-token"}, 400, "invalid_fencing"),
            ("PUT", "/v1/kv/%00rkv/x", b"w", {}, 400, "reserved_key"),
            ("POST", "/v1/txn", b'{"success": [{"op": "nope"}]}', JSON, 400, "invalid_request"),
            ("POST", "/v1/txn", b"[", JSON, 400, "invalid_request"),
        ]
        for method, path, body, headers, status, code in cases:
            on_w = request(worker, method, path, body, headers)
            on_m = request(main, method, path, body, headers)
            assert (on_w[0], json.loads(on_w[1])["code"]) == (status, code), (path, on_w[1])
            assert on_w[:2] == on_m[:2], (method, path, headers)
        assert request(worker, "GET", "/v1/kv/ww/same/k")[:2] == (200, b"v")
        # Only the refusals the state machine decides cost a proposal: the three
        # conflicts, the incr and the fenced put, once on the worker's connection.
        assert workers(leader)[1] == writes_before + 5
    finally:
        worker.close()
        main.close()


def test_a_producer_s_retried_sequence_on_a_worker_is_a_duplicate(cluster: LocalCluster) -> None:
    leader = cluster.leader()
    answer = http("POST", leader.url + "/v1/producers", b"{}")
    assert answer.status == 200, answer.body
    producer = answer.json()
    headers = {
        "Rkv-Producer-Id": str(producer["producer_id"]),
        "Rkv-Producer-Epoch": str(producer["epoch"]),
        "Rkv-Sequence": "0",
    }
    conn = on_worker(leader, "/v1/kv/ww/producer/opened")
    try:
        status, first, response = request(
            conn, "POST", "/v1/kv/ww/producer/n?op=incr", None, headers
        )
        assert status == 200 and "Rkv-Duplicate" not in response.headers, first
        status, again, response = request(
            conn, "POST", "/v1/kv/ww/producer/n?op=incr", None, headers
        )
        assert status == 200 and again == first
        assert response.headers["Rkv-Duplicate"] == "true"
        status, body, _ = request(
            conn, "PUT", "/v1/kv/ww/producer/n", b"9", {**headers, "Rkv-Sequence": "5"}
        )
        assert status == 409 and json.loads(body)["code"] == "out_of_order_sequence", body
    finally:
        conn.close()
    assert http("GET", leader.url + "/v1/kv/ww/producer/n").body == b"1"  # applied once


def test_writes_on_leases_from_a_worker_connection_are_served_by_main(
    cluster: LocalCluster,
) -> None:
    leader = cluster.leader()
    conn = on_worker(leader, "/v1/kv/ww/lease/opened")
    try:
        _, writes_before = workers(leader)
        status, body, _ = request(conn, "PUT", "/v1/kv/ww/lease/k?ttl=30", b"v")
        assert status == 200, body
        own_lease = json.loads(body)["lease"]
        status, body, _ = request(conn, "POST", "/v1/leases", b'{"ttl": 30}', JSON)
        assert status == 200, body
        lease = json.loads(body)["id"]
        put = {"op": "put", "key": b64(b"ww/lease/t"), "value": "dg==", "lease": lease}
        txn = {"success": [put]}
        status, body, _ = request(conn, "POST", "/v1/txn", json.dumps(txn).encode(), JSON)
        assert status == 200, body
        put["lease"] = lease + 1000
        status, body, _ = request(conn, "POST", "/v1/txn", json.dumps(txn).encode(), JSON)
        assert status == 404 and json.loads(body)["code"] == "lease_not_found", body
        gzipped = {"Content-Encoding": "gzip"}
        status, body, _ = request(
            conn, "PUT", "/v1/kv/ww/lease/z?ttl=30", gzip.compress(b"zipped"), gzipped
        )
        assert status == 200, body  # the worker decoded it: main gets it decoded
        assert workers(leader)[1] == writes_before  # main proposed them as its own
    finally:
        conn.close()
    assert http("GET", leader.url + "/v1/kv/ww/lease/z").body == b"zipped"
    for lease_id, key in ((own_lease, b"ww/lease/k"), (lease, b"ww/lease/t")):
        answer = http("GET", leader.url + f"/v1/leases/{lease_id}?encoding=utf-8")
        assert answer.status == 200, answer.body
        assert answer.json()["keys"] == [key.decode()], answer.body


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + b64(f"{user}:{password}".encode())}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        tmp_path_factory.mktemp("worker-writes-auth") / "cluster", size=1, extra_args=ARGS
    )
    try:
        cluster.start()
        url = cluster.nodes[0].url

        def ok(method: str, path: str, body: object) -> None:
            answer = http(method, url + path, json.dumps(body).encode() if body else None)
            assert answer.status == 200, answer.body[:300]

        ok("POST", "/v1/auth/users", {"name": "root", "password": "root-pw"})
        ok("PUT", "/v1/auth/users/root/roles/root", None)
        ok("POST", "/v1/auth/roles", {"name": "reader"})
        ok(
            "POST",
            "/v1/auth/roles/reader/permissions?encoding=utf-8",
            {"prefix": "app/", "permission": "read"},
        )
        ok("POST", "/v1/auth/users", {"name": "bob", "password": "bob-pw", "roles": ["reader"]})
        ok("POST", "/v1/auth/enable", None)
        cluster.use_headers(_basic("root", "root-pw"))
        yield cluster
    finally:
        cluster.stop()


def test_a_user_without_write_permission_is_refused_by_the_worker(
    secured: LocalCluster, tmp_path: Path
) -> None:
    node = secured.nodes[0]
    root, bob = node.headers, _basic("bob", "bob-pw")
    conn = connect(node)
    try:
        status, body, _ = request(conn, "PUT", "/v1/kv/app/k", b"v", root)
        assert status == 200, body
        connections, writes_before = workers(node)
        assert connections == 1
        txn = json.dumps({"success": [{"op": "put", "key": b64(b"app/k"), "value": "dw=="}]})
        for method, path, body_sent, extra in [
            ("PUT", "/v1/kv/app/k", b"w", {}),
            ("DELETE", "/v1/kv/app/k", None, {}),
            ("POST", "/v1/kv/app/k?op=append", b"w", {}),
            ("POST", "/v1/txn", txn.encode(), JSON),
        ]:
            status, body, _ = request(conn, method, path, body_sent, {**bob, **extra})
            assert status == 403 and json.loads(body)["code"] == "permission_denied", body
        status, body, _ = request(conn, "PUT", "/v1/kv/app/k", b"w")
        assert status == 401 and json.loads(body)["code"] == "unauthenticated", body
        assert request(conn, "GET", "/v1/kv/app/k", headers=bob)[:2] == (200, b"v")
        assert workers(node) == (1, writes_before)  # refused before any proposal
    finally:
        conn.close()
