"""A real Redis Cluster for tests, a cluster-aware writer, and comparing rkv with it.

:func:`run_redis_cluster` starts ``masters * (1 + replicas)`` redis-servers
(:func:`tests.redis.conftest.run_redis_server`, ``--cluster-enabled yes``) on
127.0.0.1 and joins them with ``redis-cli --cluster create``; it waits until
every node says ``cluster_state:ok`` and every replica is in sync. Servers are
stopped by PID when the block ends (a test may also kill one with SIGKILL:
:meth:`RedisCluster.pid`).

:class:`ClusterWriter` sends each command to the master serving its key's slot
(computed with :func:`replication.redis.cluster.slots.key_slot`, the map
refreshed from ``CLUSTER SHARDS`` after a ``MOVED``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replication.redis.cluster.slots import key_slot
from tests.redis.conftest import RedisServer, run_redis_server
from tests.redis.replica_support import (
    Replicator,
    compare_dumps,
    master_offset,
    redis_dump,
    rkv_dump,
)
from tests.redis.resp_client import Arg, RespClient, RespError
from tests.support.cluster import LocalCluster, free_ports, http

CLUSTER_ARGS = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "2000", "--repl-diskless-sync", "no")  # fmt: skip


def _pairs(flat: list[Any]) -> dict[str, Any]:
    return {bytes(k).decode(): v for k, v in zip(flat[0::2], flat[1::2], strict=True)}


@dataclass
class RedisCluster:
    servers: list[RedisServer]
    password: str | None = None

    def client(self, port: int) -> RespClient:
        client = RespClient("127.0.0.1", port, timeout=30)
        if self.password is not None:
            client.execute("AUTH", self.password)
        return client

    def ask(self, port: int, *args: Arg) -> Any:
        with self.client(port) as client:
            return client.execute(*args)

    def alive_ports(self) -> list[int]:
        ports = []
        for server in self.servers:
            try:
                self.ask(server.port, "PING")
            except (OSError, ConnectionError, RespError):
                continue
            ports.append(server.port)
        return ports

    def shards(self) -> list[dict[str, Any]]:
        """``CLUSTER SHARDS`` asked of a live node: [{"slots": set, "master": port,
        "replicas": [ports], "master_id": id}] for the shards serving slots."""
        for port in self.alive_ports():
            found = []
            for raw in self.ask(port, "CLUSTER", "SHARDS"):
                shard = _pairs(raw)
                bounds = [int(x) for x in shard["slots"]]
                slots = {
                    s
                    for a, b in zip(bounds[0::2], bounds[1::2], strict=True)
                    for s in range(a, b + 1)
                }
                nodes = [_pairs(n) for n in shard["nodes"]]
                masters = [n for n in nodes if n["role"] == b"master"]
                if slots and masters:
                    found.append({
                        "slots": slots,
                        "master": int(masters[0]["port"]),
                        "master_id": masters[0]["id"].decode(),
                        "replicas": [int(n["port"]) for n in nodes if n["role"] != b"master"],
                    })  # fmt: skip
            return found
        raise AssertionError("no node of the Redis Cluster answers")

    def masters(self) -> list[int]:
        return [shard["master"] for shard in self.shards()]

    def pid(self, port: int) -> int:
        info = self.ask(port, "INFO", "server").decode()
        return int(next(x for x in info.splitlines() if x.startswith("process_id:")).split(":")[1])

    def wait_ok(self, timeout: float = 60.0) -> None:
        """Every live node sees the cluster ok, one master per slot group, replicas in sync."""
        deadline = time.monotonic() + timeout
        problem = ""
        while time.monotonic() < deadline:
            try:
                problem = self._problem()
            except (OSError, ConnectionError, RespError) as exc:
                problem = str(exc)
            if not problem:
                return
            time.sleep(0.2)
        raise AssertionError(f"the Redis Cluster is not ok within {timeout}s: {problem}")

    def _problem(self) -> str:
        for port in self.alive_ports():
            info = self.ask(port, "CLUSTER", "INFO").decode()
            if "cluster_state:ok" not in info:
                return f"{port}: {info.splitlines()[0]}"
        alive = set(self.alive_ports())
        for shard in self.shards():
            offset = master_offset_of(self, shard["master"])
            for replica in shard["replicas"]:
                if replica not in alive:
                    continue
                info = self.ask(replica, "INFO", "replication").decode()
                if "master_link_status:up" not in info:
                    return f"replica {replica} not linked"
                if master_offset_of(self, replica) < offset:
                    return f"replica {replica} behind"
        return ""


def master_offset_of(cluster: RedisCluster, port: int) -> int:
    with cluster.client(port) as client:
        return master_offset(client)


@contextmanager
def run_redis_cluster(
    directory: Path, masters: int = 3, replicas: int = 1, password: str | None = None
) -> Iterator[RedisCluster]:
    """The cluster's nodes (``--requirepass``/``--masterauth`` when ``password``)."""
    login = ("--requirepass", password, "--masterauth", password) if password else ()
    with ExitStack() as stack:
        servers = [
            stack.enter_context(
                run_redis_server(
                    directory / f"node{i}",
                    *CLUSTER_ARGS,
                    *login,
                    "--cluster-port",
                    str(free_ports(1)[0]),
                )
            )
            for i in range(masters * (1 + replicas))
        ]
        addresses = [f"127.0.0.1:{s.port}" for s in servers]
        done = subprocess.run(
            ["redis-cli", "--cluster", "create", *addresses,
             "--cluster-replicas", str(replicas), "--cluster-yes",
             *(("-a", password) if password else ())],
            capture_output=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
        cluster = RedisCluster(servers, password)
        cluster.wait_ok()
        yield cluster


def kill(cluster: RedisCluster, port: int) -> None:
    """SIGKILL the server on ``port`` (its fixture's stop then finds it gone)."""
    os.kill(cluster.pid(port), signal.SIGKILL)


@dataclass
class ClusterWriter:
    """Commands sent to the master of their first key's slot (MOVED: map refreshed)."""

    cluster: RedisCluster
    owners: dict[int, int] = field(default_factory=dict)
    clients: dict[int, RespClient] = field(default_factory=dict)

    def refresh(self) -> None:
        self.owners = {slot: s["master"] for s in self.cluster.shards() for slot in s["slots"]}

    def _client(self, port: int) -> RespClient:
        if port not in self.clients:
            self.clients[port] = self.cluster.client(port)
        return self.clients[port]

    def execute(self, *args: Arg) -> Any:
        key = args[1] if isinstance(args[1], bytes) else str(args[1]).encode()
        for _attempt in range(50):
            if not self.owners:
                self.refresh()
            port = self.owners[key_slot(key)]
            try:
                return self._client(port).execute(*args)
            except RespError as exc:
                if not str(exc).startswith(("MOVED", "CLUSTERDOWN", "TRYAGAIN")):
                    raise
            except (OSError, ConnectionError):
                self.clients.pop(port, None)
            self.owners = {}
            time.sleep(0.2)
        raise AssertionError(f"no master took {args[:2]!r}")

    def run(self, commands: Sequence[Sequence[Arg]]) -> None:
        for command in commands:
            self.execute(*command)

    def pipeline(self, commands: Sequence[Sequence[Arg]]) -> None:
        """Many commands, pipelined to each master (the map must be current: no MOVED)."""
        self.refresh()
        by_port: dict[int, list[Sequence[Arg]]] = {}
        for command in commands:
            key = command[1] if isinstance(command[1], bytes) else str(command[1]).encode()
            by_port.setdefault(self.owners[key_slot(key)], []).append(command)
        for port, batch in by_port.items():
            for reply in self._client(port).pipeline(batch):
                assert not isinstance(reply, RespError), reply

    def close(self) -> None:
        for client in self.clients.values():
            client.close()
        self.clients = {}


def workload(seed: int, count: int) -> list[list[Arg]]:
    """``count`` commands over keys spread on every slot (some sharing a hash tag)."""
    commands: list[list[Arg]] = []
    for i in range(count):
        n = (i * 7919 + seed) % 4000
        kind = i % 6
        if kind == 0:
            commands.append(["SET", f"s:{n}", f"v{i}"])
        elif kind == 1:
            commands.append(["HSET", f"h:{n % 300}", f"f{i % 13}", str(i)])
        elif kind == 2:
            commands.append(["RPUSH", f"{{tag{n % 40}}}:list", str(i)])
        elif kind == 3:
            commands.append(["SADD", f"set:{n % 500}", str(i % 97)])
        elif kind == 4:
            commands.append(["ZADD", f"z:{n % 200}", str(i % 31), f"m{i % 17}"])
        else:
            commands.append(["DEL", f"s:{(n + 11) % 4000}"])
    return commands


def cluster_dump(cluster: RedisCluster) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for port in cluster.masters():
        with cluster.client(port) as client:
            records += redis_dump(client, databases=1)
    return records


def shard_checkpoints(rkv: LocalCluster, prefix: str = "redis/") -> dict[str, dict[str, Any]]:
    """The shards' checkpoints: shard id -> checkpoint."""
    import json  # noqa: PLC0415

    node = rkv.leader()
    answer = http("GET", f"{node.url}/v1/checkpoints?encoding=utf-8").json()
    found = {}
    for item in answer["checkpoints"]:
        name = item["name"]
        if name.startswith(f"redis:{prefix}@"):
            found[name.split("@", 1)[1]] = json.loads(item["value"])
    return found


def wait_cluster_caught_up(
    rkv: LocalCluster, cluster: RedisCluster, replicator: Replicator, timeout: float = 120.0
) -> None:
    """Every master's offset is committed in the checkpoint of the shard holding it."""
    deadline = time.monotonic() + timeout
    behind: list[str] = []
    while time.monotonic() < deadline:
        if replicator.process is not None and replicator.process.poll() is not None:
            raise AssertionError(f"the replicator exited:\n{replicator.output()[-4000:]}")
        checkpoints = shard_checkpoints(rkv)
        behind = []
        for shard in cluster.shards():
            target = master_offset_of(cluster, shard["master"])
            mine = [c for c in checkpoints.values() if shard["master_id"] in c.get("nodes", [])]
            if len(mine) != 1 or mine[0]["state"] != "streaming" or mine[0]["offset"] < target:
                behind.append(f"{shard['master']}: {mine} < {target}")
        if not behind:
            return
        time.sleep(0.3)
    raise AssertionError(
        f"not caught up within {timeout}s: {behind}\n{replicator.output()[-4000:]}"
    )


def assert_cluster_same(rkv: LocalCluster, cluster: RedisCluster, replicator: Replicator) -> None:
    wait_cluster_caught_up(rkv, cluster, replicator)
    started = time.monotonic()
    expected = cluster_dump(cluster)
    dumped = rkv_dump(rkv)
    problems = compare_dumps(dumped, expected, int((time.monotonic() - started) * 1000))
    assert not problems, "\n".join(problems[:20]) + "\n" + replicator.output()[-3000:]
    assert len(expected) > 100
