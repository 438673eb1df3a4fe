"""Failover with real processes: kill -9 of the leader, of every node, of one and two nodes.

What a client was told is the contract checked here:

- 200: the write is durable and visible to every later linearizable read, on every live
  node, with the version it was given, also after restarts;
- 503 ``not_applied`` (and a refused connection): the write was definitely not applied,
  so the key never appears;
- 503 ``unknown_outcome``, a reset connection or a time-out: either is fine.
"""

from __future__ import annotations

import functools
import threading
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass, field
from http.client import HTTPException
from typing import Any

import pytest

from tests.support.cluster import LocalCluster, NodeProcess, http, scan_all, wait_until

# 503 codes a write may get while the cluster changes leader or lacks a majority.
UNAVAILABLE_CODES = {"not_applied", "unknown_outcome", "overloaded", "node_not_ready"}


@dataclass
class WriteLog:
    """What each write attempt was told, by key (keys are never reused)."""

    acked: dict[bytes, tuple[int, bytes]] = field(default_factory=dict)  # key -> (version, value)
    not_applied: set[bytes] = field(default_factory=set)  # 503 not_applied
    refused: set[bytes] = field(default_factory=set)  # the connection was refused
    maybe: set[bytes] = field(default_factory=set)  # unknown outcome, reset, time-out
    unexpected: list[tuple[bytes, int, bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ack_count(self) -> int:
        with self.lock:
            return len(self.acked)


def write_one(url: str, key: bytes, value: bytes, log: WriteLog) -> None:
    try:
        response = http("PUT", f"{url}/v1/kv/{key.decode()}", body=value, timeout=15.0)
    except urllib.error.URLError as error:
        with log.lock:
            if isinstance(error.reason, ConnectionRefusedError):
                log.refused.add(key)  # never reached the node
            else:
                log.maybe.add(key)
        return
    except (OSError, HTTPException):
        with log.lock:
            log.maybe.add(key)  # the node died or hung mid-request
        return
    with log.lock:
        if response.status == 200:
            log.acked[key] = (response.json()["version"], value)
            return
        code = response.json().get("code") if response.status == 503 else None
        if code == "not_applied":
            log.not_applied.add(key)
        elif code in UNAVAILABLE_CODES:
            log.maybe.add(key)
        else:
            log.unexpected.append((key, response.status, response.body[:300]))


class Writers:
    """Threads writing distinct keys round-robin over the nodes ``urls()`` returns (the live
    ones: a killed node is dropped from the rotation once the test has reaped it)."""

    def __init__(self, prefix: str, urls: Callable[[], list[str]], threads: int = 3) -> None:
        self.log = WriteLog()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(prefix, urls, t, threads), daemon=True)
            for t in range(threads)
        ]

    def _run(self, prefix: str, urls: Callable[[], list[str]], t: int, step: int) -> None:
        i = t
        while not self._stop.is_set():
            key = f"{prefix}{i:07d}".encode()
            targets = urls()
            if targets:
                write_one(targets[i % len(targets)], key, b"value-%d" % i, self.log)
            else:
                self._stop.wait(0.05)  # every node is down: nothing to write to
            i += step

    def __enter__(self) -> Writers:
        for thread in self._threads:
            thread.start()
        return self

    def wait_acks(self, count: int, timeout: float, what: str) -> None:
        wait_until(lambda: self.log.ack_count() >= count, timeout, what)

    def stop(self) -> WriteLog:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
            assert not thread.is_alive(), "a writer thread hung (client time-out is 15 s)"
        return self.log

    def __exit__(self, *exc: object) -> None:
        self.stop()


def as_state(items: list[dict[str, Any]]) -> dict[bytes, tuple[int, bytes]]:
    keys = [item["key"] for item in items]
    assert keys == sorted(set(keys)), "a scan returned keys out of order or twice"
    return {item["key"]: (item["version"], item["value"]) for item in items}


def check_against_log(state: dict[bytes, tuple[int, bytes]], log: WriteLog, where: str) -> None:
    missing = {k: v for k, v in log.acked.items() if state.get(k) != v}
    assert not missing, (
        f"{where}: {len(missing)} acknowledged writes missing or changed, e.g. "
        f"{sorted(missing.items())[:5]} -> {[state.get(k) for k in sorted(missing)[:5]]}"
    )
    # node/errors.py: not_applied means "definitely not applied; retry is safe". (raft/
    # consensus.py also maps pysyncobj's LEADER_CHANGED to it, which a forwarded write can
    # get although the new leader commits it: this assertion is where that would show.)
    resurrected = sorted(log.not_applied & state.keys())
    assert not resurrected, f"{where}: writes answered not_applied are present: {resurrected[:10]}"
    refused = sorted(log.refused & state.keys())
    assert not refused, f"{where}: writes whose connection was refused are present: {refused[:10]}"
    attempted = log.acked.keys() | log.maybe | log.not_applied | log.refused
    phantom = sorted(state.keys() - attempted)
    assert not phantom, f"{where}: keys nobody wrote: {phantom[:10]}"


def stale_state_at(node: NodeProcess, prefix: bytes, min_version: int, timeout: float) -> Any:
    """A stale scan on ``node`` once it has applied ``min_version`` (bounded wait)."""

    def attempt() -> dict[bytes, tuple[int, bytes]] | None:
        try:
            return as_state(
                scan_all(node.url, prefix, query=f"consistency=stale&min_version={min_version}")
            )
        except (AssertionError, OSError):
            return None  # not caught up yet (503 node_not_ready) or not serving yet

    return wait_until(attempt, timeout, f"{node.node_id} to apply offset {min_version}", 0.3)


def index_of(cluster: LocalCluster, node: NodeProcess) -> int:
    return cluster.nodes.index(node)


def test_kill_leader_during_writes(cluster: LocalCluster) -> None:
    """kill -9 of the leader under write load: a new leader serves writes, nothing
    acknowledged is lost, and the restarted node converges to the same state."""
    prefix = "failover/"
    old = cluster.leader()
    with Writers(prefix, lambda: [n.url for n in cluster.live()]) as writers:
        writers.wait_acks(60, 20, "writes before the kill")
        cluster.kill(index_of(cluster, old))
        new = cluster.wait_for_new_leader(old)
        acked_at_election = writers.log.ack_count()
        writers.wait_acks(acked_at_election + 60, 30, "writes after the new leader")
        log = writers.stop()
    assert not log.unexpected, log.unexpected[:5]

    direct = http("PUT", f"{new.url}/v1/kv/{prefix}direct", body=b"after-failover")
    assert direct.status == 200, direct.body
    log.acked[f"{prefix}direct".encode()] = (direct.json()["version"], b"after-failover")

    survivors = [n for n in cluster.nodes if n is not old]
    reference: dict[bytes, tuple[int, bytes]] = {}
    for node in survivors:
        state = as_state(scan_all(node.url, prefix.encode()))  # linearizable (default)
        check_against_log(state, log, f"linearizable scan on {node.node_id}")
        if reference:
            assert state == reference, f"{node.node_id} disagrees with {survivors[0].node_id}"
        reference = state
        # Point reads too, for the most recent acknowledged keys.
        for key in sorted(log.acked)[-30:]:
            got = http("GET", f"{node.url}/v1/kv/{key.decode()}")
            assert got.status == 200, (node.node_id, key, got.body)
            assert got.body == log.acked[key][1]
            assert int(got.headers["Rkv-Version"]) == log.acked[key][0]

    cluster.restart(index_of(cluster, old))
    highest = max(version for version, _ in reference.values())
    assert highest >= max(version for version, _ in log.acked.values())
    restarted = stale_state_at(old, prefix.encode(), highest, timeout=30)
    check_against_log(restarted, log, f"stale scan on restarted {old.node_id}")
    assert restarted == reference, "the restarted node did not converge to the others' state"


def test_kill_all_nodes_and_restart(cluster: LocalCluster) -> None:
    """kill -9 of all three nodes (while writes are in flight), then restart all: every
    acknowledged write is there with the same version, and versions keep increasing."""
    prefix = "killall/"
    with Writers(prefix, lambda: [n.url for n in cluster.live()]) as writers:
        writers.wait_acks(200, 30, "writes before the kill")
        for i in range(cluster.size):
            cluster.kill(i)
        log = writers.stop()
    assert not log.unexpected, log.unexpected[:5]
    assert len(log.acked) >= 200

    for i in range(cluster.size):
        cluster.start_node(i)
    cluster.wait_ready(timeout=45)
    cluster.leader()

    states = [as_state(scan_all(n.url, prefix.encode())) for n in cluster.nodes]
    for node, state in zip(cluster.nodes, states, strict=True):
        check_against_log(state, log, f"{node.node_id} after restarting every node")
        assert state == states[0], f"{node.node_id} disagrees with n0 after the restart"

    highest = max(version for version, _ in states[0].values())
    after = http("PUT", f"{cluster.nodes[1].url}/v1/kv/{prefix}after-restart", body=b"x")
    assert after.status == 200, after.body
    assert after.json()["version"] > highest, "a version was handed out twice after restart"


def expect_fast_503(request: Callable[[], Any], what: str) -> str:
    """The request must come back (client time-out 15 s) with a 503 and a known code."""
    try:
        response = request()
    except OSError as error:  # socket time-out (possibly wrapped in URLError), reset...
        pytest.fail(f"{what}: no HTTP answer within the 15 s client time-out: {error!r}")
    assert response.status == 503, (what, response.status, response.body[:300])
    code: str = response.json()["code"]
    assert code in {"not_applied", "unknown_outcome", "node_not_ready"}, (what, response.body)
    return code


def test_one_node_down_then_two(cluster: LocalCluster) -> None:
    """One follower down: writes and linearizable reads continue through the two others.
    Two down: the survivor answers writes and linearizable reads with a 503 (not a hang),
    both while it still believes it leads and after it steps down, and still serves stale
    reads of the last value."""
    leader = cluster.leader()
    first, second = cluster.followers()
    cluster.kill(index_of(cluster, first))

    last_version = 0
    for i in range(10):
        for node in (leader, second):
            key = f"degraded/{node.node_id}/{i}"
            put = http("PUT", f"{node.url}/v1/kv/{key}", body=b"v%d" % i)
            assert put.status == 200, (node.node_id, put.body)
            last_version = put.json()["version"]
            for reader in (leader, second):
                got = http("GET", f"{reader.url}/v1/kv/{key}")
                assert got.status == 200 and got.body == b"v%d" % i, (reader.node_id, got)
    final = http("PUT", f"{second.url}/v1/kv/degraded/last", body=b"the-last-value")
    assert final.status == 200, final.body
    last_version = final.json()["version"]

    cluster.kill(index_of(cluster, second))
    survivor = leader

    def unavailable_round(label: str) -> None:
        for i in range(2):
            key = f"degraded/minority/{label}{i}"
            expect_fast_503(
                functools.partial(http, "PUT", f"{survivor.url}/v1/kv/{key}", body=b"x"),
                f"write on the survivor ({label})",
            )
            expect_fast_503(
                functools.partial(http, "GET", f"{survivor.url}/v1/kv/degraded/last"),
                f"linearizable read on the survivor ({label})",
            )
        stale = http("GET", f"{survivor.url}/v1/kv/degraded/last?consistency=stale")
        assert stale.status == 200 and stale.body == b"the-last-value", (label, stale)
        pinned = http(
            "GET",
            f"{survivor.url}/v1/kv/degraded/last?consistency=stale&min_version={last_version}",
        )
        assert pinned.status == 200 and pinned.body == b"the-last-value", (label, pinned)

    unavailable_round("just-after-kill-")
    # The deposed leader steps down after leader_fallback_timeout without a majority.
    wait_until(
        lambda: (survivor.status() or {}).get("role") not in (None, "leader"),
        20,
        "the survivor to step down",
    )
    unavailable_round("after-step-down-")
    stale_keys = [i["key"] for i in scan_all(survivor.url, b"degraded/", query="consistency=stale")]
    assert not [k for k in stale_keys if b"minority" in k], stale_keys


def test_write_log_checker_can_fail() -> None:
    """The checker itself: a lost acknowledged write, a resurrected not_applied write and a
    key nobody wrote are each reported (guards the failover assertions against vacuity)."""
    log = WriteLog()
    log.acked[b"a"] = (1, b"va")
    log.not_applied.add(b"b")
    good = {b"a": (1, b"va")}
    check_against_log(good, log, "good")
    log.refused.add(b"c")
    for bad in (
        {},
        {**good, b"b": (2, b"vb")},
        {**good, b"c": (2, b"vc")},
        {**good, b"z": (3, b"vz")},
    ):
        with pytest.raises(AssertionError):
            check_against_log(bad, log, "bad")
