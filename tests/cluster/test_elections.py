"""Pre-vote (raft/pre_vote.py) with real node processes: a member back from a long
pause does not depose a healthy leader, and elections still happen when they must."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import LocalCluster, http, wait_until


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    running = LocalCluster(tmp_path / "cluster")
    try:
        running.start()
        yield running
    finally:
        running.stop()


def term_and_role(url: str) -> tuple[int, str]:
    status = http("GET", f"{url}/v1/status", timeout=5).json()
    return int(status["term"]), str(status["role"])


def test_a_follower_back_from_a_10_second_pause_causes_no_election(
    cluster: LocalCluster,
) -> None:
    leader = cluster.leader()
    cluster.wait_ready()
    term, _ = term_and_role(leader.url)
    follower = next(i for i, n in enumerate(cluster.nodes) if n is not leader)
    written: list[int] = []
    failed: list[int] = []
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                got = http("PUT", f"{leader.url}/v1/kv/pause/{i}", body=b"v", timeout=10)
            except OSError:
                failed.append(i)
                continue
            (written if got.status == 200 else failed).append(i)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        cluster.pause(follower)
        time.sleep(10)  # many election timeouts: its timer has long run out
        cluster.resume(follower)
        # It catches up with the leader's log rather than campaigning.
        cluster.wait_ready()
        time.sleep(3)  # three more election timeouts for a disruption to show
    finally:
        stop.set()
        writer.join(timeout=30)
    assert failed == [], f"{len(failed)} writes failed while a follower was paused"
    assert len(written) > 0
    for node in cluster.nodes:
        assert term_and_role(node.url)[0] == term, "a member raised the term"
    assert term_and_role(leader.url) == (term, "leader")
    assert cluster.leader() is leader


def test_a_new_leader_is_still_elected_when_the_leader_dies(cluster: LocalCluster) -> None:
    leader = cluster.leader()
    term, _ = term_and_role(leader.url)
    cluster.kill(cluster.nodes.index(leader))
    others = [n for n in cluster.nodes if n is not leader]

    def elected() -> bool:
        roles = [term_and_role(n.url) for n in others]
        return any(r == "leader" for _, r in roles)

    wait_until(elected, 30, "a new leader among the survivors")
    new = next(n for n in others if term_and_role(n.url)[1] == "leader")
    assert term_and_role(new.url)[0] > term
    assert http("PUT", f"{new.url}/v1/kv/after/kill", body=b"v").status == 200
