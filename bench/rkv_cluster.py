"""A 3-node rkv cluster started with ``rkv up``, and the contract the benchmark relies on.

``rkv up --nodes N --data-dir DIR --base-port P`` serves node i's REST API on
http://127.0.0.1:(P+i) (and raft on P+100+i); the cluster is ready when GET /readyz
answers 200 on every node and GET /v1/status names a leader:
``{"leader": {"id": ..., "url": ...}}``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.procs import Processes
from bench.support import (
    LOOPBACK,
    REPO,
    BenchError,
    free_port_block,
    http_json,
    http_request,
    wait_until,
)

START_TIMEOUT_S = 90.0
RAFT_PORT_OFFSET = 100  # node i's raft port is base+100+i (node/cli/local_cluster.py)


@dataclass(frozen=True)
class RkvCluster:
    urls: tuple[str, ...]
    leader_url: str


def find_rkv() -> str:
    """The ``rkv`` executable of this checkout's venv (else on PATH) that has ``rkv up``."""
    candidates = [REPO / ".venv" / "bin" / "rkv", Path(sys.executable).parent / "rkv"]
    found = next((str(c) for c in candidates if c.exists()), None) or shutil.which("rkv")
    if found is None:
        raise BenchError("no `rkv` executable: run `make venv` (pip install -e .) first")
    try:
        done = subprocess.run(
            [found, "up", "--help"], capture_output=True, text=True, timeout=60, check=False
        )
    except subprocess.TimeoutExpired as error:
        raise BenchError(f"`{found} up --help` hung for 60 s") from error
    if done.returncode != 0 or "--base-port" not in done.stdout:
        raise BenchError(
            f"`{found} up --help` does not offer --base-port (exit {done.returncode}): "
            "this rkv has no runnable `rkv up` yet; use --skip-rkv"
        )
    return found


def start(
    procs: Processes, data_dir: Path, nodes: int = 3, env: dict[str, str] | None = None
) -> RkvCluster:
    """``env``: the environment of ``rkv up`` and its nodes (RKV_* settings), else ours."""
    rkv = find_rkv()
    base = free_port_block([*range(nodes), *range(RAFT_PORT_OFFSET, RAFT_PORT_OFFSET + nodes)])
    argv = [rkv, "up", "--nodes", str(nodes), "--data-dir", str(data_dir / "rkv")]
    argv += ["--base-port", str(base)]
    server = procs.start("rkv up", argv, data_dir / "rkv-up.log", env)
    urls = tuple(f"http://{LOOPBACK}:{base + i}" for i in range(nodes))
    wait_until(
        f"rkv: /readyz on {nodes} nodes", lambda: _ready(urls), START_TIMEOUT_S, server.exited
    )
    leader: list[str] = []
    wait_until("an rkv leader in /v1/status", lambda: find_leader(urls, leader), 30, server.exited)
    return RkvCluster(urls, leader[0])


def _ready(urls: tuple[str, ...]) -> bool:
    return all(http_request(f"{url}/readyz")[0] == 200 for url in urls)


def find_leader(urls: tuple[str, ...], found: list[str]) -> bool:
    """Append the leader's URL (one of ``urls``) to ``found``; False while there is none."""
    for url in urls:
        status = http_json(f"{url}/v1/status")
        leader = status.get("leader") if isinstance(status, dict) else None
        if isinstance(leader, dict) and isinstance(leader.get("url"), str):
            found.append(_one_of(urls, leader["url"]))
            return True
    return False


def _one_of(urls: tuple[str, ...], url: str) -> str:
    """Our URL for the node the leader URL names (it may say localhost, or end in '/')."""
    port = url.rstrip("/").rpartition(":")[2]
    for candidate in urls:
        if candidate.endswith(f":{port}"):
            return candidate
    raise BenchError(f"/v1/status names leader {url}, which is none of {', '.join(urls)}")
