"""Leases against real node processes: expiry seen by every node and by a watch, keepalives
that hold, a killed leader that expires nothing, and lease state across compaction, restarts
and a wiped member's rebuild (docs/LEASES.md).

Waits are bounded (wait_until) and never assert how long something took; bench/leases.py
measures the expiry lag."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

from tests.support.cluster import LocalCluster, NodeProcess, http, wait_until

ELECTION_TIMEOUT = 2.0
"""The nodes' election timeout (RaftConfig.election_timeout_max): a new leader's extension."""


def grant(node: NodeProcess, ttl: int) -> int:
    response = http("POST", f"{node.url}/v1/leases", body=json.dumps({"ttl": ttl}).encode())
    assert response.status == 200, response.body
    lease: int = response.json()["id"]
    assert response.json()["ttl"] == ttl
    return lease


def put(node: NodeProcess, key: str, value: bytes, lease: int | None = None) -> int:
    query = "" if lease is None else f"?lease={lease}"
    response = http("PUT", f"{node.url}/v1/kv/{key}{query}", body=value)
    assert response.status == 200, response.body
    version: int = response.json()["version"]
    return version


def stale_get(node: NodeProcess, key: str, min_version: int = 0) -> int:
    query = "consistency=stale" + (f"&min_version={min_version}" if min_version else "")
    return http("GET", f"{node.url}/v1/kv/{key}?{query}").status


def gone(node: NodeProcess, key: str) -> Callable[[], bool]:
    return lambda: stale_get(node, key) == 404


def keepalive(urls: list[str], leases: list[int]) -> dict[int, Any]:
    """One batch keepalive through the first node that answers: id -> its outcome."""
    body = json.dumps({"ids": leases}).encode()
    for url in urls:
        try:
            response = http("POST", f"{url}/v1/leases/keepalive", body=body, timeout=5.0)
        except OSError:
            continue
        if response.status == 200:
            return {item["id"]: item for item in response.json()["leases"]}
    return {}


def test_a_key_whose_lease_expires_is_deleted_on_every_node_and_a_watch_sees_it(
    cluster: LocalCluster,
) -> None:
    leader = cluster.leader()
    lease = grant(leader, 2)
    version = put(leader, "expiring/k", b"v", lease)
    kept = put(leader, "expiring/kept", b"v")  # no lease: stays
    follower = cluster.followers()[0]
    watch = HTTPConnection("127.0.0.1", follower.http_port, timeout=30)
    watch.request("GET", f"/v1/watch?prefix=expiring/&from={version}&encoding=utf-8")
    stream = watch.getresponse()
    assert stream.status == 200
    for node in cluster.nodes:
        assert stale_get(node, "expiring/k", version) == 200
    # No keepalive: the leader expires it and every node applies the delete.
    for node in cluster.nodes:
        wait_until(gone(node, "expiring/k"), 30, f"the delete on {node.node_id}")
        assert stale_get(node, "expiring/kept", kept) == 200
    deletes: list[dict[str, Any]] = []
    while not deletes:
        line = json.loads(stream.readline())
        if line.get("op") == "delete":
            deletes.append(line)
    watch.close()
    assert deletes[0]["key"] == "expiring/k"
    ended = http("POST", f"{leader.url}/v1/leases/{lease}/keepalive")
    assert ended.status == 404 and ended.json()["code"] == "lease_expired", ended.body


def test_keepalives_keep_a_two_second_lease_for_thirty_seconds(cluster: LocalCluster) -> None:
    leader = cluster.leader()
    lease = grant(leader, 2)
    version = put(leader, "kept/k", b"v", lease)
    urls = [node.url for node in cluster.nodes]
    until = time.monotonic() + 30
    while time.monotonic() < until:
        assert keepalive(urls, [lease]).get(lease, {}).get("ttl") == 2
        time.sleep(0.5)
    for node in cluster.nodes:
        assert stale_get(node, "kept/k", version) == 200
    info = http("GET", f"{leader.url}/v1/leases/{lease}?encoding=utf-8").json()
    assert info["keys"] == ["kept/k"] and 0 < info["remaining"] <= 2


def test_a_killed_leader_expires_none_of_200_kept_leases(cluster: LocalCluster) -> None:
    leader = cluster.leader()
    ttl = 3
    leases = [grant(leader, ttl) for _ in range(200)]
    last_version = 0
    for i, lease in enumerate(leases):
        last_version = put(leader, f"held/{i:03d}", b"v", lease)
    problems: list[str] = []
    stop = threading.Event()

    def keep() -> None:
        while not stop.is_set():
            urls = [node.url for node in cluster.nodes if node.alive]
            outcome = keepalive(urls, leases)
            problems.extend(f"{i}: {o}" for i, o in outcome.items() if o.get("code") is not None)
            stop.wait(ttl / 3)

    keeper = threading.Thread(target=keep, daemon=True)
    keeper.start()
    try:
        time.sleep(1.0)
        cluster.kill(cluster.nodes.index(leader))
        new_leader = cluster.wait_for_new_leader(leader)
        time.sleep(3 * ttl)  # several TTLs under the new leader, keepalives going on
        assert problems == [], problems[:5]
        for i in range(len(leases)):
            assert stale_get(new_leader, f"held/{i:03d}", last_version) == 200, i
    finally:
        stop.set()
        keeper.join(10)
    # Keepalives stopped: every lease ends, within its TTL and the documented bound.
    bound = ttl + ELECTION_TIMEOUT + 10.0  # + generous slack for a loaded machine
    listing = f"{new_leader.url}/v1/leases?limit=1000"
    wait_until(lambda: http("GET", listing).json()["leases"] == [], bound, "every lease's end")
    for node in cluster.live():
        wait_until(gone(node, "held/199"), 15, f"the deletes on {node.node_id}")


def test_leases_survive_compaction_restarts_and_a_wiped_members_rebuild(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "cluster", extra_args=["--raft-compaction-entries", "50"])
    try:
        cluster.start()
        leader = cluster.leader()
        lease = grant(leader, 600)
        put(leader, "durable/a", b"1", lease)
        put(leader, "durable/b", b"1", lease)
        for round_ in range(3):  # enough entries for raft markers, then compaction
            for i in range(30):
                put(leader, f"filler/{i}", b"r%d" % round_)
            put(leader, "durable/b", b"detached")  # written again without the lease
        for node in cluster.nodes:
            assert http("POST", f"{node.url}/v1/admin/compact").status == 200
        follower = cluster.followers()[0]
        index = cluster.nodes.index(follower)
        cluster.kill(index)
        shutil.rmtree(follower.data_dir)
        cluster.start_node(index)
        cluster.wait_ready(timeout=60)
        for i in range(len(cluster.nodes)):  # a restart of every node keeps it too
            cluster.restart(i)
        cluster.wait_ready(timeout=60)
        leader = cluster.leader()
        last = put(leader, "durable/marker", b"m")
        for node in cluster.nodes:
            assert stale_get(node, "durable/marker", last) == 200  # min_version waits
            info = http("GET", f"{node.url}/v1/leases/{lease}?encoding=utf-8")
            assert info.status == 200, (node.node_id, info.body)
            assert info.json()["keys"] == ["durable/a"], (node.node_id, info.body)
        # The rebuilt member applies the lease's end like the others.
        revoked = http("DELETE", f"{leader.url}/v1/leases/{lease}")
        assert revoked.status == 200 and revoked.json()["deleted_keys"] == 1, revoked.body
        last = put(leader, "durable/after", b"x")
        for node in cluster.nodes:
            assert stale_get(node, "durable/after", last) == 200
            assert stale_get(node, "durable/a") == 404, node.node_id
            assert stale_get(node, "durable/b") == 200, node.node_id
        assert "caught up" in follower.log_path.read_text(errors="replace")
    except (AssertionError, TimeoutError) as error:
        raise AssertionError(f"{error}\n{cluster.logs()}") from error
    finally:
        cluster.stop()
