"""Partitions with real packets (tests/chaos/rig/netns.py): each node in its own network
namespace, links cut by iptables rules inside the namespaces. Real node processes.

- an isolated leader: the majority elects a new leader that takes writes, the isolated
  one commits nothing; after the heal every node holds the same keys and versions;
- a one-way drop withholds only that direction's packets, and the cluster still
  takes writes meanwhile;
- ``stop()`` leaves no namespace, link or rule behind; leftovers of a crashed run are
  removed only when their owner is gone;
- a short partition campaign (linearizability, convergence, the exact counter).

Skipped unless root; as root a missing capability (iptables, namespaces) fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.rig import netns
from tests.chaos.rig.campaign import assert_passed, run_campaign
from tests.chaos.rig.cluster_checks import State, converged, put, put_ok, stale_state
from tests.chaos.rig.netns import (
    PREFIX,
    NamespacedCluster,
    NamespacedNode,
    available,
    cleanup_leftovers,
    host_links,
    leftovers,
    namespaces,
    run,
)
from tests.chaos.rig.workload import WorkloadConfig
from tests.support.cluster import NodeProcess, Response, wait_until


def require_netns() -> None:
    if os.geteuid() != 0:
        pytest.skip("network namespaces and iptables need root")
    reason = available()
    if reason is not None:
        pytest.fail(f"root, but namespaced networking does not work here: {reason}")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NamespacedCluster]:
    require_netns()
    running = NamespacedCluster(tmp_path / "cluster")
    token = running.topology.token
    try:
        running.start(60)
        yield running
    finally:
        running.stop()  # raises if a namespace or link is left
    assert leftovers(token) == []


# -- helpers -------------------------------------------------------------------------------


def leader_named_by(
    nodes: Sequence[NodeProcess], everyone: Sequence[NodeProcess], other_than: NodeProcess
) -> NodeProcess:
    """The leader every one of ``nodes`` names (``cluster.leader()`` would also wait for
    the isolated node), other than ``other_than``."""

    def agreed() -> NodeProcess | None:
        named = set()
        for node in nodes:
            status = node.status(timeout=2.0)
            leader = status.get("leader") if status else None
            named.add(leader["id"] if leader else None)
        if len(named) != 1 or None in named:
            return None
        (leader_id,) = named
        found = next(n for n in everyone if n.node_id == leader_id)
        return None if found is other_than else found

    result: NodeProcess = wait_until(agreed, 30, "the majority to agree on a new leader")
    return result


def stable_leader(nodes: Sequence[NodeProcess], quiet: float = 1.5) -> NodeProcess:
    """The leader every node has named, in the same term, for ``quiet`` seconds (after a
    heal the node that was cut off can still depose the leader with its raised term)."""
    seen: dict[str, Any] = {"view": None, "since": 0.0}

    def steady() -> NodeProcess | None:
        views = []
        for node in nodes:
            status = node.status(timeout=2.0)
            leader = status.get("leader") if status else None
            views.append((leader["id"], status["term"]) if status and leader else None)
        now = time.monotonic()
        view = views[0] if None not in views and len(set(views)) == 1 else None
        if view is None or view != seen["view"]:
            seen.update(view=view, since=now)
            return None
        if now - seen["since"] < quiet:
            return None
        return next(n for n in nodes if n.node_id == view[0])

    result: NodeProcess = wait_until(steady, 30, "a stable leader")
    return result


def probe_write(nodes: Sequence[NodeProcess], key: str, value: bytes, timeout: float) -> State:
    """Write through whichever node accepts first; each attempt uses a key of its own
    (``key``-N), since one that timed out may still commit later. The acknowledged one."""
    attempts = iter(range(1_000_000))

    def attempt() -> State | None:
        for node in nodes:
            name = f"{key}-{next(attempts)}"
            answer = put(node.url, name, value, timeout=3)
            if answer is not None and answer.status == 200:
                return {name.encode(): (answer.json()["version"], value)}
            print(f"{name} via {node.node_id}: {answer.status if answer else 'no answer'}")
        return None

    result: State = wait_until(attempt, timeout, f"some node to accept {key}", 0.2)
    return result


_RECEIVER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
s.settimeout(float(sys.argv[3]))
print("ready", flush=True)
try:
    print(s.recv(100).decode(), flush=True)
except TimeoutError:
    print("nothing", flush=True)
"""

_SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 0))
for _ in range(5):
    s.sendto(b"hello", (sys.argv[2], int(sys.argv[3])))
    time.sleep(0.05)
"""


def in_namespace(node: NamespacedNode, script: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", node.namespace, sys.executable, "-S", "-c", script, *args]


def udp_delivered(a: NamespacedNode, b: NamespacedNode, wait: float = 1.5) -> bool:
    """Whether a datagram ``a`` sends from its address reaches ``b`` (the packet level,
    where TCP's acknowledgements do not blur one-way faults)."""
    port = "5999"
    receiver = subprocess.Popen(
        in_namespace(b, _RECEIVER, b.ip, port, str(wait)),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert receiver.stdout is not None
        assert receiver.stdout.readline().strip() == "ready"
        run(in_namespace(a, _SENDER, a.ip, b.ip, port))
        out, _ = receiver.communicate(timeout=wait + 10)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    return out.strip() == "hello"


def netns_inode(name: str) -> int:
    return os.stat(f"/run/netns/{name}").st_ino


# -- tests ---------------------------------------------------------------------------------


def test_isolated_leader_commits_nothing_and_all_converge_after_heal(
    cluster: NamespacedCluster,
) -> None:
    net, prefix = cluster.net, "iso/"
    nodes = cluster.namespaced_nodes
    # Every node runs in its own namespace, on its own address.
    assert len({n.ip for n in nodes}) == len(nodes)
    for node in nodes:
        assert node.proc is not None
        assert os.stat(f"/proc/{node.proc.pid}/ns/net").st_ino == netns_inode(node.namespace)
        assert node.url == f"http://{node.ip}:8000"
    status = nodes[0].status()
    assert status is not None
    assert sorted(m["raft_address"] for m in status["members"]) == sorted(
        n.raft_address for n in nodes
    )

    old = cluster.leader()
    majority = [n for n in cluster.nodes if n is not old]
    expected: State = {}
    for i in range(3):
        key = f"{prefix}before-{i}"
        expected[key.encode()] = (put_ok(old.url, key, b"before"), b"before")
    converged(cluster.nodes, prefix, expected, timeout=15)

    net.isolate(old)
    old_ip = cluster.namespaced(old).ip
    rules = net.rules()
    assert len(rules[old.node_id]) == 2  # from each of the others
    for other in majority:
        assert rules[other.node_id] == [f"-A INPUT -s {old_ip}/32 -j DROP"]

    isolated: dict[str, Response | None] = {}
    writer = threading.Thread(
        target=lambda: isolated.update(answer=put(old.url, f"{prefix}isolated", b"lost")),
        daemon=True,
    )
    writer.start()

    new = leader_named_by(majority, cluster.nodes, other_than=old)
    for i in range(5):
        key = f"{prefix}majority-{i}"
        expected[key.encode()] = (put_ok(new.url, key, b"majority"), b"majority")

    writer.join(timeout=30)
    assert not writer.is_alive()
    answer = isolated["answer"]
    assert answer is None or answer.status != 200, answer.body
    # Nothing crossed: the isolated node has not seen the majority's writes.
    assert not any(k.startswith(f"{prefix}majority".encode()) for k in stale_state(old, prefix))

    net.heal()
    assert net.rules() == {n.node_id: [] for n in cluster.nodes}
    state = converged(cluster.nodes, prefix, expected, timeout=40)
    assert state == expected, "a node holds a write the majority never acknowledged"
    leader = stable_leader(cluster.nodes)
    expected[f"{prefix}after".encode()] = (put_ok(leader.url, f"{prefix}after", b"after"), b"after")
    converged(cluster.nodes, prefix, expected, timeout=20)


def test_one_way_drop_and_stop_removes_everything(cluster: NamespacedCluster) -> None:
    net, prefix = cluster.net, "oneway/"
    leader = cluster.namespaced(cluster.leader())
    follower = next(cluster.namespaced(n) for n in cluster.nodes if n is not leader)
    assert udp_delivered(follower, leader) and udp_delivered(leader, follower)

    net.drop(follower, leader)
    assert net.blocked() == {(follower.node_id, leader.node_id): "drop"}
    assert net.rules()[leader.node_id] == [f"-A INPUT -s {follower.ip}/32 -j DROP"]
    assert net.rules()[follower.node_id] == []
    assert not udp_delivered(follower, leader)
    assert udp_delivered(leader, follower)

    # Two of three nodes still reach each other both ways: the cluster takes writes.
    expected: State = {}
    for i in range(3):
        key = f"{prefix}during-{i}"
        expected.update(probe_write(cluster.nodes, key, b"x", timeout=30))

    net.restore(follower, leader)
    assert net.blocked() == {}
    assert udp_delivered(follower, leader)
    net.heal()
    converged(cluster.nodes, prefix, expected, timeout=40)

    # stop() removes the rules with the namespaces, the bridge and every veth.
    net.partition([[leader], [follower]])
    assert any(net.rules().values())
    token = cluster.topology.token
    names = [cluster.topology.hub, *(n.namespace for n in cluster.namespaced_nodes)]
    assert set(names) <= set(namespaces())
    assert cluster.topology.host_link in {link["name"] for link in host_links()}
    cluster.stop()
    assert not set(names) & set(namespaces())
    assert not [n for n in namespaces() if token in n]
    assert not [link for link in host_links() if token in link["name"]]
    assert all(node.proc is not None and node.proc.poll() is not None for node in cluster.nodes)
    assert leftovers(token) == []


def test_leftovers_are_removed_only_when_their_owner_is_gone() -> None:
    require_netns()
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = f"{PREFIX}-{gone.pid}-{os.urandom(3).hex()}-n0"
    alive = f"{PREFIX}-{os.getpid()}-{os.urandom(3).hex()}-n0"
    foreign = f"rkvx-{gone.pid}-{os.urandom(3).hex()}-n0"  # not our prefix
    dead_link = f"{PREFIX}{os.urandom(3).hex()}"
    created: list[str] = []
    try:
        for name in (dead, alive, foreign):
            run(["ip", "netns", "add", name])
            created.append(name)
        run(["ip", "link", "add", dead_link, "type", "veth", "peer", "name", dead_link + "p"])
        run(["ip", "link", "set", dead_link, "alias", f"{PREFIX}-owner={gone.pid}"])
        removed = cleanup_leftovers()
        assert f"netns {dead}" in removed and f"link {dead_link}" in removed
        present = set(namespaces())
        assert dead not in present
        assert alive in present and foreign in present
        assert dead_link not in {link["name"] for link in host_links()}
    finally:
        for name in created:
            run(["ip", "netns", "del", name], check=False)
        run(["ip", "link", "del", dead_link], check=False)


def test_a_failed_set_up_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second node's address cannot be added: the constructor removes the hub, the
    first node's namespace and the host's link before raising."""
    require_netns()
    created: list[str] = []
    real_run = netns.run

    def failing_run(args: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if list(args[:3]) == ["ip", "netns", "add"]:
            created.append(args[3])
        if "addr" in args and args[2].endswith("-n1"):
            raise netns.NetnsError("injected failure")
        return real_run(args, **kwargs)

    monkeypatch.setattr(netns, "run", failing_run)
    with pytest.raises(netns.NetnsError, match="injected failure"):
        NamespacedCluster(tmp_path / "cluster")
    monkeypatch.undo()
    assert len(created) == 3  # the hub, n0, n1
    match = netns.NAMESPACE_RE.match(created[0])
    assert match is not None
    token = match.group(2)
    assert not set(created) & set(namespaces())
    assert leftovers(token) == []


@pytest.mark.timeout(240)
def test_a_partition_campaign_on_namespaces(cluster: NamespacedCluster) -> None:
    result = run_campaign(
        cluster,
        cluster.net,
        duration=30.0,
        nemeses=["partition"],
        seed=5,
        config=WorkloadConfig(keys=4, workers=5),
        progress=print,
    )
    summary = result.summary()
    print(summary)
    assert_passed(result)
