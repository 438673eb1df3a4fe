"""A follower whose data directory is wiped rebuilds itself from the leader while the
cluster keeps taking writes: restarted under its old id it gets the leader's snapshot
marker, pulls the whole commit log (raft/catch_up.py) and continues from raft."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from tests.support.cluster import LocalCluster, http, scan_all, wait_until


def test_wiped_follower_rebuilds_to_identical_state_without_downtime(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "cluster", extra_args=["--raft-compaction-entries", "50"])
    stop = threading.Event()
    acknowledged: dict[bytes, int] = {}
    failures: list[str] = []

    def writer() -> None:
        i = 0
        while not stop.is_set():
            leader = cluster.leader()
            key = b"rb/%05d" % i
            try:
                response = http("PUT", f"{leader.url}/v1/kv/rb/{i:05d}", body=b"v%d" % i)
            except OSError as exc:
                failures.append(repr(exc))
                continue
            if response.status == 200:
                acknowledged[key] = response.json()["version"]
            else:
                failures.append(f"{response.status} {response.body[:200]!r}")
            i += 1

    try:
        cluster.start()
        follower = cluster.followers()[0]
        index = cluster.nodes.index(follower)
        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        wait_until(lambda: len(acknowledged) >= 150, 60, "writes before the wipe")
        cluster.kill(index)
        shutil.rmtree(follower.data_dir)
        wait_until(lambda: len(acknowledged) >= 400, 60, "writes while it is gone")
        cluster.start_node(index)
        wait_until(lambda: len(acknowledged) >= 600, 60, "writes while it rebuilds")
        stop.set()
        thread.join(30)
        # the cluster never stopped taking writes: every request was answered 200
        assert failures == [], failures[:5]
        last = max(acknowledged.values())
        cluster.wait_ready(timeout=60)
        views = {}
        for node in cluster.nodes:
            items = scan_all(node.url, b"rb/", query=f"consistency=stale&min_version={last}")
            views[node.node_id] = {item["key"]: item["version"] for item in items}
        assert views[follower.node_id] == acknowledged
        assert all(view == acknowledged for view in views.values())
        log = follower.log_path.read_text(errors="replace")
        assert "caught up:" in log and "STALLED" not in log, log[-2000:]
        # and then compacted what it pulled
        wait_until(
            lambda: ((follower.status() or {}).get("compaction") or {}).get("runs", 0) >= 1,
            30,
            "the forced compaction after the rebuild",
        )
    except (AssertionError, TimeoutError) as error:
        raise AssertionError(f"{error}\n{cluster.logs()}") from error
    finally:
        stop.set()
        cluster.stop()
