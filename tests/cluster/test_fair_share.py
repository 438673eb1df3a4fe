"""The event loop shared between client addresses (issue 15, http_api/fair_share.py).

A client sending expensive requests in a loop from one address (scans of 1 MiB
values, 127.0.0.2) beside a well-behaved client (127.0.0.1): the node makes the
heavy address wait (its status counts the waits), answers every one of its
requests all the same (waiting is not refusing), and serves the other client
throughout, losing nothing it acknowledged.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.client import HTTPConnection
from urllib.parse import urlsplit

import pytest

from tests.support.bystander import Bystander
from tests.support.cluster import LocalCluster, http

MiB = 1024 * 1024
HEAVY = "127.0.0.2"
SCANNERS = 4
SCANS_EACH = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # A low threshold: the sharing must start on a fast machine too.
    cluster = LocalCluster(
        tmp_path_factory.mktemp("fair-share") / "cluster", extra_args=["--fair-share-busy", "0.02"]
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def _fair_share(url: str) -> dict[str, float]:
    status = http("GET", url + "/v1/status")
    assert status.status == 200
    summary: dict[str, float] = status.json()["fair_share"]
    return summary


def test_a_heavy_address_waits_is_answered_and_the_others_are_served(
    cluster: LocalCluster,
) -> None:
    leader = cluster.leader()
    for i in range(16):
        assert (
            http("PUT", f"{leader.url}/v1/kv/heavy/{i:02d}", b"H" * MiB, timeout=60).status == 200
        )
    before = _fair_share(leader.url)
    assert before["busy"] == 0.02
    host, port = _host_port(leader.url)
    answers: list[tuple[int, int]] = []  # (status, items) of each scan page
    lock = threading.Lock()

    def scan() -> None:
        connection = HTTPConnection(host, port, timeout=120, source_address=(HEAVY, 0))
        try:
            for _ in range(SCANS_EACH):
                connection.request("GET", "/v1/kv?prefix=heavy/&limit=16&consistency=stale")
                response = connection.getresponse()
                body = response.read()
                items = len(json.loads(body)["items"]) if response.status == 200 else -1
                with lock:
                    answers.append((response.status, items))
        finally:
            connection.close()

    with Bystander(leader.url, "fair-bystander") as bystander:
        scanners = [threading.Thread(target=scan) for _ in range(SCANNERS)]
        for thread in scanners:
            thread.start()
        for thread in scanners:
            thread.join(300)
    after = _fair_share(leader.url)
    # Every scan was answered, in full pages: the heavy address waited, never refused.
    assert len(answers) == SCANNERS * SCANS_EACH
    assert all(status == 200 and items > 0 for status, items in answers), answers
    assert after["waits"] > before["waits"], (before, after)
    bystander.check(cluster)


def test_a_body_declared_over_the_limit_is_refused_before_it_is_sent(
    cluster: LocalCluster,
) -> None:
    """413 on the Content-Length alone: the client need not send 16 MiB to learn it."""
    leader = cluster.leader()
    host, port = _host_port(leader.url)
    connection = HTTPConnection(host, port, timeout=30)
    try:
        connection.putrequest("POST", "/v1/txn")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(64 * MiB))
        connection.endheaders()  # and no body: the answer must come anyway
        response = connection.getresponse()
        body = json.loads(response.read())
    finally:
        connection.close()
    assert response.status == 413
    assert body["code"] == "payload_too_large"
    assert "64" in body["message"] or str(64 * MiB) in body["message"]


def test_heavy_watchers_wait_but_miss_no_change(cluster: LocalCluster) -> None:
    """Watches from one address are paced when over their share (larger, fewer
    batches); every change still arrives, once, in order."""
    leader = cluster.leader()
    host, port = _host_port(leader.url)
    watchers, changes = 24, 300
    head = int(http("GET", leader.url + "/v1/status").json()["applied_offset"]) + 1
    received: list[list[str]] = [[] for _ in range(watchers)]
    ready = threading.Barrier(watchers + 1)

    def watch(seen: list[str]) -> None:
        connection = HTTPConnection(host, port, timeout=120, source_address=(HEAVY, 0))
        try:
            connection.request("GET", f"/v1/watch?prefix=paced/&encoding=utf-8&from={head}")
            response = connection.getresponse()
            assert response.status == 200
            ready.wait()
            while len(seen) < changes:
                line = json.loads(response.readline())
                if "key" in line:
                    seen.append(line["key"])
        finally:
            connection.close()

    threads = [threading.Thread(target=watch, args=(seen,)) for seen in received]
    for thread in threads:
        thread.start()
    ready.wait(60)
    for i in range(changes):
        assert http("PUT", f"{leader.url}/v1/kv/paced/{i:04d}", b"v").status == 200
    for thread in threads:
        thread.join(120)
    expected = [f"paced/{i:04d}" for i in range(changes)]
    assert all(seen == expected for seen in received)
