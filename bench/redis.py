"""Redis replicator benchmark (not a test): full-sync speed and the SET rate it keeps up with.

    python -m bench.redis [--keys 1000000] [--rates 5000,10000,20000,40000]
                          [--step-seconds 20] [--out bench/results]
                          [--parts takeover,failover,full-sync,steady]
                          [--takeover-kills 10] [--lock-ttl 10] [--failovers 2]

Starts a redis-server and a 3-node rkv cluster (``rkv up``) on loopback, then:

1. full sync of ``--keys`` string keys (DEBUG POPULATE) and of the same number
   of mixed keys (strings, hashes, sets, lists, zsets): seconds from starting
   `rkv redis-replicate` until its checkpoint is streaming at the master's
   offset, and keys/s. Target: 1M string keys in <= 60 s.
2. steady state: SETs at fixed rates (pipelined, paced), ``--step-seconds``
   each; for every rate the replicator's lag (master offset - committed
   offset) is sampled; it keeps up when the lag at the end of the step is no
   larger than a second's worth of commands. Then one unpaced redis-benchmark
   burst and the rate at which the replicator drained it. Target: keeps up
   with >= 20k SET/s.
3. catch-up time after a Sentinel failover (bench/redis_failover.py): from
   ``SENTINEL FAILOVER`` until the replicator's checkpoint reaches the new
   master's offset, and whether it continued (+CONTINUE) or resynced in full;
   ``--failovers`` rounds (the section takes about 30 s with 2, the rkv
   cluster's start included).

4. takeover (bench/redis_takeover.py): two replicators on one prefix under
   writes, ``--takeover-kills`` times SIGKILL of the active one: seconds until
   the standby holds the lock and until it resumed and caught up, and the
   commands lost or repeated (must be 0).

``--parts`` picks among full-sync (1), steady (2, which loads the mixed data
first), failover (3) and takeover (4); all by default.

``--scenario cluster`` runs only the comparison of bench/redis_cluster.py
instead (a short run): the SET rate kept up with replicating 3 Redis Cluster
masters against 1 master (``--rates``, ``--step-seconds``, ``--burst``).

Prints tables; writes redis.json and redis.html (redis-cluster.json for the
cluster scenario) to --out. Every process is stopped by PID at the end, also on
errors and Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.procs import Processes, interrupt_on_signals
from bench.redis_failover import catch_up_after_failover
from bench.redis_support import Checkpoints, Resp
from bench.redis_takeover import render_takeover, takeover
from bench.rkv_cluster import RkvCluster, find_rkv, start
from bench.support import BenchError, free_ports, progress, wait_until

PARTS = ("takeover", "failover", "full-sync", "steady")
FULL_SYNC_TARGET_S = 60.0
KEEP_UP_TARGET = 20_000


def replicator_argv(cluster: RkvCluster, port: int, prefix: str) -> list[str]:
    source = f"redis://127.0.0.1:{port}"
    urls = ",".join(cluster.urls)
    return [
        find_rkv(), "redis-replicate", "--source", source, "--url", urls,
        "--status-interval", "5", "--prefix", prefix,
    ]  # fmt: skip


def populate_mixed(redis: Resp, keys: int) -> None:
    batch: list[list[str]] = []
    for i in range(keys):
        kind = i % 5
        name = f"m:{i}"
        if kind == 0:
            batch.append(["SET", name, f"value-{i}"])
        elif kind == 1:
            batch.append(["HSET", name, "a", str(i), "b", "x" * 16, "c", "y"])
        elif kind == 2:
            batch.append(["SADD", name, "p", "q", str(i)])
        elif kind == 3:
            batch.append(["RPUSH", name, "1", "2", str(i)])
        else:
            batch.append(["ZADD", name, "1", "a", "2.5", "b", str(i), "c"])
        if len(batch) >= 5000:
            redis.pipeline(batch)
            batch = []
    if batch:
        redis.pipeline(batch)


def full_sync(
    procs: Processes, cluster: RkvCluster, redis: Resp, port: int, work: Path, label: str
) -> dict[str, Any]:
    keys = int(redis.call("DBSIZE"))
    checkpoints = Checkpoints(cluster, f"{label}/")
    target = redis.offset()
    progress(f"full sync ({label}): {keys:,} keys")
    started = time.monotonic()
    replicator = procs.start(
        f"replicator ({label})",
        replicator_argv(cluster, port, f"{label}/"),
        work / f"replicator-{label}.log",
    )
    seconds = 0.0

    def done() -> bool:
        nonlocal seconds
        found = checkpoints.read()
        if found and found["state"] == "streaming" and found["offset"] >= target:
            seconds = time.monotonic() - started
            return True
        return False

    wait_until(f"the full sync ({label})", done, 3600, replicator.exited)
    procs.stop(replicator)
    result = {"label": label, "keys": keys, "seconds": round(seconds, 2)}
    result["keys_per_s"] = round(keys / seconds)
    progress(f"full sync ({label}): {keys:,} keys in {seconds:.1f}s ({keys / seconds:,.0f} keys/s)")
    return result


def steady_state(
    procs: Processes,
    cluster: RkvCluster,
    redis: Resp,
    port: int,
    work: Path,
    rates: list[int],
    step: float,
) -> list[dict[str, Any]]:
    checkpoints = Checkpoints(cluster, "mixed/")
    replicator = procs.start(
        "replicator (steady)",
        replicator_argv(cluster, port, "mixed/"),
        work / "replicator-steady.log",
    )
    wait_until(
        "the replicator", lambda: checkpoints.committed() >= redis.offset(), 3600, replicator.exited
    )
    rows: list[dict[str, Any]] = []
    command_bytes = len(b"*3\r\n$3\r\nSET\r\n$10\r\nkey:000000\r\n$16\r\n") + 16 + 2
    for rate in rates:
        progress(f"steady state: {rate:,} SET/s for {step:.0f}s")
        sent = 0
        lags: list[int] = []
        started = time.monotonic()
        next_sample = started + 1.0
        while (now := time.monotonic()) - started < step:
            due = int((now - started) * rate) - sent
            if due > 0:
                redis.pipeline(
                    [["SET", f"key:{(sent + i) % 100_000:06d}", "v" * 16] for i in range(due)]
                )
                sent += due
            if now >= next_sample:
                lags.append(redis.offset() - checkpoints.committed())
                next_sample += 1.0
            time.sleep(0.005)
        achieved = sent / (time.monotonic() - started)
        final_lag = redis.offset() - checkpoints.committed()
        kept_up = final_lag <= rate * command_bytes
        rows.append(
            {
                "rate": rate,
                "achieved": round(achieved),
                "max_lag_bytes": max(lags or [0]),
                "final_lag_bytes": final_lag,
                "kept_up": kept_up,
            }
        )
        progress(f"  lag at the end {final_lag:,} bytes: {'kept up' if kept_up else 'fell behind'}")
        wait_until(
            "catching up", lambda: checkpoints.committed() >= redis.offset(), 600, replicator.exited
        )
    benchmark = shutil.which("redis-benchmark")
    if benchmark is not None:
        requests = 200_000
        progress(f"redis-benchmark burst: {requests:,} SETs")
        offset_before = checkpoints.committed()
        started = time.monotonic()
        subprocess.run(
            [benchmark, "-p", str(port), "-t", "set", "-n", str(requests), "-r", "100000", "-q"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        produced = time.monotonic() - started
        target = redis.offset()
        wait_until(
            "draining the burst",
            lambda: checkpoints.committed() >= target,
            1200,
            replicator.exited,
        )
        drained = time.monotonic() - started
        rows.append(
            {
                "rate": "redis-benchmark",
                "achieved": round(requests / produced),
                "max_lag_bytes": target - offset_before,
                "final_lag_bytes": 0,
                "kept_up": False,
                "drain_rate": round(requests / drained),
            }
        )
        progress(
            f"  produced at {requests / produced:,.0f}/s, drained at {requests / drained:,.0f}/s"
        )
    procs.stop(replicator)
    return rows


def render(results: dict[str, Any]) -> tuple[str, str]:
    lines: list[str] = []
    if results["full_sync"]:
        lines += ["full sync", f"{'data':>10} {'keys':>10} {'seconds':>9} {'keys/s':>9}"]
        for row in results["full_sync"]:
            lines.append(
                f"{row['label']:>10} {row['keys']:>10,} {row['seconds']:>9.1f} "
                f"{row['keys_per_s']:>9,}"
            )
        lines += [f"target: 1M string keys <= {FULL_SYNC_TARGET_S:.0f} s", ""]
    if results["steady"]:
        lines += [
            "steady state",
            f"{'SET/s':>16} {'achieved':>9} {'max lag B':>11} {'end lag B':>11} {'kept up':>8}",
        ]
        for row in results["steady"]:
            extra = f"  drained at {row['drain_rate']:,}/s" if "drain_rate" in row else ""
            lines.append(
                f"{row['rate']!s:>16} {row['achieved']:>9,} {row['max_lag_bytes']:>11,} "
                f"{row['final_lag_bytes']:>11,} {row['kept_up']!s:>8}{extra}"
            )
        lines += [f"target: keeps up with >= {KEEP_UP_TARGET:,} SET/s", ""]
    if results["failover"]:
        lines += ["catch-up after a Sentinel failover", f"{'round':>6} {'seconds':>9} path"]
        for row in results["failover"]:
            lines.append(f"{row['round']:>6} {row['seconds']:>9.2f} {row['path']}")
        lines.append("")
    if "takeover" in results:
        lines += render_takeover(results["takeover"])
    table = "\n".join(lines).rstrip()
    html = (
        "<!doctype html><meta charset=utf-8><title>rkv redis replicator benchmark</title>"
        f"<h1>rkv redis replicator benchmark</h1><pre>{table}</pre>"
    )
    return table, html


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.redis", description=__doc__)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--rates", default="5000,10000,20000,40000")
    parser.add_argument("--step-seconds", type=float, default=20.0)
    parser.add_argument("--failovers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"which measurements, comma-separated (default: all of {','.join(PARTS)})",
    )
    parser.add_argument("--takeover-kills", type=int, default=10)
    parser.add_argument("--lock-ttl", type=int, default=10, help="the replicators' --lock-ttl")
    parser.add_argument("--scenario", choices=("all", "cluster"), default="all")
    parser.add_argument("--burst", type=int, default=100_000)
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    if not parts <= set(PARTS):
        parser.error(f"--parts: choose among {','.join(PARTS)}")
    rates = [int(r) for r in args.rates.split(",")]
    interrupt_on_signals()
    if args.scenario == "cluster":
        _cluster_scenario(args, rates)
        return
    work = Path(tempfile.mkdtemp(prefix="rkv-bench-redis-"))
    results: dict[str, Any] = {"keys": args.keys, "full_sync": [], "steady": [], "failover": []}
    try:
        with Processes() as procs:
            port = free_ports(1)[0]
            server_argv = [
                    "redis-server",
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(work),
                    "--enable-debug-command",
                    "local",
                    "--repl-backlog-size",
                    "256mb",
            ]  # fmt: skip
            (work / "rkv").mkdir()
            cluster = start(procs, work / "rkv")
            if "failover" in parts:
                results["failover"] = catch_up_after_failover(procs, cluster, work, args.failovers)
            if parts & {"takeover", "full-sync", "steady"}:
                procs.start("redis-server", server_argv, work / "redis.log")
                time.sleep(0.5)
                redis = Resp(port)
            if "takeover" in parts:
                results["takeover"] = takeover(
                    procs, cluster, port, work, args.takeover_kills, args.lock_ttl
                )
            for label in ("strings", "mixed"):
                if "full-sync" not in parts and not (label == "mixed" and "steady" in parts):
                    continue
                redis.call("FLUSHALL")
                if label == "strings":
                    redis.call("DEBUG", "POPULATE", str(args.keys), "key", "16")
                else:
                    populate_mixed(redis, args.keys)
                results["full_sync"].append(full_sync(procs, cluster, redis, port, work, label))
                if label == "mixed" and "steady" in parts:
                    results["steady"] = steady_state(
                        procs, cluster, redis, port, work, rates, args.step_seconds
                    )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table, html = render(results)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "redis.json").write_text(json.dumps(results, indent=2))
    (args.out / "redis.html").write_text(html)
    progress(f"wrote {args.out / 'redis.json'} and {args.out / 'redis.html'}")


def _cluster_scenario(args: argparse.Namespace, rates: list[int]) -> None:
    from bench import redis_cluster  # noqa: PLC0415

    work = Path(tempfile.mkdtemp(prefix="rkv-bench-redis-cluster-"))
    try:
        with Processes() as procs:
            (work / "rkv").mkdir()
            cluster = start(procs, work / "rkv")
            rows = redis_cluster.keep_up(procs, cluster, work, rates, args.step_seconds, args.burst)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(redis_cluster.render(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "redis-cluster.json").write_text(json.dumps(rows, indent=2))
    progress(f"wrote {args.out / 'redis-cluster.json'}")


if __name__ == "__main__":
    try:
        main()
    except BenchError as error:
        print(f"bench.redis: {error}", file=sys.stderr)
        sys.exit(1)
