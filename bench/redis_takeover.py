"""The Redis replicator's standby taking over (a part of ``python -m bench.redis``).

Two `rkv redis-replicate` on the prefix ``ha/`` (docs/REDIS.md, "High
availability") while a writer sends ``MULTI INCR ha:counter RPUSH ha:list <i>
EXEC`` to the master at a steady rate. ``kills`` times: SIGKILL the one holding
the lock, measure from the kill until a standby holds it (``elected``) and
until rkv's checkpoint passes the master's offset at that moment (``resumed``:
the new one continued the stream and caught up what was written while nobody
replicated), then start the killed
one again as the next standby. At the end the counter and the list in rkv are
compared with the master's: a lost command shows as a shorter list, a repeated one
as a duplicate element. Every takeover must be a partial resync (``+CONTINUE``).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from bench.procs import Processes, Server
from bench.redis_support import Checkpoints, Resp
from bench.rkv_cluster import RkvCluster, find_rkv
from bench.support import BenchError, progress, wait_until
from http_api.client import RkvClient
from replication.redis.standby import lock_name

PREFIX = "ha/"
WRITES_PER_SECOND = 500


class _Writer:
    def __init__(self, port: int) -> None:
        self.port = port
        self.sent = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="bench-writer", daemon=True)

    def _run(self) -> None:
        try:
            redis = Resp(self.port)
            started = time.monotonic()
            while not self.stop.is_set():
                due = int((time.monotonic() - started) * WRITES_PER_SECOND) - self.sent
                if due > 0:
                    block: list[list[str]] = []
                    for i in range(self.sent, self.sent + due):
                        block += [["MULTI"], ["INCR", "ha:counter"], ["RPUSH", "ha:list", str(i)]]
                        block.append(["EXEC"])
                    redis.pipeline(block)
                    self.sent += due
                time.sleep(0.01)
        except BaseException as error:  # reported by the benchmark
            self.error = error


def _argv(cluster: RkvCluster, port: int, lock_ttl: int) -> list[str]:
    return [
        find_rkv(), "redis-replicate", "--source", f"redis://127.0.0.1:{port}",
        "--url", ",".join(cluster.urls), "--prefix", PREFIX, "--status-interval", "5",
        "--lock-ttl", str(lock_ttl),
    ]  # fmt: skip


def _rkv_values(cluster: RkvCluster) -> tuple[int, list[str]]:
    done = subprocess.run(
        [find_rkv(), "redis-dump", "--url", ",".join(cluster.urls), "--prefix", PREFIX],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    counter, items = 0, []
    for raw in done.stdout.splitlines():
        record = json.loads(raw)
        if record["key"] == "ha:counter":
            counter = int(record["value"])
        elif record["key"] == "ha:list":
            items = [str(v) for v in record["value"]]
    return counter, items


def takeover(
    procs: Processes, cluster: RkvCluster, port: int, work: Path, kills: int, lock_ttl: int
) -> dict[str, Any]:
    redis = Resp(port)
    name = lock_name(PREFIX.encode())
    client = RkvClient(list(cluster.urls))
    checkpoints = Checkpoints(cluster, PREFIX)
    replicators: dict[int, Server] = {}
    started = 0

    def start() -> Server:
        nonlocal started
        started += 1
        server: Server = procs.start(
            f"replicator {started} (ha)",
            _argv(cluster, port, lock_ttl),
            work / f"replicator-ha-{started}.log",
        )
        replicators[server.pid] = server
        return server

    redis.call("SET", "ha:start", "1")  # an offset past 0 for the first sync to reach
    first = start()
    wait_until(
        "the first replicator's full sync",
        lambda: checkpoints.committed() >= redis.offset() > 0,
        300,
        first.exited,
    )
    _wait_standing_by(start())
    writer = _Writer(port)
    writer.thread.start()
    elected: list[float] = []
    resumed: list[float] = []
    try:
        for kill in range(1, kills + 1):
            time.sleep(2.0)
            holder = client.leader(name)
            if holder is None:
                raise BenchError("nobody holds the replicator's lock")
            pid = int(json.loads(holder.value)["pid"])
            victim = replicators.pop(pid)
            target = 0
            os.kill(pid, signal.SIGKILL)
            killed_at = time.monotonic()
            victim.process.wait(30)
            procs.stop(victim)
            took = None
            while True:
                now = time.monotonic()
                if took is None:
                    leader = client.leader(name)
                    if leader is not None and leader.token != holder.token:
                        took = now - killed_at
                        target = redis.offset()  # what was written until the new one leads
                if took is not None and checkpoints.committed() >= target:
                    break
                if now - killed_at > lock_ttl + 120:
                    raise BenchError(f"no takeover within {lock_ttl + 120} s of kill {kill}")
                time.sleep(0.05)
            elected.append(took)
            resumed.append(time.monotonic() - killed_at)
            progress(
                f"kill {kill}/{kills}: elected after {took:.2f} s, resumed {resumed[-1]:.2f} s"
            )
            _wait_standing_by(start())
    finally:
        writer.stop.set()
        writer.thread.join(30)
    if writer.error is not None:
        raise BenchError(f"the writer failed: {writer.error}")
    final = redis.offset()
    wait_until("the last catch-up", lambda: checkpoints.committed() >= final, 300)
    client.close()
    counter, items = _rkv_values(cluster)
    master_counter = int(redis.call("GET", "ha:counter"))
    full_resyncs = sum(
        log.read_text(errors="replace").count("full resync (+FULLRESYNC)")
        for log in work.glob("replicator-ha-*.log")
    )
    result = {
        "kills": kills,
        "lock_ttl": lock_ttl,
        "elected_p50": round(statistics.median(elected), 2),
        "elected_max": round(max(elected), 2),
        "resumed_p50": round(statistics.median(resumed), 2),
        "resumed_max": round(max(resumed), 2),
        "commands": master_counter,
        "lost": master_counter - len(set(items)),
        "repeated": len(items) - len(set(items)),
        "counter_equal": counter == master_counter,
        "full_resyncs_after_the_first": full_resyncs - 1,
    }
    progress(f"takeover: {result}")
    return result


def _wait_standing_by(server: Server) -> None:
    wait_until(
        f"{server.name} standing by",
        lambda: "standing by" in server.log.read_text(errors="replace"),
        120,
        server.exited,
    )


def render_takeover(row: dict[str, Any]) -> list[str]:
    return [
        f"standby takeover ({row['kills']} kills -9 of the active replicator, --lock-ttl "
        f"{row['lock_ttl']} s, writes at {WRITES_PER_SECOND}/s)",
        f"{'':>22} {'p50 s':>7} {'max s':>7}",
        f"{'elected':>22} {row['elected_p50']:>7.2f} {row['elected_max']:>7.2f}",
        f"{'resumed and caught up':>22} {row['resumed_p50']:>7.2f} {row['resumed_max']:>7.2f}",
        f"commands {row['commands']:,}: lost {row['lost']}, repeated {row['repeated']}, "
        f"counter equal {row['counter_equal']}, full resyncs after the first "
        f"{row['full_resyncs_after_the_first']}",
        "target: 0 lost, 0 repeated; takeover within the lock's TTL plus a few seconds",
    ]
