"""A 3-member etcd cluster on 127.0.0.1 from Debian's etcd-server, with etcd's defaults.

Each member gets its own client and peer port and data directory; nothing but the
addresses, names and logging is set (fsync and snapshot settings stay etcd's own). The
JSON gateway's prefix is probed (/v3 since etcd 3.4, /v3beta in 3.3, /v3alpha in 3.2).
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.procs import Processes, Server
from bench.support import LOOPBACK, BenchError, ensure_command, free_ports, http_json, wait_until

GATEWAY_PREFIXES = ("/v3", "/v3beta", "/v3alpha")
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class EtcdCluster:
    version: str
    prefix: str  # the JSON gateway's path prefix
    client_urls: tuple[str, ...]
    leader_url: str


def find_etcd() -> tuple[str, str]:
    """(etcd path, version), installing etcd-server and etcd-client if etcd is missing."""
    etcd = ensure_command("etcd", "etcd-server", "etcd-client")
    if etcd is None:
        raise BenchError("etcd is not installed and `apt-get install etcd-server` failed")
    done = subprocess.run([etcd, "--version"], capture_output=True, text=True, check=False)
    match = re.search(r"etcd Version: (\S+)", done.stdout)
    return etcd, match.group(1) if match else "unknown"


def member_argv(etcd: str, index: int, ports: list[int], data_dir: Path, token: str) -> list[str]:
    def peer(i: int) -> str:
        return f"http://{LOOPBACK}:{ports[2 * i + 1]}"

    client = f"http://{LOOPBACK}:{ports[2 * index]}"
    cluster = ",".join(f"m{i}={peer(i)}" for i in range(len(ports) // 2))
    return [
        etcd,
        f"--name=m{index}",
        f"--data-dir={data_dir / f'm{index}'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer(index)}",
        f"--initial-advertise-peer-urls={peer(index)}",
        f"--initial-cluster={cluster}",
        "--initial-cluster-state=new",
        f"--initial-cluster-token={token}",
        "--logger=zap",
        "--log-outputs=stderr",
    ]


def start(procs: Processes, data_dir: Path, members: int = 3) -> EtcdCluster:
    etcd, version = find_etcd()
    ports = free_ports(2 * members)
    token = f"rkv-bench-{secrets.token_hex(4)}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD")}
    servers = [
        procs.start(
            f"etcd m{i}",
            member_argv(etcd, i, ports, data_dir, token),
            data_dir / f"etcd-m{i}.log",
            env,
        )
        for i in range(members)
    ]
    urls = tuple(f"http://{LOOPBACK}:{ports[2 * i]}" for i in range(members))
    alive = _first_exit(servers)
    wait_until(
        f"etcd {version}: /health on {members} members",
        lambda: _healthy(urls),
        START_TIMEOUT_S,
        alive,
    )
    prefix = gateway_prefix(urls[0])
    leader: list[str] = []
    wait_until("an etcd leader", lambda: _find_leader(urls, prefix, leader), 30, alive)
    return EtcdCluster(version, prefix, urls, leader[0])


def _first_exit(servers: list[Server]):
    return lambda: next((p for p in (s.exited() for s in servers) if p), None)


def _healthy(urls: tuple[str, ...]) -> bool:
    answers = [http_json(f"{url}/health") for url in urls]
    return all(isinstance(a, dict) and a.get("health") == "true" for a in answers)


def gateway_prefix(url: str) -> str:
    """The first gateway prefix under which a range request answers 200."""
    for prefix in GATEWAY_PREFIXES:
        if http_json(f"{url}{prefix}/kv/range", "POST", {"key": "AA=="}) is not None:
            return prefix
    raise BenchError(f"etcd at {url} answers none of {', '.join(GATEWAY_PREFIXES)}/kv/range")


def _find_leader(urls: tuple[str, ...], prefix: str, found: list[str]) -> bool:
    """Append the leader's client URL to ``found``; False while there is no leader."""
    for url in urls:
        status = http_json(f"{url}{prefix}/maintenance/status", "POST", {})
        if not isinstance(status, dict):
            continue
        member = status.get("header", {}).get("member_id")
        if member is not None and member == status.get("leader"):
            found.append(url)
            return True
    return False
