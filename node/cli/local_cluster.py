"""`rkv up`: a local N-node cluster on loopback, in the foreground.

Composition root. Node i serves HTTP on base_port + i and raft on
base_port + 100 + i, keeps its data in <data_dir>/n<i>, and logs to
<data_dir>/n<i>/node.log. The cluster secret is generated once and kept in
<data_dir>/cluster.secret, so a restart keeps both the data and the secret.
Ctrl-C or SIGTERM stops every node (SIGTERM, then SIGKILL after 10 s).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from http_api.client.control import HttpStatusError, get_json

RAFT_PORT_OFFSET = 100
SECRET_FILE = "cluster.secret"


@dataclass(frozen=True, slots=True)
class LocalNode:
    node_id: str
    http_port: int
    raft_port: int
    data_dir: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def raft_address(self) -> str:
        return f"127.0.0.1:{self.raft_port}"


def plan(nodes: int, data_dir: Path, base_port: int) -> list[LocalNode]:
    return [
        LocalNode(f"n{i}", base_port + i, base_port + RAFT_PORT_OFFSET + i, data_dir / f"n{i}")
        for i in range(nodes)
    ]


def ensure_secret(data_dir: Path) -> Path:
    path = data_dir / SECRET_FILE
    if not path.exists():
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return path


def node_command(
    node: LocalNode, cluster: list[LocalNode], secret: Path, extra: list[str]
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "node.cli",
        "node",
        "--id",
        node.node_id,
        "--data-dir",
        str(node.data_dir),
        "--listen",
        f"127.0.0.1:{node.http_port}",
        "--raft-listen",
        node.raft_address,
        "--secret-file",
        str(secret),
    ]
    for peer in cluster:
        if peer is not node:
            command += ["--peer", f"{peer.node_id},{peer.raft_address},{peer.url}"]
    return command + extra


def _get_json(url: str) -> dict[str, object] | None:
    try:
        data = get_json(url, timeout=2)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _leader_or_auth(url: str) -> tuple[str | None, bool]:
    """The leader's id from a node's /v1/status, and whether auth is on (the status is
    refused 401, or 503 auth_starting while --root-password-file sets it up)."""
    try:
        data = get_json(url + "/v1/status", timeout=2)
    except HttpStatusError as exc:
        return None, exc.status == 401 or exc.answer.get("code") == "auth_starting"
    except (OSError, ValueError):
        return None, False
    leader = data.get("leader") if isinstance(data, dict) else None
    return (str(leader.get("id")) if isinstance(leader, dict) else None), False


def wait_until_ready(cluster: list[LocalNode], timeout: float) -> tuple[str | None, bool]:
    """Wait for every node's /readyz; returns the leader's id (None on time-out, or when
    auth hides it) and whether auth is on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(_get_json(n.url + "/readyz") for n in cluster):
            leader, auth_on = _leader_or_auth(cluster[0].url)
            if leader is not None or auth_on:
                return leader, auth_on
        time.sleep(0.2)
    return None, False


def _print_security(auth_on: bool, first: str, last: str) -> None:
    """What `rkv up` (and `make run`) say about auth and TLS: off, and how to turn them on."""
    if auth_on:
        print("rkv: auth is ON (TLS is off: plain HTTP on 127.0.0.1). Try:")
        print(f"  curl -u root:PASSWORD -X PUT --data-binary hello {first}/v1/kv/greeting")
        print(f"  curl -u root:PASSWORD {last}/v1/kv/greeting")
        return
    print(f"  curl -X PUT --data-binary hello {first}/v1/kv/greeting")
    print(f"  curl {last}/v1/kv/greeting")
    print(
        "rkv: auth and TLS are OFF: anyone on this machine can read and write every key "
        "(fine for a first try on 127.0.0.1).\n"
        "  auth: start with --node-arg=--root-password-file=FILE (root gets FILE's first "
        "line as password, auth on from the first start), or set it up through /v1/auth "
        "(docs/OPERATIONS.md, Security)\n"
        "  TLS: rkv certs create, then rkv node --tls-cert/--tls-key per node "
        "(docs/OPERATIONS.md, TLS); docker compose runs with both on (docs/DOCKER.md)"
    )


def run_cluster(nodes: int, data_dir: Path, base_port: int, extra: list[str]) -> int:
    data_dir = data_dir.resolve()
    cluster = plan(nodes, data_dir, base_port)
    secret = ensure_secret(data_dir)
    processes: list[tuple[LocalNode, subprocess.Popen[bytes]]] = []
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    for node in cluster:
        node.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        log = open(node.data_dir / "node.log", "ab")  # noqa: SIM115 (the child keeps it)
        proc = subprocess.Popen(
            node_command(node, cluster, secret, extra), stdout=log, stderr=subprocess.STDOUT
        )
        processes.append((node, proc))
    print(f"rkv: starting a {nodes}-node cluster in {data_dir}", flush=True)
    leader, auth_on = wait_until_ready(cluster, timeout=30)
    for node in cluster:
        print(f"  {node.node_id}  {node.url}   raft {node.raft_address}   logs in {node.data_dir}")
    if leader is None and not auth_on:
        print("rkv: the cluster is not ready after 30 s; see the node logs", flush=True)
    else:
        print(f"rkv: ready; leader {leader or '(hidden: auth is on)'}. Try:", flush=True)
        _print_security(auth_on, cluster[0].url, cluster[-1].url)
        print("Ctrl-C stops the cluster; data and secret stay for the next start.", flush=True)
    exited: set[str] = set()
    while not stopping:
        for node, proc in processes:
            if proc.poll() is not None and node.node_id not in exited:
                exited.add(node.node_id)
                print(f"rkv: node {node.node_id} exited with {proc.returncode}", flush=True)
        if len(exited) == len(processes):
            break
        time.sleep(0.2)
    print("rkv: stopping", flush=True)
    for _, proc in processes:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    for _, proc in processes:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    print("rkv: stopped", flush=True)
    return 0 if stopping else 1
