"""Check-quorum and the leader's lease (raft/leader_lease.py), with real node processes
whose raft links go through the rig's proxies (tests/chaos/rig/netfault.py).

A leader cut off from the majority steps down by itself, and while it still
believes it leads it never answers a ``consistency=leader`` read with a value the
new leader has already overwritten.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.rig.cluster_checks import put_ok
from tests.chaos.rig.netfault import ProxiedCluster, agreed_leader, wait_stable
from tests.support.cluster import http, wait_until


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProxiedCluster]:
    running = ProxiedCluster(tmp_path / "cluster")
    try:
        running.start()
        yield running
    finally:
        running.stop()


def role(node_url: str) -> str | None:
    try:
        got = http("GET", f"{node_url}/v1/status", timeout=3)
    except OSError:
        return None
    return str(got.json().get("role")) if got.status == 200 else None


def test_an_isolated_leader_steps_down_and_never_answers_a_leader_read_stale(
    cluster: ProxiedCluster,
) -> None:
    old = cluster.leader()
    majority = [n for n in cluster.nodes if n is not old]
    put_ok(old.url, "cq/k", b"before")
    cluster.wait_ready()

    # Read the key on the old leader at consistency=leader, over and over, from the
    # moment it is cut off until it has stepped down.
    answers: list[tuple[int, bytes]] = []
    stop = threading.Event()

    def read_on_the_old_leader() -> None:
        while not stop.is_set():
            try:
                got = http("GET", f"{old.url}/v1/kv/cq/k?consistency=leader", timeout=10)
            except OSError:
                continue
            answers.append((got.status, got.body))

    cluster.net.isolate(old, mode="blackhole")
    reader = threading.Thread(target=read_on_the_old_leader, daemon=True)
    reader.start()
    try:
        new = agreed_leader(majority, timeout=30, everyone=cluster.nodes, other_than=old)
        put_ok(new.url, "cq/k", b"after")
        overwritten_at = len(answers)
        # The old leader stops leading by itself (no message from the majority tells it).
        wait_until(lambda: role(old.url) not in ("leader", None), 20, "the old leader steps down")
        after_step_down = len(answers)
        wait_until(lambda: len(answers) > after_step_down, 20, "a read after the step-down")
    finally:
        stop.set()
        reader.join(timeout=30)
    stale = [a for a in answers[overwritten_at:] if a == (200, b"before")]
    assert stale == [], f"{len(stale)} leader reads answered the overwritten value"
    # After it stepped down a leader read is not served from its state at all.
    assert all(status != 200 for status, _ in answers[after_step_down:]), answers[-5:]

    cluster.net.heal()
    leader = wait_stable(cluster.nodes)
    got = http("GET", f"{leader.url}/v1/kv/cq/k?consistency=leader")
    assert (got.status, got.body) == (200, b"after")


def test_a_follower_back_from_a_10_second_partition_causes_no_election(
    cluster: ProxiedCluster,
) -> None:
    """Cut off, its election timer runs out again and again; with pre-vote it never
    raises its term (nobody answers, or nobody grants), so healing deposes no one."""
    leader = cluster.leader()
    cluster.wait_ready()
    term = int(http("GET", f"{leader.url}/v1/status").json()["term"])
    follower = next(n for n in cluster.nodes if n is not leader)
    for mode in ("blackhole", "reset"):
        cluster.net.isolate(follower, mode=mode)
        for i in range(50):  # writes go on without it for 10 s
            put_ok(leader.url, f"cq/{mode}/{i}", b"v")
            time.sleep(0.2)
        cluster.net.heal()
        cluster.wait_ready()  # it catches up
        time.sleep(3)  # three election timeouts for a disruption to show
        for node in cluster.nodes:
            status = http("GET", f"{node.url}/v1/status").json()
            assert int(status["term"]) == term, (mode, node.node_id, status["term"])
        assert cluster.leader() is leader
