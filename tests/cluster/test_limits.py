"""Limits a node puts on what one client may hold or send (issue 15), each a setting:
idle keep-alive connections are closed, a transaction holds a bounded number of ops."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import time
from collections.abc import Iterator
from urllib.parse import quote, urlsplit

import pytest

from tests.support.cluster import LocalCluster, http

IDLE_SECONDS = 1.0
MAX_OPS = 5


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        tmp_path_factory.mktemp("limits") / "cluster",
        extra_args=[
            "--http-idle-timeout", str(IDLE_SECONDS),
            "--max-txn-ops", str(MAX_OPS),
            "--max-page-bytes", "100000",
            "--transfer-idle-timeout", str(IDLE_SECONDS),
        ],
    )  # fmt: skip
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_an_idle_keep_alive_connection_is_closed(limited: LocalCluster) -> None:
    parts = urlsplit(limited.nodes[0].url)
    assert parts.hostname is not None and parts.port is not None
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
        time.sleep(IDLE_SECONDS * 3)  # idle, longer than the node's --http-idle-timeout
        sock.settimeout(10)
        rest = b""
        while chunk := sock.recv(65536):  # the rest of the answer, then the close
            rest += chunk
    # The node closed it: recv returned b"" (end of stream) instead of timing out.


def test_a_txn_over_max_txn_ops_is_413_and_one_at_it_is_applied(limited: LocalCluster) -> None:
    leader = limited.leader()
    over = {"success": [{"op": "get", "key": "a2V5"}] * (MAX_OPS + 1)}
    answer = http("POST", f"{leader.url}/v1/txn", json.dumps(over).encode())
    assert answer.status == 413, answer.body
    assert answer.json()["code"] == "txn_too_large"
    at = {"success": [{"op": "get", "key": "a2V5"}] * MAX_OPS}
    answer = http("POST", f"{leader.url}/v1/txn", json.dumps(at).encode())
    assert answer.status == 200, answer.body
    assert len(answer.json()["results"]) == MAX_OPS


def test_the_status_tells_clients_the_limits(limited: LocalCluster) -> None:
    for node in limited.nodes:
        limits = http("GET", f"{node.url}/v1/status").json()["limits"]
        assert limits["max_txn_ops"] == MAX_OPS
        assert limits["max_page_bytes"] == 100_000
        assert limits["max_value_bytes"] == 1024 * 1024


def test_a_scan_page_ends_before_its_bytes_pass_max_page_bytes(limited: LocalCluster) -> None:
    leader = limited.leader()
    values = {f"page/{i}": bytes([65 + i]) * 40_000 for i in range(5)}
    values["page/9-big"] = b"B" * 150_000  # larger than a page: it comes alone
    for key, value in values.items():
        assert http("PUT", f"{leader.url}/v1/kv/{key}", value).status == 200
    pages: list[list[str]] = []
    after = ""
    while True:
        answer = http("GET", f"{leader.url}/v1/kv?prefix=page/&limit=100&encoding=utf-8{after}")
        assert answer.status == 200, answer.body
        body = answer.json()
        pages.append([item["key"] for item in body["items"]])
        if body["next"] is None:
            break
        after = f"&start_after={quote(body['next'])}"
    # 100,000 bytes a page: two 40 KB values fit, a third would not.
    assert pages == [["page/0", "page/1"], ["page/2", "page/3"], ["page/4"], ["page/9-big"]]


def test_a_snapshot_reader_that_reads_nothing_is_cut_and_the_slot_freed(
    limited: LocalCluster,
) -> None:
    leader = limited.leader()
    for i in range(24):  # more than the socket buffers hold
        answer = http("PUT", f"{leader.url}/v1/kv/bulk/{i}", bytes([65 + i % 26]) * 1024 * 1024)
        assert answer.status == 200, answer.body
    parts = urlsplit(leader.url)
    assert parts.hostname is not None and parts.port is not None
    stuck = socket.socket()
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.connect((parts.hostname, parts.port))
    try:
        stuck.sendall(b"GET /v1/snapshot HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(IDLE_SECONDS * 4)  # reads nothing, for longer than the node waits
        # The one export slot is free again: a reader that reads gets the whole state.
        whole = http("GET", f"{leader.url}/v1/snapshot", timeout=30)
        assert whole.status == 200, whole.body[:300]
        assert len(whole.body) > 24 * 1024 * 1024
        # And the stuck connection was closed by the node: draining it ends.
        stuck.settimeout(10)
        with contextlib.suppress(ConnectionResetError):
            while stuck.recv(1 << 20):
                pass
    finally:
        stuck.close()
    log = leader.log_path.read_text(errors="replace")
    assert "read nothing" in log and "Traceback" not in log, log[-3000:]


def test_a_snapshot_reader_that_hangs_up_mid_download_is_no_error(limited: LocalCluster) -> None:
    leader = limited.leader()
    for i in range(8):
        answer = http("PUT", f"{leader.url}/v1/kv/hangup/{i}", bytes([65 + i]) * 1024 * 1024)
        assert answer.status == 200, answer.body
    parts = urlsplit(leader.url)
    assert parts.hostname is not None and parts.port is not None
    for reset in (False, True, False, True):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((parts.hostname, parts.port))
        sock.sendall(b"GET /v1/snapshot HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.recv(1024)  # the download has begun
        time.sleep(0.5)  # reads no more: the node waits for the socket to drain
        if reset:  # hang up with a reset, as a killed client does; else a plain close
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    whole = http("GET", f"{leader.url}/v1/snapshot", timeout=30)  # the slot is free again
    assert whole.status == 200, whole.body[:300]
    log = leader.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "unexpected error" not in log, log[-3000:]
