"""Nemeses: the faults a campaign injects, each with a way to heal it.

Every nemesis acts on real node processes (tests/support/cluster.py) or on the
raft links between them (tests/chaos/rig/netfault.py): kill -9 and restart a
node (the leader or another), SIGSTOP / SIGCONT, a network partition, a
full-cluster crash and restart, a follower wiped and rebuilt from the leader,
forced compactions; on clusters whose data directories are lazy mounts
(power_nemesis.py): a power cut (unsynced data lost) of one node or all, a
full disk; and on the lock workload's client processes (lock_nemesis.py): the
lock's holder paused past its TTL, or killed. ``inject`` returns what it did;
``heal`` undoes it.
"""

from __future__ import annotations

import random
import shutil
import time
from dataclasses import dataclass
from typing import Protocol

from tests.chaos.rig.lazy_cluster import LazyCluster
from tests.chaos.rig.lock_nemesis import KillClient, PauseClient
from tests.chaos.rig.lock_workload import LockWorkload
from tests.support.cluster import LocalCluster, NodeProcess, http


class Network(Protocol):
    """What a partition nemesis needs from tests/chaos/rig/netfault.py."""

    def partition(self, groups: list[list[str]]) -> None: ...

    def drop(self, a: str, b: str) -> None:
        """Drop the traffic from ``a`` to ``b`` (one direction)."""
        ...

    def heal(self) -> None: ...


class Nemesis(Protocol):
    name: str
    """Whether the faulty state lasts (so the campaign holds it, then heals)."""
    lasting: bool

    def inject(self, rng: random.Random) -> str: ...

    def heal(self) -> None: ...


def _index(cluster: LocalCluster, node: NodeProcess) -> int:
    return cluster.nodes.index(node)


def _pick(cluster: LocalCluster, rng: random.Random, leader_share: float = 0.5) -> int:
    """The leader's index with probability ``leader_share``, else another live node's."""
    try:
        leader = cluster.leader(timeout=3)
    except (AssertionError, TimeoutError):
        leader = None
    if leader is not None and rng.random() < leader_share:
        return _index(cluster, leader)
    others = [i for i, n in enumerate(cluster.nodes) if n is not leader and n.alive]
    return rng.choice(others) if others else rng.randrange(len(cluster.nodes))


@dataclass
class Kill:
    cluster: LocalCluster
    name: str = "kill"
    lasting: bool = True
    _down: int | None = None

    def inject(self, rng: random.Random) -> str:
        index = _pick(self.cluster, rng)
        node = self.cluster.nodes[index]
        was_leader = (node.status() or {}).get("role") == "leader"
        self.cluster.kill(index)
        self._down = index
        return f"kill -9 {node.node_id}{' (leader)' if was_leader else ''}"

    def heal(self) -> None:
        if self._down is not None:
            self.cluster.start_node(self._down)
            self._down = None


@dataclass
class Pause:
    cluster: LocalCluster
    name: str = "pause"
    lasting: bool = True
    _paused: int | None = None

    def inject(self, rng: random.Random) -> str:
        index = _pick(self.cluster, rng)
        node = self.cluster.nodes[index]
        was_leader = (node.status() or {}).get("role") == "leader"
        self.cluster.pause(index)
        self._paused = index
        return f"SIGSTOP {node.node_id}{' (leader)' if was_leader else ''}"

    def heal(self) -> None:
        if self._paused is not None:
            self.cluster.resume(self._paused)
            self._paused = None


@dataclass
class Partition:
    cluster: LocalCluster
    network: Network
    name: str = "partition"
    lasting: bool = True

    def inject(self, rng: random.Random) -> str:
        ids = [n.node_id for n in self.cluster.nodes]
        index = _pick(self.cluster, rng, leader_share=0.6)
        alone = ids[index]
        others = [i for i in ids if i != alone]
        if rng.random() < 0.5 or len(others) != 2:
            groups = [[alone], others]
            self.network.partition(groups)
            return f"partition {groups}"
        # A bridge: the two others cannot reach each other; both still reach ``alone``.
        self.network.drop(others[0], others[1])
        self.network.drop(others[1], others[0])
        return f"bridge through {alone}: {others[0]} and {others[1]} cut from each other"

    def heal(self) -> None:
        self.network.heal()


@dataclass
class CrashAll:
    cluster: LocalCluster
    name: str = "crash_all"
    lasting: bool = False

    def inject(self, rng: random.Random) -> str:
        for i, node in enumerate(self.cluster.nodes):
            if node.alive:
                self.cluster.kill(i)
        for i in range(len(self.cluster.nodes)):
            self.cluster.start_node(i)
        return "kill -9 every node, then restart them all"

    def heal(self) -> None:
        return None


def _all_caught_up(cluster: LocalCluster) -> bool:
    """Every node ready and voting, and each at or past the highest applied offset any
    of them reported a moment before: what was acknowledged until then is everywhere.
    (Equal offsets at one instant are rare under load when each status call costs a TLS
    handshake; a second look at each node is enough.)"""
    reported = []
    for node in cluster.nodes:
        if not node.alive or node.stopped_with_sigstop:
            return False
        status = node.status() or {}
        if not status.get("ready") or status.get("votes") is False:
            return False
        reported.append(int(status.get("applied_offset") or 0))
    target = max(reported)
    for node in cluster.nodes:
        status = node.status() or {}
        if int(status.get("applied_offset") or 0) < target:
            return False
    return True


@dataclass
class Wipe:
    """Loses one member's data. Consensus tolerates losing a minority's disks only,
    so a wipe waits until every member holds everything (the previous wipe's
    rebuild is over) and is skipped if that does not happen within 30 s: two
    wipes before a rebuild ends would lose a majority's data, which no Raft
    implementation survives."""

    cluster: LocalCluster
    name: str = "wipe"
    lasting: bool = False

    def inject(self, rng: random.Random) -> str:
        deadline = time.monotonic() + 30
        while not _all_caught_up(self.cluster):
            if time.monotonic() > deadline:
                return "wipe skipped: not every member had caught up within 30 s"
            time.sleep(0.2)
        index = _pick(self.cluster, rng, leader_share=0.0)
        node = self.cluster.nodes[index]
        if node.alive:
            self.cluster.kill(index)
        shutil.rmtree(node.data_dir, ignore_errors=True)
        self.cluster.start_node(index)
        return f"wipe {node.node_id}'s data directory and restart it (rebuild from the leader)"

    def heal(self) -> None:
        return None


@dataclass
class Compact:
    cluster: LocalCluster
    name: str = "compact"
    lasting: bool = False

    def inject(self, rng: random.Random) -> str:
        live = [n for n in self.cluster.nodes if n.alive and not n.stopped_with_sigstop]
        node = rng.choice(live)
        try:
            status = http("POST", node.url + "/v1/admin/compact", b"", timeout=60).status
        except OSError as exc:
            return f"forced compaction on {node.node_id}: {type(exc).__name__}"
        return f"forced compaction on {node.node_id}: HTTP {status}"

    def heal(self) -> None:
        return None


NEMESES = ("kill", "pause", "partition", "crash_all", "wipe", "compact")
LOCK_NEMESES = ("pause_client", "kill_client")
"""The nemeses that need the lock workload's clients."""
LAZY_NEMESES = ("power", "disk-full")
"""The nemeses that need the data directories on lazy mounts (LazyCluster)."""


def build(
    names: list[str],
    cluster: LocalCluster,
    network: Network | None,
    locks: LockWorkload | None = None,
) -> list[Nemesis]:
    made: list[Nemesis] = []
    for name in names:
        if name in LOCK_NEMESES:
            if locks is None:
                raise ValueError(f"the {name} nemesis needs the lock workload")
            made.append(PauseClient(locks) if name == "pause_client" else KillClient(locks))
            continue
        if name in LAZY_NEMESES:
            if not isinstance(cluster, LazyCluster):
                raise ValueError(f"the {name} nemesis needs the data directories on lazy mounts")
            # Imported here: power_nemesis.py imports this module's node picker (_pick).
            from tests.chaos.rig.power_nemesis import DiskFull, PowerCut  # noqa: PLC0415

            made.append(PowerCut(cluster) if name == "power" else DiskFull(cluster))
            continue
        if name == "kill":
            made.append(Kill(cluster))
        elif name == "pause":
            made.append(Pause(cluster))
        elif name == "partition":
            if network is None:
                raise ValueError("the partition nemesis needs a proxied network")
            made.append(Partition(cluster, network))
        elif name == "crash_all":
            made.append(CrashAll(cluster))
        elif name == "wipe":
            made.append(Wipe(cluster))
        elif name == "compact":
            made.append(Compact(cluster))
        else:
            choices = ", ".join((*NEMESES, *LOCK_NEMESES, *LAZY_NEMESES))
            raise ValueError(f"unknown nemesis {name!r}: choose from {choices}")
    return made
