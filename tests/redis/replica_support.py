"""Running `rkv redis-replicate` against a real redis-server and a real rkv cluster,
and comparing what rkv holds with what Redis returns.

:func:`redis_dump` reads a live Redis with plain commands (SCAN, TYPE, GET,
HGETALL, SMEMBERS, LRANGE, ZRANGE WITHSCORES, XRANGE, PTTL) into the JSON
Lines format of `rkv redis-dump` (replication/redis/dump.py), so the two can
be compared record by record.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from replication.redis.dump import line
from tests.redis.conftest import RedisServer, redis_server_binary
from tests.redis.resp_client import RespClient, RespError
from tests.support.cluster import LocalCluster, http

PTTL_TOLERANCE_MS = 5_000


def _pairs(flat: list[bytes]) -> list[tuple[bytes, bytes]]:
    return list(zip(flat[0::2], flat[1::2], strict=True))


def redis_dump(client: RespClient, databases: int = 16) -> list[dict[str, Any]]:
    """Every key of every db as `rkv redis-dump` prints it (parsed JSON)."""
    records: list[dict[str, Any]] = []
    for db in range(databases):
        client.execute("SELECT", db)
        keys: set[bytes] = set()
        cursor = b"0"
        while True:
            cursor, batch = client.execute("SCAN", cursor, "COUNT", 1000)
            keys.update(batch)
            if cursor == b"0":
                break
        for key in sorted(keys):
            kind = str(client.execute("TYPE", key))
            value: Any
            if kind == "string":
                value = client.execute("GET", key)
            elif kind == "hash":
                value = dict(_pairs(client.execute("HGETALL", key)))
            elif kind == "set":
                value = sorted(client.execute("SMEMBERS", key))
            elif kind == "list":
                value = client.execute("LRANGE", key, 0, -1)
            elif kind == "zset":
                flat = client.execute("ZRANGE", key, 0, -1, "WITHSCORES")
                value = [(m, float(s)) for m, s in _pairs(flat)]
            elif kind == "stream":
                value = [
                    (entry_id.decode(), _pairs(fields))
                    for entry_id, fields in client.execute("XRANGE", key, "-", "+")
                ]
            else:
                continue  # the key expired between SCAN and TYPE
            pttl = client.execute("PTTL", key)
            records.append(json.loads(line(db, key, kind, value, int(pttl))))
    client.execute("SELECT", 0)
    return records


def port_closed(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


def start_on_port(directory: Path, port: int) -> subprocess.Popen[bytes]:
    """Restart a redis-server on a known port and directory (its dump.rdb is loaded);
    the caller stops it by PID."""
    command = [
            redis_server_binary(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
            "--dbfilename",
            "dump.rdb",
            "--logfile",
            str(directory / "redis-restarted.log"),
    ]  # fmt: skip
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with RespClient("127.0.0.1", port, timeout=2) as client:
                if client.execute("PING") == "PONG":
                    return process
        except (OSError, RespError, ConnectionError):
            pass
        time.sleep(0.1)
    process.kill()
    raise AssertionError(f"redis-server did not restart on port {port}")


def compare_dumps(
    rkv: list[dict[str, Any]], redis: list[dict[str, Any]], slack_ms: int = 0
) -> list[str]:
    """Differences between two dumps (pttl within a tolerance, plus ``slack_ms``: the
    time between the two dumps); empty when equal."""
    problems: list[str] = []
    by_key = {(r["db"], json.dumps(r["key"])): r for r in rkv}
    expected = {(r["db"], json.dumps(r["key"])): r for r in redis}
    for name in sorted(set(by_key) | set(expected)):
        mine, theirs = by_key.get(name), expected.get(name)
        if mine is None or theirs is None:
            problems.append(f"{name}: only in {'redis' if mine is None else 'rkv'}")
            continue
        for field in ("type", "value"):
            if mine[field] != theirs[field]:
                problems.append(
                    f"{name} {field}: rkv {mine[field]!r:.300} != {theirs[field]!r:.300}"
                )
        if (mine["pttl"] == -1) != (theirs["pttl"] == -1) or (
            abs(mine["pttl"] - theirs["pttl"]) > PTTL_TOLERANCE_MS + slack_ms
        ):
            problems.append(f"{name} pttl: rkv {mine['pttl']} != {theirs['pttl']}")
    return problems


class Replicator:
    """`rkv redis-replicate` as a child process, stopped by PID."""

    def __init__(self, server: RedisServer, cluster: LocalCluster, log: Path, *extra: str):
        self.server = server
        self.cluster = cluster
        self.log = log
        self.extra = list(extra)
        self.process: subprocess.Popen[bytes] | None = None
        self.source = f"redis://127.0.0.1:{server.port}"

    def start(self, source: str | None = None) -> None:
        urls = ",".join(n.url for n in self.cluster.nodes)
        command = [
            sys.executable, "-m", "node.cli", "redis-replicate",
            "--source", source or self.source, "--url", urls, "--status-interval", "1",
            *self.extra,
        ]  # fmt: skip
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    def kill(self, sig: int = signal.SIGKILL) -> int:
        assert self.process is not None
        os.kill(self.process.pid, sig)
        return self.process.wait(30)

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(15)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def checkpoint(cluster: LocalCluster, prefix: str = "redis/") -> dict[str, Any] | None:
    node = cluster.leader()
    answer = http("GET", f"{node.url}/v1/checkpoints?encoding=utf-8").json()
    for item in answer["checkpoints"]:
        if item["name"] == f"redis:{prefix}":
            found: dict[str, Any] = json.loads(item["value"])
            return found
    return None


def master_offset(client: RespClient) -> int:
    info = client.execute("INFO", "replication").decode()
    for raw in info.splitlines():
        if raw.startswith("master_repl_offset:"):
            return int(raw.split(":")[1])
    raise AssertionError(info)


def wait_caught_up(
    cluster: LocalCluster, client: RespClient, replicator: Replicator, timeout: float = 120.0
) -> dict[str, Any]:
    """Wait until the checkpoint is streaming at the master's current offset."""
    deadline = time.monotonic() + timeout
    last: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        target = master_offset(client)
        last = checkpoint(cluster)
        if last is not None and last["state"] == "streaming" and last["offset"] >= target:
            return last
        if replicator.process is not None and replicator.process.poll() is not None:
            raise AssertionError(f"the replicator exited:\n{replicator.output()[-3000:]}")
        time.sleep(0.2)
    raise AssertionError(
        f"not caught up within {timeout}s: checkpoint {last}, master at {master_offset(client)}"
        f"\n{replicator.output()[-3000:]}"
    )


def rkv_dump(cluster: LocalCluster, *extra: str) -> list[dict[str, Any]]:
    urls = ",".join(n.url for n in cluster.nodes)
    done = subprocess.run(
        [sys.executable, "-m", "node.cli", "redis-dump", "--url", urls, *extra],
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return [json.loads(raw) for raw in done.stdout.decode().splitlines() if raw]


def assert_same(cluster: LocalCluster, server: RedisServer, replicator: Replicator) -> None:
    """Once the replicator has caught up, rkv's dump equals Redis's."""
    with server.client() as client:
        wait_caught_up(cluster, client, replicator)
        started = time.monotonic()
        expected = redis_dump(client)
    dumped = rkv_dump(cluster)
    # TTLs count down while the two dumps run
    slack_ms = int((time.monotonic() - started) * 1000)
    problems = compare_dumps(dumped, expected, slack_ms)
    assert not problems, "\n".join(problems[:20]) + "\n" + replicator.output()[-2000:]
    assert expected  # the comparison compared something


def replicate_status(cluster: LocalCluster, prefix: str = "redis/") -> str:
    """What `rkv redis-replicate --status` prints about ``prefix``."""
    urls = ",".join(n.url for n in cluster.nodes)
    done = subprocess.run(
        [sys.executable, "-m", "node.cli", "redis-replicate", "--status", "--url", urls,
         "--prefix", prefix],
        capture_output=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.decode()
