"""A member that never applies the audit entry is reported at once, not waited for.

A follower away while the leader compacts its journal past the audit entry catches up
from a raft marker (a log range or a whole state), so the entry is never applied on
it and it writes no export. `rkv audit` must not wait out its timeout for that member:
the member's applied raft index is past the cut and it has no export, so it is failed
with that reason, and the audit of the others is INCONCLUSIVE (a replica is missing).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from node.cli.audit_cut import wait_for_exports
from spark_tools.audit_run import run_audit
from tests.support.cluster import LocalCluster, NodeProcess, http, wait_until

COMPACTION_ENTRIES = 50
WRITES_WHILE_AWAY = 200


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    running = LocalCluster(
        tmp_path / "cluster", extra_args=["--raft-compaction-entries", str(COMPACTION_ENTRIES)]
    )
    try:
        running.start()
        yield running
    finally:
        running.stop()


def reachable_from(leader: NodeProcess, node: NodeProcess) -> bool | None:
    status = leader.status()
    if status is None:
        return None
    return bool(next(m["reachable"] for m in status["members"] if m["id"] == node.node_id))


def applied_index(node: NodeProcess) -> int:
    status = node.status()
    return int(status["applied_index"]) if status else 0


def test_a_member_that_skipped_the_cut_is_failed_at_once(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    leader = cluster.leader()
    away = cluster.followers()[0]
    away_index = cluster.nodes.index(away)
    for i in range(10):
        assert http("PUT", f"{leader.url}/v1/kv/k{i}", body=b"v").status == 200

    cluster.pause(away_index)
    wait_until(lambda: reachable_from(leader, away) is False, 20, "the leader to notice")
    started = http("POST", leader.url + "/v1/audit", body=b'{"audit_id": "missed", "buckets": 2}')
    assert started.status == 200, started.body
    cut = int(started.json()["raft_index"])
    for i in range(WRITES_WHILE_AWAY):  # one raft entry each: the journal is compacted
        assert http("PUT", f"{leader.url}/v1/kv/after{i}", body=b"v").status == 200
    assert "raft marker written" in leader.log_path.read_text(errors="replace")
    cluster.resume(away_index)
    wait_until(lambda: applied_index(away) > cut, 60, "the follower to catch up past the cut")

    members = {node.node_id: node.url for node in cluster.nodes}
    exports = wait_for_exports("missed", members, total=120, per_request=5, cut_index=cut)
    assert set(exports.done) == set(members) - {away.node_id}
    assert not exports.pending
    assert "applied past the cut" in exports.failed[away.node_id]
    for manifest in exports.done.values():
        assert manifest["raft_index"] == cut

    # The two exports are still consistent with each other, but a replica is missing.
    root = tmp_path / "exports"
    root.mkdir()
    for node in cluster.nodes:
        if node is not away:
            (root / node.node_id).symlink_to(node.data_dir / "audit" / "missed" / node.node_id)
    code = run_audit(root, tmp_path / "report", "python", expected_replicas=3, progress=None)
    assert code == 3
