"""Idempotent producers over real HTTP against real node processes: header
validation, duplicates across a restart of every node and a compaction,
fencing of a write that was in flight during a leader change, and expiry."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from tests.support.cluster import LocalCluster, Response, http, wait_until


def init(url: str, tid: str | None = None) -> tuple[int, int]:
    body = b"" if tid is None else json.dumps({"transactional_id": tid}).encode()
    response = http("POST", url + "/v1/producers", body)
    assert response.status == 200, response.body
    answer = response.json()
    return answer["producer_id"], answer["epoch"]


def tag(pid: int, epoch: int, seq: int) -> dict[str, str]:
    return {"Rkv-Producer-Id": str(pid), "Rkv-Producer-Epoch": str(epoch), "Rkv-Sequence": str(seq)}


def incr(url: str, pid: int, epoch: int, seq: int, key: str = "c", timeout: float = 15) -> Response:
    return http("POST", f"{url}/v1/kv/{key}?op=incr", b"", tag(pid, epoch, seq), timeout)


def value(url: str, key: str) -> bytes:
    response = http("GET", f"{url}/v1/kv/{key}")
    assert response.status == 200, response.body
    return response.body


def test_bad_producer_headers_and_operations_are_refused_with_400(cluster: LocalCluster) -> None:
    url = cluster.leader().url
    pid, epoch = init(url)
    cases = [
        {"Rkv-Producer-Id": "x", "Rkv-Producer-Epoch": "0", "Rkv-Sequence": "0"},
        {"Rkv-Producer-Id": str(pid), "Rkv-Sequence": "0"},  # no epoch
        tag(pid, epoch, -1),
        {**tag(pid, epoch, 0), "Rkv-Sequence": "1.5"},
        {**tag(pid, epoch, 0), "Rkv-Producer-Epoch": "99999999999999999999999"},
    ]
    for headers in cases:
        for method, path in (
            ("PUT", "/v1/kv/k"),
            ("DELETE", "/v1/kv/k"),
            ("POST", "/v1/kv/k?op=incr"),
            ("POST", "/v1/txn"),
        ):
            body = b"{}" if path == "/v1/txn" else b"v"
            response = http(method, url + path, body, headers)
            assert response.status == 400, (headers, path, response.body)
            assert response.json()["code"] == "invalid_producer_header"
    for path, body in (
        ("/v1/kv/k?op=frobnicate", b""),
        ("/v1/kv/k", b""),  # no op
        ("/v1/kv/k?op=incr&by=1x", b""),
        ("/v1/kv/k?op=incr&by=9223372036854775808", b""),
        ("/v1/kv/k?op=append&by=false", b"x"),  # by is checked whatever the op
        ("/v1/kv/k?op=incr&encoding=", b""),
    ):
        response = http("POST", url + path, body)
        assert response.status == 400 and response.json()["code"] == "invalid_request", path
    for body in (
        b"[1]",
        b'{"transactional_id": 5}',
        b'{"other": 1}',
        b"{",
        b'{"transactional_id": ""}',
        b'{"transactional_id": null}',  # given or absent: null is not a string
    ):
        response = http("POST", url + "/v1/producers", body)
        assert response.status == 400, body
    # None of that wrote anything, and the producer still starts at sequence 0.
    assert http("GET", url + "/v1/kv/k").status == 404
    assert incr(url, pid, epoch, 0).json()["value"] == 1


def test_counters_and_their_conflicts(cluster: LocalCluster) -> None:
    url = cluster.leader().url
    assert http("POST", url + "/v1/kv/n?op=incr&by=-5").json()["value"] == -5
    assert http("PUT", url + "/v1/kv/s", b"abc").status == 200
    refused = http("POST", url + "/v1/kv/s?op=incr")
    assert refused.status == 409 and refused.json()["code"] == "not_an_integer"
    appended = http("POST", url + "/v1/kv/s?op=append", b"def")
    assert appended.status == 200 and appended.json()["size"] == 6
    assert value(url, "s") == b"abcdef"
    txn = {
        "success": [
            {"op": "incr", "key": "n", "by": 10},
            {"op": "append", "key": "s", "value": "!"},
            {"op": "incr", "key": "s"},
        ]
    }
    failed = http("POST", url + "/v1/txn?encoding=utf-8", json.dumps(txn).encode())
    assert failed.status == 409 and failed.json()["code"] == "not_an_integer"
    assert (value(url, "n"), value(url, "s")) == (b"-5", b"abcdef")  # all or nothing


def test_duplicates_are_recognised_across_a_full_restart_and_a_compaction(
    cluster: LocalCluster,
) -> None:
    url = cluster.leader().url
    pid, epoch = init(url, "checkpointer")
    answers = [incr(url, pid, epoch, seq).json() for seq in range(20)]
    assert answers[-1]["value"] == 20

    for i in range(len(cluster.nodes)):  # every node down at once, then all back
        cluster.kill(i)
    for i in range(len(cluster.nodes)):
        cluster.start_node(i)
    cluster.wait_ready()
    url = cluster.leader().url
    again = incr(url, pid, epoch, 19)
    assert again.status == 200 and again.headers.get("Rkv-Duplicate") == "true"
    assert again.json() == answers[19]

    for node in cluster.nodes:
        assert http("POST", node.url + "/v1/admin/compact", b"", timeout=60).status == 200
    for seq in (15, 19):
        retry = incr(url, pid, epoch, seq)
        assert retry.headers.get("Rkv-Duplicate") == "true" and retry.json() == answers[seq]
    old = incr(url, pid, epoch, 10)
    assert old.status == 409 and old.json()["code"] == "duplicate_sequence_too_old"
    assert incr(url, pid, epoch, 20).json()["value"] == 21
    assert value(url, "c") == b"21"


def test_a_write_in_flight_during_a_leader_change_is_fenced_by_a_reinit(
    cluster: LocalCluster,
) -> None:
    leader = cluster.leader()
    pid, epoch = init(leader.url, "zombie")
    assert incr(leader.url, pid, epoch, 0).status == 200
    index = cluster.nodes.index(leader)
    cluster.pause(index)
    in_flight: list[Response] = []
    sender = threading.Thread(
        target=lambda: in_flight.append(incr(leader.url, pid, epoch, 1, timeout=60))
    )
    sender.start()  # reaches the paused leader's socket and waits there
    new_leader = cluster.wait_for_new_leader(leader)
    assert init(new_leader.url, "zombie") == (pid, epoch + 1)
    cluster.resume(index)
    sender.join(timeout=60)
    assert in_flight and in_flight[0].status != 200, in_flight  # the old leader was deposed
    # The zombie retries the same sequence: fenced, wherever it lands.
    retry = wait_until(
        lambda: (r := incr(cluster.leader().url, pid, epoch, 1)).status != 503 and r,
        30,
        "an answer that is not 503",
    )
    assert retry.status == 409 and retry.json()["code"] == "producer_fenced"
    assert value(cluster.leader().url, "c") == b"1"
    assert incr(cluster.leader().url, pid, epoch + 1, 0).json()["value"] == 2


def test_an_idle_producer_expires(tmp_path: Path) -> None:
    single = LocalCluster(tmp_path / "one", size=1, extra_args=["--producer-expiry", "1"])
    try:
        url = single.start().leader().url
        pid, epoch = init(url, "sleepy")
        assert incr(url, pid, epoch, 0).status == 200
        time.sleep(2.5)  # idle past its 1 s expiry (not a timing assertion: a precondition)
        refused = incr(url, pid, epoch, 1)
        assert refused.status == 409 and refused.json()["code"] == "unknown_producer"
        # The leader's sweep drops the state; the transactional id then starts over.
        wait_until(lambda: init(url, "sleepy")[0] != pid, 30, "a fresh producer for the expired id")
    finally:
        single.stop()
