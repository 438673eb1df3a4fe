"""Three real ``python -m node.cli node`` processes on loopback, for the benchmarks.

Their argv (fresh ports, a cluster secret, each node naming the other two as peers),
starting them with bench/procs.py, and asking them for readiness (GET /readyz), status
(GET /v1/status), the leader and the applied offset. What a benchmark does on top
(extra node flags, a wrapper around the argv such as a memory cgroup, default settings
with no RKV_* variables, more detail when a node has stopped) it passes as parameters.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from bench.procs import Processes, Server
from bench.support import (
    LOOPBACK,
    REPO,
    BenchError,
    free_ports,
    http_json,
    http_request,
    progress,
    wait_until,
)

NODES = 3


@dataclass
class Node:
    """One node: its id, REST URL, data directory, argv and, once started, its process."""

    node_id: str
    url: str
    data_dir: Path
    argv: list[str]
    server: Server | None = None

    @property
    def alive(self) -> bool:
        """Started and still running."""
        return self.server is not None and self.server.exited() is None


N = TypeVar("N", bound=Node)


def make_nodes(
    scratch: Path,
    extra_args: Sequence[str] = (),
    *,
    scheme: str = "http",
    own_args: Callable[[str], list[str]] | None = None,
) -> list[Node]:
    """NODES nodes with data directories under ``scratch`` (not started), sharing a
    secret written there; ``extra_args`` are added to every node's argv, ``own_args(id)``
    to that node's (its certificate, say); ``scheme`` is "https" for nodes with TLS."""
    secret = scratch / "cluster.secret"
    secret.write_text("bench-secret-" + os.urandom(16).hex())
    ports = free_ports(2 * NODES)
    ids = [f"n{i}" for i in range(NODES)]
    urls = [f"{scheme}://{LOOPBACK}:{ports[2 * i]}" for i in range(NODES)]
    rafts = [f"{LOOPBACK}:{ports[2 * i + 1]}" for i in range(NODES)]
    nodes = []
    for i in range(NODES):
        data_dir = scratch / ids[i]
        argv = [sys.executable, "-m", "node.cli", "node", "--id", ids[i]]
        argv += ["--data-dir", str(data_dir), "--listen", urls[i].split("://", 1)[1]]
        argv += ["--raft-listen", rafts[i], "--secret-file", str(secret), *extra_args]
        argv += own_args(ids[i]) if own_args is not None else []
        for j in range(NODES):
            if j != i:
                argv += ["--peer", f"{ids[j]},{rafts[j]},{urls[j]}"]
        nodes.append(Node(ids[i], urls[i], data_dir, argv))
    return nodes


def start_node(
    procs: Processes,
    node: Node,
    log_name: str | None = None,
    wrap: Callable[[list[str]], list[str]] | None = None,
    drop_rkv_env: bool = False,
) -> Server:
    """Start ``node`` (its argv through ``wrap`` if given), logging to ``log_name``
    (default ``<id>.log``) next to its data directory. ``drop_rkv_env`` removes the RKV_*
    variables from its environment, so it runs on its default settings."""
    node.data_dir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not (drop_rkv_env and k.startswith("RKV_"))}
    env["PYTHONPATH"] = str(REPO)
    argv = node.argv if wrap is None else wrap(node.argv)
    log = node.data_dir.parent / (log_name or f"{node.node_id}.log")
    server: Server = procs.start(node.node_id, argv, log, env)
    node.server = server
    return server


def exited(nodes: Sequence[N], explain: Callable[[N], str] | None = None) -> str | None:
    """None while no started node has stopped, else how the first one ended (then, on
    a line of its own, ``explain`` of that node if given)."""
    for node in nodes:
        problem = node.server.exited() if node.server else None
        if problem is not None:
            return problem if explain is None else f"{problem}\n{explain(node)}"
    return None


def ready(node: Node) -> bool:
    """GET /readyz answers 200."""
    return http_request(f"{node.url}/readyz")[0] == 200


def status(node: Node) -> dict[str, Any]:
    """GET /v1/status, or {} if it did not answer with a JSON object."""
    found = http_json(f"{node.url}/v1/status")
    return found if isinstance(found, dict) else {}


def leader_of(nodes: Sequence[N]) -> N | None:
    """The running node that the first running node naming a leader names, if any."""
    for asked in nodes:
        if not asked.alive:
            continue
        leader = status(asked).get("leader")
        if isinstance(leader, dict):
            found = next((n for n in nodes if n.node_id == leader.get("id")), None)
            if found is not None and found.alive:
                return found
    return None


def wait_leader(
    nodes: Sequence[N], timeout: float = 60.0, explain: Callable[[N], str] | None = None
) -> N:
    """The leader, waited for up to ``timeout`` s; fails once a node stops (``exited``)."""
    wait_until(
        "a leader", lambda: leader_of(nodes) is not None, timeout, lambda: exited(nodes, explain)
    )
    leader = leader_of(nodes)
    if leader is None:
        raise BenchError("the leader went away")
    return leader


def applied(node: Node) -> int:
    """The applied offset in GET /v1/status (0 if it did not answer)."""
    return int(status(node).get("applied_offset") or 0)


def kill_and_wipe(procs: Processes, node: Node) -> None:
    """SIGKILL ``node`` and delete its data directory (a member whose disk was lost)."""
    assert node.server is not None
    progress(f"SIGKILL follower {node.node_id} (pid {node.server.pid}), deleting {node.data_dir}")
    node.server.process.kill()
    node.server.process.wait()
    procs.stop(node.server)
    shutil.rmtree(node.data_dir)
