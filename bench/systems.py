"""The systems under load, each started on 127.0.0.1 inside a ``Processes``: an rkv
cluster (``rkv up``, plain or with TLS and auth), an etcd cluster loaded through its
native gRPC client (``etcd_grpc``) or through its JSON gateway (``etcd``), and
bench/trivial_server.py (the ceiling)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import etcd_cluster, rkv_cluster, rkv_secure
from bench.loadgen import GRPC, REST, Api, etcd_api
from bench.procs import Processes
from bench.support import LOOPBACK, free_ports, http_request, wait_until

RKV, RKV_SECURE, ETCD, ETCD_GRPC, TRIVIAL = "rkv", "rkv_secure", "etcd", "etcd_grpc", "trivial"
RKV_WORKERS = "rkv_workers"
WORKERS = 2
"""HTTP worker processes per node of ``rkv_workers`` (--http-workers)."""
SYSTEMS = (RKV, RKV_WORKERS, ETCD_GRPC, RKV_SECURE, ETCD, TRIVIAL)  # the order they run in
LABELS = {
    RKV: "rkv",
    RKV_WORKERS: f"rkv, {WORKERS} HTTP workers per node",
    ETCD_GRPC: "etcd gRPC (clientv3)",
    RKV_SECURE: "rkv_secure (TLS+auth)",
    ETCD: "etcd JSON gateway",
    TRIVIAL: "trivial aiohttp",
}
RKV_LEADER_METRIC = "rkv_server_leader_changes_seen_total"
ETCD_LEADER_METRIC = "etcd_server_leader_changes_seen_total"
TRIVIAL_SERVER = Path(__file__).resolve().parent / "trivial_server.py"


@dataclass(frozen=True)
class System:
    name: str
    api: Api
    leader: str  # PUTs and linearizable GETs go here
    members: tuple[str, ...]  # stale GETs are spread over these
    about: dict[str, Any] = field(default_factory=dict)
    headers: tuple[tuple[str, str], ...] = ()  # sent with every request (a bearer token)
    cafile: str | None = None  # the CA its https:// URLs are verified against
    leader_metric: str | None = None  # the /metrics counter of leader changes each member sees

    @property
    def follower(self) -> str:
        """The member that serves the stale GETs: one follower (the leader if alone)."""
        return next((url for url in self.members if url != self.leader), self.leader)


def start_rkv(procs: Processes, data: Path) -> System:
    cluster = rkv_cluster.start(procs, data)
    about = {"rkv leader": cluster.leader_url}
    return System(
        RKV, REST, cluster.leader_url, cluster.urls, about, leader_metric=RKV_LEADER_METRIC
    )


def start_rkv_workers(procs: Processes, data: Path) -> System:
    """rkv on its defaults but --http-workers (reads served by worker processes too)."""
    env = {**os.environ, "RKV_HTTP_WORKERS": str(WORKERS)}
    cluster = rkv_cluster.start(procs, data, env=env)
    # A node opens its port before its workers are ready (main serves meanwhile).
    ready = lambda: all(_workers_ready(url) for url in cluster.urls)  # noqa: E731
    wait_until("rkv_workers: every node's HTTP workers ready", ready, 60)
    about = {"rkv_workers leader": cluster.leader_url, "rkv_workers": f"--http-workers {WORKERS}"}
    return System(
        RKV_WORKERS,
        REST,
        cluster.leader_url,
        cluster.urls,
        about,
        leader_metric=RKV_LEADER_METRIC,
    )


def _workers_ready(url: str) -> bool:
    status, body = http_request(f"{url}/v1/status")
    if status != 200:
        return False
    workers = json.loads(body).get("http_workers") or []
    return len(workers) == WORKERS and all(w.get("ready") for w in workers)


def start_rkv_secure(procs: Processes, data: Path) -> System:
    """rkv with TLS and auth on: the same load over HTTPS with a bearer token."""
    cluster = rkv_secure.start(procs, data)
    return System(
        RKV_SECURE,
        REST,
        cluster.leader_url,
        cluster.urls,
        {"rkv_secure leader": cluster.leader_url},
        headers=(("Authorization", f"Bearer {cluster.token}"),),
        cafile=cluster.cafile,
    )


def start_etcd(procs: Processes, data: Path) -> System:
    cluster = etcd_cluster.start(procs, data)
    api = etcd_api(cluster.prefix)
    about = {"etcd version": cluster.version, "etcd gateway prefix": cluster.prefix}
    return System(
        ETCD, api, cluster.leader_url, cluster.client_urls, about, leader_metric=ETCD_LEADER_METRIC
    )


def start_etcd_grpc(procs: Processes, data: Path) -> System:
    """etcd as its users reach it: gRPC through clientv3 (bench/etcd_native.py's generator)."""
    cluster = etcd_cluster.start(procs, data)
    about = {"etcd version": cluster.version, "etcd gRPC leader": cluster.leader_url}
    return System(
        ETCD_GRPC,
        GRPC,
        cluster.leader_url,
        cluster.client_urls,
        about,
        leader_metric=ETCD_LEADER_METRIC,
    )


def start_trivial(procs: Processes, data: Path) -> System:
    port = free_ports(1)[0]
    url = f"http://{LOOPBACK}:{port}"
    argv = [sys.executable, "-P", str(TRIVIAL_SERVER), "--port", str(port)]
    server = procs.start("trivial server", argv, data / "trivial.log")
    ready = lambda: http_request(f"{url}/readyz")[0] == 200  # noqa: E731
    wait_until("trivial server", ready, 30, server.exited)
    return System(TRIVIAL, REST, url, (url,))


STARTERS: dict[str, Callable[[Processes, Path], System]] = {
    RKV: start_rkv,
    RKV_WORKERS: start_rkv_workers,
    RKV_SECURE: start_rkv_secure,
    ETCD: start_etcd,
    ETCD_GRPC: start_etcd_grpc,
    TRIVIAL: start_trivial,
}
