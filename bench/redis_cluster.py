"""The SET rate the Redis replicator keeps up with: 3 Redis Cluster masters against 1 master.

Run by ``python -m bench.redis --scenario cluster`` (a short run: tens of seconds
per source). For each source (one plain redis-server, then a 3-master Redis
Cluster made with ``redis-cli --cluster create``) against the same 3-node rkv
cluster, under a prefix of its own:

1. SETs at fixed rates (pipelined, paced; in the cluster each to the master
   of its key's slot), ``step`` seconds each; it keeps up when the lag at the
   end of the step (the masters' offsets minus the checkpoints' offsets,
   summed over the shards) is no more than a second's worth of commands;
2. a burst of ``burst`` unpaced SETs and the rate at which the replicator
   drained it (from the first SET until every checkpoint reached its
   master's offset): the most it keeps up with.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.procs import Processes, Server
from bench.redis_support import Resp
from bench.rkv_cluster import RkvCluster, find_rkv
from bench.support import BenchError, free_ports, http_json, progress, wait_until
from replication.redis.cluster.slots import key_slot

KEYS = 100_000
SET_BYTES = len(b"*3\r\n$3\r\nSET\r\n$10\r\nkey:000000\r\n$16\r\n") + 16 + 2


def _redis_argv(port: int, work: Path, *extra: str) -> list[str]:
    return [
        "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
        "--appendonly", "no", "--dir", str(work), "--repl-backlog-size", "256mb", *extra,
    ]  # fmt: skip


class Source:
    """The masters written to and the checkpoints their replication commits."""

    def __init__(self, label: str, ports: list[int], cluster: RkvCluster) -> None:
        self.label = label
        self.ports = ports
        self.cluster = cluster
        self.clients = {port: Resp(port) for port in ports}
        self.owner: dict[int, int] = {}

    def route(self) -> None:
        """Map each key of the workload to the master serving its slot."""
        if len(self.ports) == 1:
            return
        slots: dict[int, int] = {}
        for raw in self.clients[self.ports[0]].call("CLUSTER", "SLOTS"):
            for slot in range(int(raw[0]), int(raw[1]) + 1):
                slots[slot] = int(raw[2][1])
        self.owner = {n: slots[key_slot(b"key:%06d" % n)] for n in range(KEYS)}

    def send(self, first: int, count: int) -> None:
        batches: dict[int, list[list[str]]] = {port: [] for port in self.ports}
        for i in range(first, first + count):
            n = i % KEYS
            port = self.owner.get(n, self.ports[0])
            batches[port].append(["SET", f"key:{n:06d}", "v" * 16])
        for port, batch in batches.items():
            if batch:
                self.clients[port].pipeline(batch)

    def master_offsets(self) -> int:
        return sum(client.offset() for client in self.clients.values())

    def committed(self) -> int:
        answer = http_json(f"{self.cluster.leader_url}/v1/checkpoints?encoding=utf-8")
        total = 0
        for item in answer["checkpoints"]:
            if item["name"].startswith(f"redis:{self.label}/"):
                found = json.loads(item["value"])
                total += int(found["offset"]) if found["state"] == "streaming" else 0
        return total

    def caught_up(self) -> bool:
        return self.committed() >= self.master_offsets()


def _start_cluster(procs: Processes, work: Path) -> list[int]:
    ports = free_ports(3)
    bus = free_ports(3)
    for port, bus_port in zip(ports, bus, strict=True):
        directory = work / f"cluster-{port}"
        directory.mkdir()
        cluster_args = ["--cluster-enabled", "yes", "--cluster-port", str(bus_port)]
        argv = _redis_argv(port, directory, *cluster_args, "--cluster-config-file", "nodes.conf")
        procs.start(f"redis-server (cluster {port})", argv, directory / "redis.log")
    time.sleep(0.5)
    done = subprocess.run(
        ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
         "--cluster-replicas", "0", "--cluster-yes"],
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise BenchError(f"redis-cli --cluster create failed: {done.stdout.decode()[-500:]}")

    def ok() -> bool:
        for port in ports:
            info = subprocess.run(
                ["redis-cli", "-p", str(port), "CLUSTER", "INFO"], capture_output=True, check=False
            ).stdout
            if b"cluster_state:ok" not in info:
                return False
        return True

    wait_until("the Redis Cluster", ok, 60)
    return ports


def _measure(
    procs: Processes, source: Source, work: Path, rates: list[int], step: float, burst: int
) -> dict[str, Any]:
    url = (
        f"redis://127.0.0.1:{source.ports[0]}"
        if len(source.ports) == 1
        else "redis-cluster://" + ",".join(f"127.0.0.1:{p}" for p in source.ports)
    )
    argv = [
        find_rkv(), "redis-replicate", "--source", url, "--url", ",".join(source.cluster.urls),
        "--status-interval", "5", "--prefix", f"{source.label}/",
    ]  # fmt: skip
    replicator: Server = procs.start(
        f"replicator ({source.label})", argv, work / f"replicator-{source.label}.log"
    )
    source.route()
    source.send(0, 1000)
    wait_until("the replicator's first sync", source.caught_up, 600, replicator.exited)
    rows: list[dict[str, Any]] = []
    sent = 1000
    for rate in rates:
        progress(f"{source.label}: {rate:,} SET/s for {step:.0f}s")
        started, count = time.monotonic(), 0
        while (now := time.monotonic()) - started < step:
            due = int((now - started) * rate) - count
            if due > 0:
                source.send(sent + count, due)
                count += due
            time.sleep(0.005)
        achieved = count / (time.monotonic() - started)
        lag = source.master_offsets() - source.committed()
        rows.append({
            "rate": rate, "achieved": round(achieved), "end_lag_bytes": lag,
            "kept_up": lag <= rate * SET_BYTES,
        })  # fmt: skip
        progress(f"  lag at the end {lag:,} bytes")
        sent += count
        wait_until("catching up", source.caught_up, 600, replicator.exited)
    progress(f"{source.label}: a burst of {burst:,} SETs")
    started = time.monotonic()
    for first in range(0, burst, 5000):
        source.send(sent + first, min(5000, burst - first))
    produced = time.monotonic() - started
    wait_until("draining the burst", source.caught_up, 1200, replicator.exited)
    drained = time.monotonic() - started
    procs.stop(replicator)
    result = {
        "source": source.label, "masters": len(source.ports), "steps": rows,
        "burst": burst, "produced_per_s": round(burst / produced),
        "drained_per_s": round(burst / drained),
    }  # fmt: skip
    progress(f"  produced at {burst / produced:,.0f}/s, drained at {burst / drained:,.0f}/s")
    return result


def keep_up(
    procs: Processes, cluster: RkvCluster, work: Path, rates: list[int], step: float, burst: int
) -> list[dict[str, Any]]:
    """The keep-up comparison (module docstring): one row per source."""
    results = []
    port = free_ports(1)[0]
    single_dir = work / "single"
    single_dir.mkdir()
    single = procs.start("redis-server (1 master)", _redis_argv(port, single_dir), work / "1.log")
    time.sleep(0.5)
    results.append(_measure(procs, Source("single", [port], cluster), work, rates, step, burst))
    procs.stop(single)
    ports = _start_cluster(procs, work)
    results.append(_measure(procs, Source("cluster", ports, cluster), work, rates, step, burst))
    return results


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        "keep-up: SET/s with 3 cluster masters against 1",
        f"{'source':>8} {'masters':>7} {'SET/s':>7} {'achieved':>9} {'end lag B':>11} "
        f"{'kept up':>8}",
    ]
    for row in rows:
        for step in row["steps"]:
            lines.append(
                f"{row['source']:>8} {row['masters']:>7} {step['rate']:>7,} {step['achieved']:>9,} "
                f"{step['end_lag_bytes']:>11,} {step['kept_up']!s:>8}"
            )
        lines.append(
            f"{row['source']:>8} {row['masters']:>7}   burst of {row['burst']:,}: produced at "
            f"{row['produced_per_s']:,}/s, drained at {row['drained_per_s']:,}/s"
        )
    return "\n".join(lines)
