"""A member whose disk fills up under writes (its data directory on a small tmpfs the
test mounts): it raises the NOSPACE alarm, the cluster answers 507, no node crashes,
no acknowledged write is lost, and once space is freed and the alarm disarmed the
member catches up and the cluster takes writes again."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import LocalCluster, NodeProcess, http, scan_all, wait_until

pytestmark = pytest.mark.timeout(300)

TMPFS_BYTES = 16 * 1024 * 1024
VALUE = b"v" * 3000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    kv = LocalCluster(
        tmp_path / "cluster",
        extra_args=[
            "--space-check-interval", "0.2",
            "--segment-bytes", str(1024 * 1024),
            "--ready-min-free-bytes", "0",
            "--nospace-free-bytes", str(1024 * 1024),
            "--quota-bytes", "0",
        ],
    )  # fmt: skip
    small = kv.nodes[2].data_dir
    small.mkdir(parents=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(small)], check=True
    )
    try:
        # The log goes elsewhere, so that the node's own lines do not fill its disk.
        kv.nodes[2].log_path = tmp_path / "n2.log"
        # n0 and n1 elect a leader first: n2, whose disk fills, joins as a follower.
        kv.start_node(0)
        kv.start_node(1)
        kv.wait_ready(60, kv.nodes[:2])
        kv.start_node(2)
        kv.wait_ready(60)
        yield kv
    finally:
        kv.stop()
        subprocess.run(["umount", "-l", str(small)], check=False)


def leader_but_n2(cluster: LocalCluster) -> NodeProcess:
    """The leader (n2, whose disk fills, started last: a follower)."""
    leader = cluster.leader()
    assert leader is not cluster.nodes[2]
    return leader


def recovers(cluster: LocalCluster, leader: NodeProcess, acked: list[int]) -> None:
    """Free space, disarm: the member catches up, writes go on, nothing acked is lost."""
    full = cluster.nodes[2]
    (full.data_dir / "ballast").unlink()
    answer = http("POST", leader.url + "/v1/alarms:disarm", b"{}")
    assert answer.status == 200, answer.body
    wait_until(lambda: put(leader, 90_000) == 200, 60, "writes to be taken again")
    assert full.alive
    wait_until(lambda: http("GET", full.url + "/readyz").status == 200, 120, "n2 to be ready again")
    assert http("GET", leader.url + "/v1/alarms").json()["alarms"] == []
    expected = {f"k{i:05d}".encode() for i in [*acked, 90_000]}
    for node in cluster.nodes:

        def holds_everything(node: NodeProcess = node) -> bool:
            keys = {item["key"] for item in scan_all(node.url, b"k", query="consistency=stale")}
            return keys == expected

        wait_until(holds_everything, 60, f"{node.node_id} to hold every acknowledged write")


def fill_up_to(node: NodeProcess, left: int) -> None:
    """What an operator's other files do: leave ``left`` bytes free on n2's disk."""
    fs = os.statvfs(node.data_dir)
    (node.data_dir / "ballast").write_bytes(b"\0" * (fs.f_bavail * fs.f_frsize - left))


def put(node: NodeProcess, i: int) -> int:
    return http("PUT", f"{node.url}/v1/kv/k{i:05d}", VALUE, timeout=20).status


def test_a_full_disk_raises_the_alarm_and_the_cluster_recovers_after_disarm(
    cluster: LocalCluster,
) -> None:
    full = cluster.nodes[2]
    leader = leader_but_n2(cluster)
    fill_up_to(full, 3 * 1024 * 1024)
    acked: list[int] = []
    refused = 0
    for i in range(5000):
        status = put(leader, i)
        if status == 200:
            acked.append(i)
        else:
            assert status == 507, status  # never a 500, and nothing else
            refused += 1
            if refused >= 5:
                break
    assert refused >= 5, "the disk never filled"
    (alarm,) = http("GET", leader.url + "/v1/alarms").json()["alarms"]
    assert alarm["member"] == "n2" and alarm["kind"] == "nospace"
    assert "disk full" in alarm["reason"]
    assert full.alive  # no crash
    answer = http("PUT", leader.url + "/v1/kv/more", VALUE)
    assert answer.status == 507 and answer.json()["code"] == "no_space"
    assert "n2" in answer.json()["message"]
    readyz = http("GET", full.url + "/readyz")
    assert readyz.status == 503 and "disk full" in readyz.json()["checks"]["storage"]
    assert http("DELETE", leader.url + f"/v1/kv/k{acked[0]:05d}").status == 200
    acked.pop(0)

    recovers(cluster, leader, acked)


def test_a_write_that_meets_enospc_raises_the_alarm_and_nothing_crashes(
    cluster: LocalCluster,
) -> None:
    """Free space above the floor, then one write larger than it: the member's journal,
    commit log or LMDB meets ENOSPC itself (not the floor check)."""
    full = cluster.nodes[2]
    leader = leader_but_n2(cluster)
    fill_up_to(full, 2 * 1024 * 1024)
    acked: list[int] = []
    for i in range(3):  # larger than what is left: n2 meets ENOSPC; n0 and n1 commit
        status = http("PUT", f"{leader.url}/v1/kv/k{i:05d}", b"b" * 900_000, timeout=20).status
        if status == 200:
            acked.append(i)
        else:
            assert status == 507, status
    written = iter(range(3, 10_000))

    def refused() -> bool:
        i = next(written)
        status = put(leader, i)
        assert status in (200, 507), status
        if status == 200:
            acked.append(i)
        return status == 507

    wait_until(refused, 60, "writes to be refused", interval=0.05)
    (alarm,) = http("GET", leader.url + "/v1/alarms").json()["alarms"]
    assert alarm["member"] == "n2" and "disk full" in alarm["reason"]
    assert full.alive
    log = full.log_path.read_text(errors="replace")
    assert "No space left on device" in log
    # Raft retries its ticks on the full disk and says so once in a while, not with a
    # traceback per tick (they filled the log's own disk).
    assert log.count("failed _onTick") <= 3, log.count("failed _onTick")
    # Restarted on its full disk, it comes up (no restart loop) and still says why.
    cluster.kill(2)
    cluster.start_node(2)

    def answers_not_ready() -> bool:
        try:
            answer = http("GET", full.url + "/readyz", timeout=5)
        except OSError:
            return False
        return answer.status == 503 and "disk full" in answer.body.decode()

    wait_until(answers_not_ready, 60, "the restarted n2 to answer /readyz")
    assert full.alive
    recovers(cluster, leader, acked)
