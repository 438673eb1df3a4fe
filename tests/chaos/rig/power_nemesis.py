"""The nemeses that need each node's data directory on a lazy mount
(tests/chaos/rig/lazy_cluster.py): ``power`` cuts the power of one node (the
leader or another) or of every node at once, losing all each had not
fsynced, then restarts them; ``disk-full`` caps one node's disk a little above
what it uses, under the workload's writes, then lifts the cap, restarts the
node if the full disk brought it down, and disarms the NOSPACE alarm."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from tests.chaos.rig.lazy_cluster import LazyCluster
from tests.chaos.rig.nemesis import _pick as pick_node
from tests.support.cluster import http

ALL_AT_ONCE_SHARE = 0.3
"""How often a power cut takes every node at once (the harshest case)."""
DISK_FULL_HEADROOM = 32 * 1024
"""Bytes left free on the node whose disk the nemesis fills (under a node's
--nospace-free-bytes: its space check raises the NOSPACE alarm at once)."""
DISARM_TIMEOUT = 60.0
SPACE_CHECK_SECONDS = 5.0
"""A node's --space-check-interval (its default)."""


def _pick(cluster: LazyCluster, rng: random.Random) -> tuple[int, bool]:
    index = pick_node(cluster, rng)
    was_leader = (cluster.nodes[index].status() or {}).get("role") == "leader"
    return index, was_leader


@dataclass
class PowerCut:
    cluster: LazyCluster
    name: str = "power"
    lasting: bool = False

    def inject(self, rng: random.Random) -> str:
        if rng.random() < ALL_AT_ONCE_SHARE:
            indexes = list(range(len(self.cluster.nodes)))
            action = "power cut of every node at once (unsynced data lost), restart"
        else:
            index, was_leader = _pick(self.cluster, rng)
            indexes = [index]
            node_id = self.cluster.nodes[index].node_id
            leader = " (leader)" if was_leader else ""
            action = f"power cut of {node_id}{leader} (unsynced data lost), restart"
        self.cluster.power_cut(indexes)
        for i in indexes:
            self.cluster.start_node(i)
        return action

    def heal(self) -> None:
        return None


@dataclass
class DiskFull:
    cluster: LazyCluster
    name: str = "disk-full"
    lasting: bool = True
    _full: int | None = None

    def inject(self, rng: random.Random) -> str:
        index, was_leader = _pick(self.cluster, rng)
        mount = self.cluster.mounts[index]
        used = int(mount.stats()["used"])
        mount.set_cap(used + DISK_FULL_HEADROOM)
        self._full = index
        leader = " (leader)" if was_leader else ""
        node_id = self.cluster.nodes[index].node_id
        return f"disk of {node_id}{leader} full: capped at {used + DISK_FULL_HEADROOM} bytes"

    def heal(self) -> None:
        """The operator's runbook (docs/OPERATIONS.md): free space, then disarm the
        NOSPACE alarm the full disk raised (writes that add data wait for that)."""
        if self._full is None:
            return
        self.cluster.mounts[self._full].set_cap(None)
        if not self.cluster.nodes[self._full].alive:
            self.cluster.start_node(self._full)
        self._full = None
        disarm(self.cluster)


def disarm(cluster: LazyCluster) -> None:
    """Disarm the NOSPACE alarm, again until none is left: a disarm that commits
    before the full member's space check has seen the freed space is followed by a
    new alarm, so each try is checked one space check later."""
    deadline = time.monotonic() + DISARM_TIMEOUT
    while time.monotonic() < deadline:
        for node in cluster.live():
            try:
                answer = http("POST", node.url + "/v1/alarms:disarm", b"", timeout=5)
                if answer.status != 200:
                    continue
                time.sleep(SPACE_CHECK_SECONDS + 1)
                listed = http("GET", node.url + "/v1/alarms", timeout=5)
            except OSError:
                continue
            if listed.status == 200 and not listed.json()["alarms"]:
                return
            break
        time.sleep(0.2)
