"""``LazyCluster``: a ``ProxiedCluster`` whose nodes each keep their data
directory on a lazy mount of their own (tests/chaos/rig/lazyfs/), so that a
nemesis can cut a node's power (lose what it had not fsynced) or fill its disk.

Node i's data directory ``<base>/n<i>`` is the mountpoint; its bytes live in
``<base>/n<i>.disk`` (kept after a failed campaign for a post-mortem), the
daemon's log in ``<base>/n<i>.disk.lazyfs.log``, and the node's own log in
``<base>/n<i>.log`` (outside the mount: a power cut must not eat the evidence).
Needs root, /dev/fuse and fuse3 (Makefile: system-deps).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tests.chaos.rig.lazyfs.mount import LazyMount
from tests.chaos.rig.proxied_cluster import ProxiedCluster


@dataclass
class LazyCluster(ProxiedCluster):
    names: str = "strict"
    """When name changes become durable (tests/chaos/rig/lazyfs/filesystem.py)."""

    def __post_init__(self) -> None:
        self.mounts: list[LazyMount] = []
        super().__post_init__()
        for node in self.nodes:
            node.log_path = self.base_dir / f"{node.node_id}.log"
            backing = self.base_dir / f"{node.node_id}.disk"
            self.mounts.append(LazyMount(backing, node.data_dir, names=self.names))

    def start_node(self, i: int) -> None:
        self.mounts[i].start()
        super().start_node(i)

    def power_cut(self, indexes: Sequence[int]) -> None:
        """Cut the power of these nodes at once: kill -9 each, drop everything each
        had not made durable, mount again (the nodes stay down: ``start_node``)."""
        for i in indexes:
            if self.nodes[i].alive:
                self.kill(i)
        for i in indexes:
            self.mounts[i].power_cut()
        for i in indexes:
            self.mounts[i].start()

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            failures = []
            for mount in self.mounts:  # every one, even after one failed
                try:
                    mount.stop()
                except RuntimeError as exc:
                    failures.append(str(exc))
            if failures:
                raise RuntimeError("; ".join(failures))
