"""The raft journal is compacted by bytes as well as by entries (raft/journal.py).

With large entries, pysyncobj's entry-count threshold alone lets the journal grow
with the data (5,000 entries of 1.4 MB are 7 GB); --raft-compaction-bytes bounds it.
The journal's header says how far its records reach, so the check reads the file.
"""

from __future__ import annotations

import functools
import struct
from pathlib import Path

from tests.support.cluster import LocalCluster, NodeProcess, http, wait_until

CAP = 1024 * 1024
VALUE = b"v" * (200 * 1024)
WRITES = 40  # 8 MB: eight times the cap, far below the entry threshold


def journal_bytes(node: NodeProcess) -> int:
    """The bytes of records in the node's raft journal (its header's end offset)."""
    with open(node.data_dir / "raft" / "raft.journal", "rb") as f:
        header = f.read(40)
    return int(struct.unpack_from("<I", header, 36)[0]) - 40


def journal_within(node: NodeProcess, limit: int) -> bool:
    return journal_bytes(node) <= limit


def test_the_journal_stays_near_its_byte_cap_on_every_node(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path / "cluster",
        extra_args=["--raft-compaction-bytes", str(CAP), "--raft-compaction-entries", "100000"],
    )
    try:
        cluster.start()
        leader = cluster.leader()
        versions = []
        for i in range(WRITES):
            response = http("PUT", f"{leader.url}/v1/kv/big-{i}", body=VALUE, timeout=30)
            assert response.status == 200, response.body[:300]
            versions.append(int(response.json()["version"]))
        for node in cluster.nodes:
            # Every value is there on every node (a stale read waits for the version).
            for i in (0, WRITES // 2, WRITES - 1):
                query = f"consistency=stale&min_version={versions[i]}"
                got = http("GET", f"{node.url}/v1/kv/big-{i}?{query}", timeout=30)
                assert got.status == 200 and got.body == VALUE, got.status
            # A marker is written within a tick of passing the cap; a bit over it remains.
            wait_until(
                functools.partial(journal_within, node, 2 * CAP),
                timeout=30,
                what=f"{node.node_id}'s journal within twice the cap",
            )
        assert "raft marker written" in leader.log_path.read_text(errors="replace")
    finally:
        cluster.stop()
