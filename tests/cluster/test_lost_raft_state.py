"""A member whose raft state was lost (data directory wiped) must not help elect a
leader that misses committed entries.

n2 is down while n0 and n1 commit writes. n0 (the only other holder of those
writes besides n1) is killed, n1's data directory is wiped, and n1 and n2 are
started: n1 remembers nothing and n2 is behind. If n1 voted for n2 (pysyncobj
lets a member with an empty log vote for anyone), n2 would lead without the
writes: acknowledged data lost (found by the chaos campaign). rkv's member
without raft state refuses to vote for a candidate with history until it has
caught up, so the two cannot elect anyone; once n0 is back, every write is there.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from tests.support.cluster import LocalCluster, http, scan_all, wait_until


def test_a_wiped_member_and_a_stale_one_cannot_elect_a_leader_missing_writes(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(tmp_path / "cluster")
    try:
        cluster.start()
        first = cluster.leader()
        # Make n0 the holder: if the leader is not n0, the roles are renamed.
        holder = cluster.nodes.index(first)
        others = [i for i in range(3) if i != holder]
        wiped, stale = others
        cluster.kill(stale)
        written = {}
        for i in range(50):
            key = f"k{i}"
            answer = http("PUT", f"{first.url}/v1/kv/{key}", b"v%d" % i)
            assert answer.status == 200, answer.body
            written[key.encode()] = b"v%d" % i
        # Every write is now on the holder and on `wiped` only.
        wait_until(
            lambda: len(scan_all(cluster.nodes[wiped].url, b"k", query="consistency=stale")) == 50,
            20,
            "the follower to hold every write",
        )
        cluster.kill(holder)
        cluster.kill(wiped)
        shutil.rmtree(cluster.nodes[wiped].data_dir)
        cluster.start_node(wiped)
        cluster.start_node(stale)

        # Without the holder, no leader may emerge: each refuses the other.
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            for i in (wiped, stale):
                status = cluster.nodes[i].status() or {}
                assert status.get("role") != "leader", (cluster.nodes[i].node_id, status)
            time.sleep(0.2)
        assert (cluster.nodes[wiped].status() or {}).get("votes") is False

        cluster.start_node(holder)
        cluster.wait_ready(60, nodes=cluster.nodes)
        for node in cluster.nodes:

            def holds_everything(url: str = node.url) -> bool:
                items = scan_all(url, b"k", query="consistency=stale")
                return {i["key"]: i["value"] for i in items} == written

            wait_until(holds_everything, 60, f"{node.node_id} to hold every acknowledged write")
        assert (cluster.nodes[wiped].status() or {}).get("votes") is True
    finally:
        cluster.stop()


def test_every_member_of_a_new_cluster_votes_once_a_leader_is_elected(tmp_path: Path) -> None:
    """Every member of a new cluster starts without raft state; the leader, which never
    receives append_entries, must not keep saying it does not vote (the chaos rig's
    wipe waits for every member to vote, and was skipped for ever)."""
    cluster = LocalCluster(tmp_path / "cluster")
    try:
        cluster.start()
        leader = cluster.leader()

        def everyone_votes() -> bool:
            return all((n.status() or {}).get("votes") is True for n in cluster.nodes)

        wait_until(everyone_votes, 30, "every member, the leader too, to vote")
        assert (leader.status() or {}).get("role") == "leader"
    finally:
        cluster.stop()
