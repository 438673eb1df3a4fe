"""Membership changes at run time with real processes: a fourth node joins with
`rkv node --join` while writes run and ends with every key and version, an
original follower is removed, a wiped follower rejoins with --join, and unsafe
or malformed requests are refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tests.support.cluster import REPO, LocalCluster, NodeProcess, http, scan_all, wait_until


class Writer:
    """Writes keys to the leader in a thread; records acknowledged versions and failures."""

    def __init__(self, cluster: LocalCluster, prefix: str) -> None:
        self.cluster = cluster
        self.prefix = prefix
        self.stop = threading.Event()
        self.acknowledged: dict[bytes, int] = {}
        self.failures: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            leader = self.cluster.leader()
            try:
                response = http("PUT", f"{leader.url}/v1/kv/{self.prefix}/{i:05d}", body=b"v%d" % i)
            except OSError as exc:
                self.failures.append(repr(exc))
                continue
            if response.status == 200:
                self.acknowledged[b"%s/%05d" % (self.prefix.encode(), i)] = response.json()[
                    "version"
                ]
            else:
                self.failures.append(f"{response.status} {response.body[:200]!r}")
            i += 1

    def start(self) -> Writer:
        self.thread.start()
        return self

    def wait_for(self, count: int, what: str) -> None:
        wait_until(lambda: len(self.acknowledged) >= count, 90, what)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(30)


def member_ids(node: NodeProcess) -> set[str] | None:
    status = node.status()
    return None if status is None else {m["id"] for m in status["members"]}


def assert_same_state(nodes: list[NodeProcess], writer: Writer) -> None:
    """Every node holds every acknowledged key with its version; with the writer
    stopped, nothing else either."""
    acknowledged = dict(writer.acknowledged)
    last = max(acknowledged.values())
    prefix = writer.prefix.encode() + b"/"
    for node in nodes:
        items = scan_all(node.url, prefix, query=f"consistency=stale&min_version={last}")
        view = {item["key"]: item["version"] for item in items}
        if writer.thread.is_alive():
            view = {key: version for key, version in view.items() if key in acknowledged}
        assert view == acknowledged, (node.node_id, len(view), len(acknowledged))


def post_member(url: str, body: Any) -> Any:
    return http(
        "POST",
        f"{url}/v1/cluster/members",
        body=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )


def test_add_a_fourth_node_then_remove_a_follower(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "cluster", extra_args=["--raft-compaction-entries", "50"])
    writer = Writer(cluster, "add")
    try:
        cluster.start()
        writer.start().wait_for(150, "writes before the join")
        leader = cluster.leader()
        new = cluster.add_node("n3", cluster.followers()[0].url)
        writer.wait_for(len(writer.acknowledged) + 200, "writes while n3 joins")
        wait_until(
            lambda: all(member_ids(n) == {"n0", "n1", "n2", "n3"} for n in cluster.live()),
            60,
            "every node to list 4 members",
        )
        cluster.wait_ready(timeout=60)
        writer.wait_for(len(writer.acknowledged) + 100, "writes with 4 members")
        assert_same_state(cluster.live(), writer)
        listed = http("GET", f"{new.url}/v1/cluster/members").json()["members"]
        assert {m["id"]: m["raft_address"] for m in listed}["n3"] == new.raft_address

        # remove one of the original followers (through a follower: 307 to the leader)
        leader = cluster.leader()
        victim = next(n for n in cluster.followers() if n is not new)
        other = next(n for n in cluster.live() if n not in (leader, victim))
        redirected = http("DELETE", f"{other.url}/v1/cluster/members/{victim.node_id}")
        assert redirected.status == 307, redirected.body
        removed = http("DELETE", redirected.headers["Location"])
        assert removed.status == 200, removed.body
        assert removed.json()["removed"] is True
        cluster.kill(cluster.nodes.index(victim))
        remaining = cluster.live()
        expected = {"n0", "n1", "n2", "n3"} - {victim.node_id}
        wait_until(
            lambda: all(member_ids(n) == expected for n in remaining),
            30,
            "the removed id to disappear",
        )
        writer.wait_for(len(writer.acknowledged) + 200, "writes with the remaining 3")
        writer.finish()
        assert writer.failures == [], writer.failures[:5]
        assert_same_state(remaining, writer)
        log = new.log_path.read_text(errors="replace")
        assert "STALLED" not in log, log[-2000:]
    except (AssertionError, TimeoutError) as error:
        raise AssertionError(f"{error}\n{cluster.logs()}") from error
    finally:
        writer.stop.set()
        cluster.stop()


def test_a_wiped_follower_rejoins_with_join(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "cluster", extra_args=["--raft-compaction-entries", "50"])
    writer = Writer(cluster, "rj")
    try:
        cluster.start()
        follower = cluster.followers()[0]
        index = cluster.nodes.index(follower)
        writer.start().wait_for(150, "writes before the wipe")
        cluster.kill(index)
        shutil.rmtree(follower.data_dir)
        writer.wait_for(400, "writes while it is gone")
        join_url = next(n for n in cluster.live()).url
        follower.args = cluster.join_args(follower, join_url)
        cluster.start_node(index)
        writer.wait_for(600, "writes while it rebuilds")
        cluster.wait_ready(timeout=60)
        writer.finish()
        assert writer.failures == [], writer.failures[:5]
        assert_same_state(cluster.nodes, writer)
        assert member_ids(follower) == {"n0", "n1", "n2"}
        log = follower.log_path.read_text(errors="replace")
        assert "already a member" in log and "STALLED" not in log, log[-2000:]
    except (AssertionError, TimeoutError) as error:
        raise AssertionError(f"{error}\n{cluster.logs()}") from error
    finally:
        writer.stop.set()
        cluster.stop()


def rkv(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )


def test_refusals(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "single", size=1, extra_args=["--insecure-dev-mode"])
    try:
        cluster.start()
        (node,) = cluster.nodes
        unknown = http("DELETE", f"{node.url}/v1/cluster/members/nobody")
        assert unknown.status == 404 and unknown.json()["code"] == "member_not_found"
        last = http("DELETE", f"{node.url}/v1/cluster/members/n0")
        assert last.status == 409 and last.json()["code"] == "last_member", last.body
        for body in ({}, {"id": "x", "raft_address": "nope", "url": "http://h:1"}, [1]):
            bad = post_member(node.url, body)
            assert bad.status == 400, (body, bad.body)
        taken = post_member(
            node.url, {"id": "n9", "raft_address": node.raft_address, "url": "http://h:1"}
        )
        assert taken.status == 409 and taken.json()["code"] == "address_in_use", taken.body
        same = post_member(
            node.url, {"id": "n0", "raft_address": node.raft_address, "url": node.url}
        )
        assert same.status == 200 and same.json()["added"] is False, same.body
        # the CLI: exit 1 when refused, 0 with the member list
        listed = rkv("cluster", "members", "--url", node.url)
        assert listed.returncode == 0 and "n0" in listed.stdout, listed
        refused = rkv("cluster", "remove", "n0", "--url", node.url)
        assert refused.returncode == 1 and "last_member" in refused.stderr, refused
        missing = rkv("cluster", "remove", "nobody", "--url", node.url)
        assert missing.returncode == 1, missing
        # still serving
        assert http("PUT", f"{node.url}/v1/kv/k", body=b"v").status == 200
    except (AssertionError, TimeoutError) as error:
        raise AssertionError(f"{error}\n{cluster.logs()}") from error
    finally:
        cluster.stop()
