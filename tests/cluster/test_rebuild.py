"""A follower whose data directory is wiped rebuilds itself from the leader while the
cluster keeps taking writes: restarted under its old id it gets the leader's snapshot
marker, pulls the whole commit log (replication/pull/catch_up.py) and continues from raft."""

from __future__ import annotations

import json
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


def test_a_rebuilt_member_decides_later_entries_as_the_others(tmp_path: Path) -> None:
    """Regression (found by the chaos campaigns): a member rebuilt from a marker must hold
    every key the leader held at the marker, even one whose records up to the marker
    compaction removed because it was overwritten after it. Counters read their key, so a
    member missing it counted from zero and diverged."""
    cluster = LocalCluster(tmp_path / "cluster", extra_args=["--raft-compaction-entries", "50"])
    try:
        cluster.start()
        follower = cluster.followers()[0]
        index = cluster.nodes.index(follower)
        cluster.kill(index)
        shutil.rmtree(follower.data_dir)
        leader = cluster.leader()
        expected = 0
        # Increments spread over several markers, the last ones after the last marker.
        for round_ in range(12):
            response = http("POST", f"{leader.url}/v1/kv/ctr?op=incr&by=3")
            assert response.status == 200, response.body
            expected += 3
            for i in range(9):
                http("PUT", f"{leader.url}/v1/kv/filler/{i}", body=b"r%d" % round_)
        # The leader's compacted log keeps only ctr's last record (after the marker).
        compact = http("POST", f"{leader.url}/v1/admin/compact")
        assert compact.status == 200, compact.body
        cluster.start_node(index)
        cluster.wait_ready(timeout=60)
        response = http("POST", f"{leader.url}/v1/kv/ctr?op=incr&by=1")
        assert response.status == 200, response.body
        expected += 1
        last = response.json()["version"]
        views = {}
        for node in cluster.nodes:
            items = scan_all(node.url, b"", query=f"consistency=stale&min_version={last}")
            views[node.node_id] = {item["key"]: (item["version"], item["value"]) for item in items}
        assert views[follower.node_id][b"ctr"] == (last, b"%d" % expected)
        log = follower.log_path.read_text(errors="replace")
        assert "has compacted the range; installing its state" in log, log[-3000:]
        assert all(view == views[follower.node_id] for view in views.values()), views
    except (AssertionError, TimeoutError) as error:
        raise AssertionError(f"{error}\n{cluster.logs()}") from error
    finally:
        cluster.stop()


def test_a_wiped_member_rebuilds_from_a_marker_it_wrote_itself(tmp_path: Path) -> None:
    """A marker travels as written: a member that received A's marker later sends that
    same file, naming A as its author. A, wiped since, must fetch the state from another
    member instead of from itself (found by the chaos campaigns: it stalled)."""
    cluster = LocalCluster(tmp_path / "cluster", extra_args=["--raft-compaction-entries", "50"])
    try:
        cluster.start()
        leader = cluster.leader()
        carrier = cluster.nodes.index(cluster.followers()[0])
        # 1. The carrier misses 200 entries and catches up from a leader's marker.
        cluster.kill(carrier)
        for i in range(200):
            assert http("PUT", f"{leader.url}/v1/kv/m/{i % 20}", body=b"%d" % i).status == 200
        cluster.start_node(carrier)
        cluster.wait_ready(timeout=60)
        marker_path = cluster.nodes[carrier].data_dir / "raft" / "raft.marker"
        author_id = json.loads(marker_path.read_text())["node"]
        assert author_id != cluster.nodes[carrier].node_id  # it holds another's marker
        a = next(i for i, n in enumerate(cluster.nodes) if n.node_id == author_id)
        author = cluster.nodes[a]
        other = next(i for i in range(3) if i not in (a, carrier))
        # 2. The author is lost; the carrier leads (the other member is restarted until it
        #    does not: with no writes, either can win).
        cluster.kill(a)
        shutil.rmtree(author.data_dir)
        leader = cluster.leader(timeout=30)
        while leader.node_id != cluster.nodes[carrier].node_id:
            cluster.kill(other)
            cluster.start_node(other)
            leader = cluster.leader(timeout=30)
        # 3. The wiped author rejoins: the carrier sends it the marker the author wrote.
        cluster.start_node(a)
        cluster.wait_ready(timeout=60)
        log = author.log_path.read_text(errors="replace")
        assert "STALLED" not in log and "caught up:" in log, log[-3000:]
        response = http("PUT", f"{leader.url}/v1/kv/m/last", body=b"x")
        last = response.json()["version"]
        views = [
            {
                i["key"]: i["version"]
                for i in scan_all(n.url, b"m/", query=f"consistency=stale&min_version={last}")
            }
            for n in cluster.nodes
        ]
        assert views[0] == views[1] == views[2] and len(views[0]) == 21
    except (AssertionError, TimeoutError) as error:
        raise AssertionError(f"{error}\n{cluster.logs()}") from error
    finally:
        cluster.stop()
