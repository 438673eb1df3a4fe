"""A ``LocalCluster`` whose raft links all go through a ``RaftNetwork`` (netfault.py),
and leader waits that suit a cluster under network faults (``agreed_leader``,
``wait_stable``). netfault.py re-exports all three.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from tests.support.cluster import LocalCluster, NodeProcess

if TYPE_CHECKING:  # at run time imported where used: netfault.py imports this module
    from tests.chaos.rig.netfault import RaftNetwork


class ProxiedCluster(LocalCluster):
    """``LocalCluster`` (same API: start, leader, kill, pause, restart, start_node, stop)
    with every raft link through ``self.net``, a ``RaftNetwork`` started with the
    cluster and closed by ``stop()``. Nodes added with ``--join`` are not supported."""

    _net: RaftNetwork | None

    def __post_init__(self) -> None:
        self._net = None
        try:
            super().__post_init__()
        except BaseException:
            if self._net is not None:
                self._net.close()
            raise

    @property
    def net(self) -> RaftNetwork:
        if self._net is None:
            raise RuntimeError("the cluster has no network yet")
        return self._net

    def _args(self, node: NodeProcess) -> list[str]:
        if self._net is None:  # first call: every node (and port) exists now
            # Imported here: netfault.py imports this module to re-export it.
            from tests.chaos.rig.netfault import RaftNetwork  # noqa: PLC0415

            self._net = RaftNetwork(
                {n.node_id: n.raft_address for n in self.nodes},
                secret=self.secret_file.read_bytes().strip(),
            ).start()
        return self._net.rewrite_peer_args(node.node_id, super()._args(node))

    def start(self, timeout: float = 30.0) -> ProxiedCluster:
        """Start every node, wait until they are ready and every pair is connected."""
        super().start(timeout)
        self.wait_connected(timeout)
        return self

    def wait_connected(
        self, timeout: float = 15.0, nodes: Sequence[NodeProcess] | None = None
    ) -> None:
        """Wait until every pair of ``nodes`` (default: the live ones) has a proxied
        connection open. pysyncobj retries a failed connection only every 5 s, so a
        cluster can be ready (a leader and one follower) with a pair still unconnected;
        faults injected then would not do what a test means."""
        net = self.net
        targets = list(self.live() if nodes is None else nodes)
        pairs = [(a, b) for i, a in enumerate(targets) for b in targets[i + 1 :]]
        deadline = time.monotonic() + timeout
        while True:
            missing = [(a.node_id, b.node_id) for a, b in pairs if not net.open_connections(a, b)]
            if not missing:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"raft pairs not connected after {timeout}s: {missing}")
            time.sleep(0.05)

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            if self._net is not None:
                self._net.close()

    def add_node(self, node_id: str, join_url: str) -> NodeProcess:
        raise NotImplementedError("a node added with --join would bypass the proxies")

    def expected_members(self, node: NodeProcess) -> list[str]:
        """The raft addresses ``node`` should list as members (itself and its peers)."""
        return self.net.member_view(node)

    def view_problems(self, nodes: Iterable[NodeProcess] | None = None) -> list[str]:
        """Live nodes whose raft member list is not the proxied view they started with
        (e.g. after installing another node's raft marker); [] when all is well."""
        problems = []
        for node in self.live() if nodes is None else nodes:
            status = node.status()
            if status is None:
                problems.append(f"{node.node_id}: no /v1/status")
                continue
            got = sorted(m["raft_address"] for m in status.get("members", []))
            want = self.expected_members(node)
            if got != want:
                problems.append(f"{node.node_id}: members {got}, expected {want}")
        return problems


def agreed_leader(
    nodes: Sequence[NodeProcess],
    timeout: float = 20.0,
    everyone: Sequence[NodeProcess] | None = None,
    other_than: NodeProcess | None = None,
) -> NodeProcess:
    """The node every one of ``nodes`` names as leader (e.g. a majority's side of a
    partition, where ``LocalCluster.leader()`` would wait for the isolated node too);
    it is looked up in ``everyone`` (default: ``nodes``). With ``other_than``, wait
    for a leader that is not that node."""
    deadline = time.monotonic() + timeout
    seen: list[Any] = []
    while time.monotonic() < deadline:
        seen = []
        for node in nodes:
            status = node.status(timeout=2.0)
            leader = status.get("leader") if status else None
            seen.append(leader["id"] if leader else None)
        if seen and None not in seen and len(set(seen)) == 1:
            named = [n for n in (everyone or nodes) if n.node_id == seen[0]]
            if named and named[0] is not other_than:
                return named[0]
        time.sleep(0.1)
    raise TimeoutError(
        f"{[n.node_id for n in nodes]} agree on no leader after {timeout}s (last: {seen})"
    )


def wait_stable(
    nodes: Sequence[NodeProcess], quiet: float = 1.5, timeout: float = 30.0
) -> NodeProcess:
    """Wait until every one of ``nodes`` has named the same leader in the same term for
    ``quiet`` seconds in a row, and return it. After a heal a node that was cut off
    can still depose the leader (pysyncobj has no pre-vote: its raised term wins), so
    tests that need one leader for a while wait for this first."""
    deadline = time.monotonic() + timeout
    since: float | None = None
    agreed: tuple[str, int] | None = None
    last: list[Any] = []
    while time.monotonic() < deadline:
        last = []
        for node in nodes:
            status = node.status(timeout=2.0)
            leader = status.get("leader") if status else None
            last.append((leader["id"], status["term"]) if status and leader else None)
        now = time.monotonic()
        current = last[0] if last and None not in last and len(set(last)) == 1 else None
        if current is None or current != agreed:
            agreed, since = current, now
        elif since is not None and now - since >= quiet:
            leader_id = current[0]
            return next(n for n in nodes if n.node_id == leader_id)
        time.sleep(0.1)
    raise TimeoutError(f"no stable leader among {[n.node_id for n in nodes]}: {last}")
