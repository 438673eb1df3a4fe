"""The Redis replicator across Sentinel failovers: catch-up time (part of bench/redis.py).

Starts a master and a replica (redis-server), three sentinels (redis-sentinel, down
after 1 s) and `rkv redis-replicate --source redis-sentinel://...` into the given rkv
cluster, with ``KEYS`` mixed keys and a writer sending ``WRITE_RATE`` SET/s to whichever
server the sentinels name. Then, ``rounds`` times: ``SENTINEL FAILOVER`` (as a planned
switchover: the old master's writes paused with CLIENT PAUSE WRITE until it is demoted,
so that none is taken and lost), and the seconds from the failover command until the
replicator's checkpoint is on the new master's replication id at an offset the new
master had reached once the failover was done; the path it took (+CONTINUE or
+FULLRESYNC, from its metrics). The old master is then demoted at once (REPLICAOF, as
an operator would, rather than at the sentinels' next look) and its writes resumed; the
roles swap back and forth.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.procs import Processes, Server
from bench.rkv_cluster import RkvCluster, find_rkv
from bench.support import BenchError, free_ports, http_json, http_request, progress, wait_until
from replication.redis.link.resp_client import RespConnection

NAME = "benchmaster"
KEYS = 20_000
WRITE_RATE = 500
PREFIX = "failover/"


def _call(port: int, *args: str | int) -> Any:
    with RespConnection("127.0.0.1", port, 10.0) as conn:
        return conn.call(*args)


def _info(port: int) -> dict[str, str]:
    text = bytes(_call(port, "INFO", "replication")).decode()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


class _Group:
    def __init__(self, procs: Processes, work: Path) -> None:
        self.master, self.replica, *self.sentinels = free_ports(5)
        common = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        for port, extra in ((self.master, []), (self.replica, ["--replicaof", "127.0.0.1"])):
            directory = work / f"redis-{port}"
            directory.mkdir()
            argv = ["redis-server", "--port", str(port), "--dir", str(directory), *common]
            if extra:
                argv += [*extra, str(self.master)]
            procs.start(f"redis-server {port}", argv, directory / "redis.log")
        for port in self.sentinels:
            directory = work / f"sentinel-{port}"
            directory.mkdir()
            config = directory / "sentinel.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {directory}\n"
                f"sentinel monitor {NAME} 127.0.0.1 {self.master} 2\n"
                f"sentinel down-after-milliseconds {NAME} 1000\n"
                f"sentinel failover-timeout {NAME} 5000\n"
            )
            procs.start(
                f"redis-sentinel {port}", ["redis-sentinel", str(config)], directory / "log"
            )
        wait_until("the sentinels", self.ready, 60)

    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinels)
        return f"redis-sentinel://{hosts}/{NAME}"

    def named_master(self) -> int:
        for port in self.sentinels:
            try:
                return int(_call(port, "SENTINEL", "get-master-addr-by-name", NAME)[1])
            except OSError:
                continue
        raise BenchError("no sentinel answers")

    def ready(self) -> bool:
        try:
            masters = [
                dict(zip(*[iter(_call(p, "SENTINEL", "MASTER", NAME))] * 2, strict=True))
                for p in self.sentinels
            ]
            replica = self.replica if self.named_master() == self.master else self.master
            linked = _info(replica).get("master_link_status") == "up"
        except (OSError, ConnectionError):
            return False
        return linked and all(
            int(m[b"num-slaves"]) >= 1 and int(m[b"num-other-sentinels"]) >= 2 for m in masters
        )


class _Writer:
    def __init__(self, group: _Group) -> None:
        self.group = group
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn: RespConnection | None = None
        i = 0
        while not self.stop.is_set():
            try:
                if conn is None:
                    conn = RespConnection("127.0.0.1", self.group.named_master(), 30.0)
                conn.call("SET", f"w:{i % 10_000}", str(i))
                i += 1
            except Exception:  # refused (READONLY), or the master is gone: ask again
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.05)
            time.sleep(1 / WRITE_RATE)
        if conn is not None:
            conn.close()


def _checkpoint(cluster: RkvCluster) -> dict[str, Any] | None:
    answer = http_json(f"{cluster.leader_url}/v1/checkpoints?encoding=utf-8")
    for item in answer["checkpoints"]:
        if item["name"] == f"redis:{PREFIX}":
            found: dict[str, Any] = json.loads(item["value"])
            return found
    return None


def _switches(metrics_url: str) -> dict[str, float]:
    _status, body = http_request(metrics_url)
    found = {"continue": 0.0, "fullresync": 0.0}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == "rkv_redis_master_switches_total":
                found[sample.labels["path"]] = sample.value
    return found


def _failover(
    group: _Group, cluster: RkvCluster, replicator: Server, metrics_url: str, n: int, last: bool
) -> dict[str, Any]:
    time.sleep(2.0)  # under writes
    old = group.named_master()
    before = _switches(metrics_url)
    _call(old, "CLIENT", "PAUSE", 60_000, "WRITE")
    started = time.monotonic()
    _call(group.sentinels[0], "SENTINEL", "FAILOVER", NAME)
    wait_until("the failover", lambda: group.named_master() != old, 60, replicator.exited)
    new = group.named_master()
    info = _info(new)
    target, replid = int(info["master_repl_offset"]), info["master_replid"]

    def there() -> bool:
        found = _checkpoint(cluster)
        return bool(found and found["replid"] == replid and found["offset"] >= target)

    wait_until("the replicator on the new master", there, 300, replicator.exited)
    seconds = time.monotonic() - started
    after = _switches(metrics_url)
    path = "+CONTINUE" if after["continue"] > before["continue"] else "+FULLRESYNC"
    progress(f"failover {n}: caught up on the new master in {seconds:.2f} s ({path})")

    # Demoted now rather than at the sentinels' next look (up to 10 s), then the
    # paused writes go on (refused: READONLY, so the writer asks the sentinels again).
    _call(old, "REPLICAOF", "127.0.0.1", new)
    _call(old, "CLIENT", "UNPAUSE")
    if not last:
        wait_until("the sentinels", group.ready, 60, replicator.exited)
    return {"round": n, "seconds": round(seconds, 2), "path": path}


def catch_up_after_failover(
    procs: Processes, cluster: RkvCluster, work: Path, rounds: int
) -> list[dict[str, Any]]:
    group = _Group(procs, work)
    for start in range(0, KEYS, 1000):
        batch = [f"f:{i}" for i in range(start, start + 1000)]
        _call(group.master, "MSET", *[x for key in batch for x in (key, key * 3)])
    metrics_port = free_ports(1)[0]
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    argv = [
        find_rkv(), "redis-replicate", "--source", group.url(), "--url", ",".join(cluster.urls),
        "--prefix", PREFIX, "--metrics-listen", f"127.0.0.1:{metrics_port}",
    ]  # fmt: skip
    replicator = procs.start("replicator (sentinel)", argv, work / "replicator-sentinel.log")

    def caught_up(port: int) -> bool:
        found = _checkpoint(cluster)
        info = _info(port)
        return (
            found is not None
            and found["state"] == "streaming"
            and found["replid"] == info["master_replid"]
            and found["offset"] >= int(info["master_repl_offset"])
        )

    wait_until("the replicator", lambda: caught_up(group.master), 300, replicator.exited)
    writer = _Writer(group)
    try:
        rows = [
            _failover(group, cluster, replicator, metrics_url, n, n == rounds)
            for n in range(1, rounds + 1)
        ]
    finally:
        writer.stop.set()
        writer.thread.join(10)
    procs.stop(replicator)
    return rows
