"""Data larger than memory: three nodes, each inside a memory cgroup of 256 MiB, hold
more than four times that, and a wiped follower rebuilds under the same cap while a
writer keeps writing. No node is OOM-killed, every acknowledged key reads back on
every node, and the rebuilt member converges.

The nodes run on their default settings: what bounds their memory is those settings,
not the data. The limit counts their anonymous memory and the page cache they bring
in; LMDB's pages are file-backed and the kernel reclaims them, so only a node whose
own structures grow with the data would be killed.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import memcg
from tests.support.cluster import LocalCluster, NodeProcess, http, scan_all, wait_until

LIMIT_BYTES = 256 * 1024 * 1024
VALUE_BYTES = 64 * 1024
PUTS_PER_TXN = 16  # 1 MiB of values per transaction
KEYS = 4 * LIMIT_BYTES // VALUE_BYTES + 1024  # more than 4x a node's cap, per replica
IN_FLIGHT = 4


def value_of(i: int) -> str:
    return (f"{i:08d}" * (VALUE_BYTES // 8))[:VALUE_BYTES]


def key_of(i: int) -> str:
    return f"big/{i:06d}"


def load(leader: NodeProcess, keys: int) -> None:
    url = f"{leader.url}/v1/txn?encoding=utf-8"
    next_start = [0]
    lock = threading.Lock()
    errors: list[str] = []

    def worker() -> None:
        while not errors:
            with lock:
                start = next_start[0]
                next_start[0] += PUTS_PER_TXN
            if start >= keys:
                return
            ops = [
                {"op": "put", "key": key_of(i), "value": value_of(i)}
                for i in range(start, min(start + PUTS_PER_TXN, keys))
            ]
            answer = http("POST", url, json.dumps({"success": ops}).encode(), timeout=120)
            if answer.status != 200:
                errors.append(f"txn at {start}: {answer.status} {answer.body[:300]!r}")

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(IN_FLIGHT)]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    while any(t.is_alive() for t in threads):
        time.sleep(5)
        done = min(next_start[0], keys)
        print(f"  {time.monotonic() - started:5.0f}s loaded {done}/{keys} keys", flush=True)
    assert errors == [], errors[:3]


def scan_pages(url: str, prefix: str) -> Iterator[tuple[str, str]]:
    """Every (key, value) under ``prefix`` on one node, a page at a time (stale reads)."""
    after: str | None = None
    while True:
        query = f"prefix={urllib.parse.quote(prefix)}&limit=32&encoding=utf-8&consistency=stale"
        if after is not None:
            query += f"&start_after={urllib.parse.quote(after)}"
        page = http("GET", f"{url}/v1/kv?{query}", timeout=60)
        assert page.status == 200, (url, page.status, page.body[:300])
        body = page.json()
        for item in body["items"]:
            yield item["key"], item["value"]
        after = body["next"]
        if after is None:
            return


@pytest.mark.timeout(900)
def test_three_nodes_under_256_mib_each_hold_four_times_that_and_rebuild(tmp_path: Path) -> None:
    reason = memcg.unavailable()
    if reason is not None:
        pytest.skip(f"no memory cgroup can be made here: {reason}")
    name = f"rkv-test-{tmp_path.name}-{time.monotonic_ns()}"
    groups = [memcg.MemoryCgroup(f"{name}-n{i}", LIMIT_BYTES) for i in range(3)]
    cluster = LocalCluster(tmp_path / "cluster", memory_groups=groups)
    stop = threading.Event()
    acknowledged: dict[bytes, bytes] = {}
    failures: list[str] = []

    def writer() -> None:
        i = 0
        while not stop.is_set():
            key, value = b"w/%06d" % i, b"w%d" % i
            try:
                leader = cluster.leader(timeout=30)
                answer = http("PUT", f"{leader.url}/v1/kv/w/{i:06d}", body=value, timeout=30)
            except (OSError, TimeoutError) as exc:
                failures.append(repr(exc))
                continue
            if answer.status == 200:
                acknowledged[key] = value
                i += 1
            else:
                failures.append(f"{answer.status} {answer.body[:200]!r}")
            time.sleep(0.02)

    try:
        cluster.start(60)
        leader = cluster.leader()
        print(f"loading {KEYS * VALUE_BYTES / 2**20:.0f} MiB per replica", flush=True)
        load(leader, KEYS)
        follower = cluster.followers()[0]
        index = cluster.nodes.index(follower)
        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        wait_until(lambda: len(acknowledged) >= 50, 60, "writes before the wipe")
        cluster.kill(index)
        shutil.rmtree(follower.data_dir)
        cluster.start_node(index)
        leader = cluster.leader(timeout=60)

        def rebuilt() -> bool:
            mine, theirs = follower.status(), leader.status()
            if not mine or not theirs:
                return False
            try:
                ready = http("GET", follower.url + "/readyz", timeout=5).status == 200
            except OSError:
                return False
            return ready and mine["applied_offset"] >= theirs["applied_offset"] - 100

        wait_until(rebuilt, 600, "the wiped follower's rebuild", interval=1.0)
        wait_until(lambda: len(acknowledged) >= 100, 60, "writes after the rebuild")
        stop.set()
        thread.join(60)
        kills = {g.path.name: g.oom_kills() for g in groups}
        peaks = {g.path.name: g.peak_bytes() // 2**20 for g in groups}
        print(f"OOM kills {kills}; peak charge MiB {peaks}", flush=True)
        assert all(n.alive for n in cluster.nodes), cluster.logs()
        assert sum(kills.values()) == 0, kills
        # Only refusals that a write was not applied are tolerated (an election).
        assert all("503" in f for f in failures), failures[:5]
        cluster.wait_ready(60)
        for node in cluster.nodes:
            written = scan_all(node.url, b"w/", query="consistency=stale")
            assert {i["key"]: i["value"] for i in written} == acknowledged, node.node_id
            seen = 0
            for key, value in scan_pages(node.url, "big/"):
                assert value == value_of(int(key[4:])), (node.node_id, key)
                seen += 1
            assert seen == KEYS, (node.node_id, seen)
    except (AssertionError, TimeoutError) as error:
        raise AssertionError(f"{error}\n{cluster.logs()}") from error
    finally:
        stop.set()
        cluster.stop()
        for group in groups:
            group.remove()
