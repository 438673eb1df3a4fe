"""A follower behind the leader's compacted journal must stall, never skip entries.

pysyncobj compacts its journal into a snapshot ("full dump"); rkv writes a small marker
instead (raft/marker.py). A follower that was away while the leader compacted
gets the leader's marker, and pysyncobj then believes the follower has everything up to
the marker's index. Loading it would silently skip the entries in between, so rkv stalls
that node instead: it applies nothing, serves no reads and reports itself not ready.

The invariant checked: no node that reports itself ready is missing a key. The scenario
is made deterministic: the follower is SIGSTOPped until the leader has dropped its
connection (so the leader stops sending entries to it), then the leader writes several
times the compaction threshold in separate requests (one raft entry each) and compacts
its journal past everything the follower has.
"""

from __future__ import annotations

import functools
import re
import time
import urllib.error
from http.client import HTTPException
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import LocalCluster, NodeProcess, http, scan_all, wait_until

COMPACTION_ENTRIES = 50
WRITES_WHILE_AWAY = 300  # six times the threshold


def readyz(node: NodeProcess) -> tuple[int, str]:
    try:
        response = http("GET", node.url + "/readyz", timeout=3)
    except (OSError, HTTPException):
        return 0, "no answer"
    return response.status, str(response.json().get("reason"))


def stale_keys(node: NodeProcess, min_version: int) -> set[bytes] | None:
    """The node's keys under gap/ from a stale scan, once it has applied min_version; None
    if the node refuses (503: not caught up within its 5 s wait, or stalled)."""
    try:
        items = scan_all(
            node.url, b"gap/", query=f"consistency=stale&min_version={min_version}", timeout=10
        )
    except (AssertionError, OSError):
        return None
    return {item["key"] for item in items}


def reachable_from(leader: NodeProcess, node: NodeProcess) -> bool | None:
    status = leader.status()
    if status is None:
        return None
    return bool(next(m["reachable"] for m in status["members"] if m["id"] == node.node_id))


@pytest.mark.parametrize("pull", ["works", "fails"])
def test_follower_behind_compacted_journal_never_skips_entries(tmp_path: Path, pull: str) -> None:
    """pull=works: the follower pulls the gap from the leader and ends with every key.
    pull=fails (it cannot reach any peer's HTTP port): it stalls, never serves its
    holes, and never stands for election."""
    cluster = LocalCluster(
        tmp_path / "cluster", extra_args=["--raft-compaction-entries", str(COMPACTION_ENTRIES)]
    )
    try:
        cluster.start()
        leader = cluster.leader()
        lagging = cluster.followers()[0]
        lagging_index = cluster.nodes.index(lagging)
        if pull == "fails":
            cluster.kill(lagging_index)
            lagging.args = [
                re.sub(r",http://127\.0\.0\.1:\d+$", ",http://127.0.0.1:9", a) for a in lagging.args
            ]
            cluster.start_node(lagging_index)
            cluster.wait_ready()
            leader = cluster.leader()
            for _ in range(5):  # with no pre-vote, the restarted node may win an election
                if leader is not lagging:
                    break
                cluster.kill(lagging_index)
                leader = cluster.wait_for_new_leader(lagging)
                cluster.start_node(lagging_index)
                cluster.wait_ready()
                leader = cluster.leader()
            assert leader is not lagging

        expected: set[bytes] = set()
        last_version = 0

        def write(i: int) -> None:
            nonlocal last_version
            key = f"gap/{i:04d}"
            response = http("PUT", f"{leader.url}/v1/kv/{key}", body=b"v%d" % i)
            assert response.status == 200, (key, response.body)
            expected.add(key.encode())
            last_version = response.json()["version"]

        for i in range(10):  # the lagging follower has some state of its own
            write(i)
        wait_until(lambda: stale_keys(lagging, last_version) == expected, 15, "the follower")

        cluster.pause(lagging_index)
        # Until the leader drops the connection it keeps sending entries into the socket
        # buffers; afterwards its next index for the follower stays where it was.
        wait_until(lambda: reachable_from(leader, lagging) is False, 20, "the leader to notice")
        for i in range(10, 10 + WRITES_WHILE_AWAY):
            write(i)
        leader_log = leader.log_path.read_text(errors="replace")
        assert "raft marker written" in leader_log, "the leader never compacted its journal"
        # Everything the leader committed: a node whose raft layer has applied this far
        # claims to hold every key written above.
        target_index = (leader.status() or {})["commit_index"]
        cluster.resume(lagging_index)

        def keys_if_caught_up(node: NodeProcess) -> set[bytes] | None:
            """The node's keys (stale scan) if it is ready and raft says it applied through
            target_index; None otherwise."""
            node_status = node.status()
            if not node_status or node_status.get("raft_last_applied", 0) < target_index:
                return None
            if readyz(node)[0] != 200:
                return None
            items = scan_all(node.url, b"gap/", query="consistency=stale")
            return {item["key"] for item in items}

        def outcome() -> str | None:
            node_status = lagging.status()
            if node_status and node_status.get("stalled"):
                # A stall is permanent, so /readyz (asked after /v1/status) must agree.
                assert "snapshot" in node_status["stalled"], node_status
                status, reason = readyz(lagging)
                assert status == 503 and "snapshot" in reason, (status, reason)
                return "stalled"
            keys = keys_if_caught_up(lagging)
            if keys is None:
                return None  # still catching up (it may report ready with an old state)
            assert keys == expected, (
                f"{lagging.node_id} is ready and applied through raft index {target_index} "
                f"but misses {len(expected - keys)} keys: entries were skipped"
            )
            return "caught up"

        result = wait_until(outcome, 60, "the follower to catch up or stall", interval=0.3)

        # The invariant, on every node: ready implies every key is there.
        for node in cluster.live():
            if not (node.status() or {}).get("stalled"):
                keys = wait_until(functools.partial(keys_if_caught_up, node), 15, node.node_id)
                assert keys == expected, (
                    f"{node.node_id} reports ready but misses {len(expected - keys)} keys"
                )
            else:
                # A stalled node must not serve its state with holes, not even stale.
                refused = http("GET", f"{node.url}/v1/kv?prefix=gap/&consistency=stale")
                assert refused.status == 503, (node.node_id, refused.status, refused.body[:200])
                assert refused.json()["code"] == "node_not_ready", refused.body
                assert readyz(node)[0] == 503

        log = lagging.log_path.read_text(errors="replace")
        if pull == "works":
            # The follower pulled the gap from the leader before applying anything later.
            assert result == "caught up", result
            assert "caught up:" in log and "STALLED" not in log, log[-3000:]
            after = http("PUT", f"{leader.url}/v1/kv/gap/after", body=b"after")
            assert after.status == 200, after.body
            expected.add(b"gap/after")
            version = after.json()["version"]
            for node in cluster.nodes:
                keys = wait_until(
                    functools.partial(stale_keys, node, version), 15, f"{node.node_id} has all"
                )
                assert keys == expected, f"{node.node_id} misses {expected - keys}"
            return
        # It could not pull: stalling is the outcome (pysyncobj cannot catch it up from
        # the leader's compacted journal).
        assert result == "stalled", result
        lagging_status: dict[str, Any] = lagging.status() or {}
        assert lagging_status.get("ready") is False, lagging_status
        assert "snapshot" in str(lagging_status.get("stalled")), lagging_status
        assert "STALLED: a snapshot from" in log, log[-3000:]

        # The cluster keeps serving through the two healthy nodes.
        after = http("PUT", f"{leader.url}/v1/kv/gap/after", body=b"after")
        assert after.status == 200, after.body

        # A restart does not clear the stall: the node still has the holes.
        cluster.restart(lagging_index)
        seen: list[tuple[int, str]] = []

        def stalled_again() -> bool:
            answer = readyz(lagging)
            if answer[0] != 0:
                seen.append(answer)
            node_status = lagging.status()
            return bool(node_status and node_status.get("stalled"))

        wait_until(stalled_again, 30, "the restarted follower to report the stall")
        assert all(status != 200 for status, _ in seen), seen
        status, reason = readyz(lagging)
        assert status == 503 and "snapshot" in reason, (status, reason)
        refused = http("GET", f"{lagging.url}/v1/kv/gap/0000?consistency=stale")
        assert refused.status == 503 and refused.json()["code"] == "node_not_ready", refused.body

        # A stalled node never stands for election. Take the leader away and hold the
        # other healthy node still: only the stalled node could campaign now. When the
        # healthy one comes back, it must be the one that leads.
        current = cluster.leader()  # the follower's return may have moved leadership
        assert current is not lagging
        healthy = next(n for n in cluster.live() if n is not lagging and n is not current)
        cluster.kill(cluster.nodes.index(current))
        cluster.pause(cluster.nodes.index(healthy))
        term_before = (lagging.status() or {})["term"]
        wait_until(lambda: (lagging.status() or {}).get("leader") is None, 15, "leader gone")
        time.sleep(4)  # longer than any election timeout: the stalled node stays still
        assert (lagging.status() or {})["term"] == term_before, "the stalled node campaigned"
        cluster.resume(cluster.nodes.index(healthy))
        new_leader = cluster.leader(timeout=30)
        assert new_leader is healthy, new_leader.node_id
    except (AssertionError, TimeoutError, urllib.error.URLError) as error:
        raise AssertionError(f"{error}\n{cluster.logs()}") from error
    finally:
        cluster.stop()
