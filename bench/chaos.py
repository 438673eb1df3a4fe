"""Chaos campaigns (not a test): a workload under scheduled faults, then every check.

    python -m bench.chaos [--duration 300] [--nemesis all|kill,pause,...] [--seed N]
                          [--workers 6] [--keys 5] [--lock-clients 4] [--out bench/results]
                          [--node-arg=--http-workers=2 ...] [--lazy-fs strict|journal]

Starts a 3-node cluster of real processes whose raft links go through a TCP
proxy (tests/chaos/rig/netfault.py, so partitions need no root), runs
tests/chaos/rig/campaign.py: clients contend on a few keys (reads at every
consistency level, writes, compare-and-sets) and idempotent producers
increment a counter, while nemeses picked by the seeded RNG are injected,
held and healed (kill -9 and restart, SIGSTOP/SIGCONT, partitions, a
full-cluster crash, a wiped follower rebuilt from the leader, forced
compactions). With --lock-clients N (default 4; 0: none) N lock client processes
also contend for one lock and write under it with fencing tokens
(tests/chaos/rig/lock_workload.py), and two more nemeses pause the holder past its
lease's TTL or kill it. Then it heals everything and checks linearizability per
key, stale reads, lost acknowledged writes, replica convergence, the counter, and
the lock's tokens and fenced writes (tests/chaos/rig/lock_checker.py).
With --lazy-fs MODEL each node's data directory is a lazy FUSE mount of its own
(tests/chaos/rig/lazyfs/: root, /dev/fuse and fuse3 needed), which enables two
more nemeses: ``power`` (a power cut of one node or of all at once: what was
not fsynced is lost) and ``disk-full`` (one node's disk capped, then freed).

Output: progress on stderr; the summary on stdout; chaos.json, chaos.html
(a timeline and every fault and anomaly), history.jsonl and (with lock clients)
lock_history.jsonl in --out. Exit 1
when any check fails. Every node is stopped by PID, also on errors and Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.chaos_report import render
from bench.support import progress
from tests.chaos.rig.campaign import run_campaign
from tests.chaos.rig.lazy_cluster import LazyCluster
from tests.chaos.rig.lazyfs.filesystem import NAME_MODELS
from tests.chaos.rig.nemesis import LAZY_NEMESES, LOCK_NEMESES, NEMESES
from tests.chaos.rig.netfault import ProxiedCluster
from tests.chaos.rig.workload import WorkloadConfig


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of faults")
    parser.add_argument(
        "--nemesis",
        default="all",
        help=f"all, or some of {','.join(NEMESES + LOCK_NEMESES + LAZY_NEMESES)}",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument("--lock-clients", type=int, default=4, help="0: no lock workload")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument(
        "--node-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an extra flag for every node, repeatable (--node-arg=--http-workers=2)",
    )
    parser.add_argument(
        "--lazy-fs",
        choices=NAME_MODELS,
        help="each node's data directory on a lazy FUSE mount (enables power, disk-full) whose "
        "name changes are durable after a directory fsync (strict) or any fsync (journal)",
    )
    args = parser.parse_args(argv)
    known: tuple[str, ...] = NEMESES + LOCK_NEMESES if args.lock_clients > 0 else NEMESES
    known += LAZY_NEMESES if args.lazy_fs else ()
    names = list(known) if args.nemesis == "all" else args.nemesis.split(",")
    unknown = [n for n in names if n not in known]
    if unknown or args.duration <= 0 or args.workers < 1 or args.keys < 1:
        parser.error(
            f"unknown nemesis {unknown} (the lock nemeses need --lock-clients, "
            "power and disk-full need --lazy-fs)"
            if unknown
            else "duration, workers, keys must be > 0"
        )
    if args.lock_clients < 0:
        parser.error("--lock-clients must be 0 or more")
    args.nemeses = names
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="rkv-chaos-"))
    cluster = (
        LazyCluster(scratch / "cluster", extra_args=list(args.node_arg), names=args.lazy_fs)
        if args.lazy_fs
        else ProxiedCluster(scratch / "cluster", extra_args=list(args.node_arg))
    )
    try:
        progress(f"starting a proxied 3-node cluster in {scratch}")
        cluster.start(60)
        result = run_campaign(
            cluster,
            cluster.net,
            duration=args.duration,
            nemeses=args.nemeses,
            seed=args.seed,
            config=WorkloadConfig(keys=args.keys, workers=args.workers),
            progress=progress,
            lock_clients=args.lock_clients,
        )
        args.out.mkdir(parents=True, exist_ok=True)
        result.history.dump(str(args.out / "history.jsonl"))
        if result.lock_workload is not None:
            result.lock_workload.dump(args.out / "lock_history.jsonl")
        meta = {
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "nemeses": ",".join(args.nemeses),
            "node_args": " ".join(args.node_arg),
            "lazy_fs": args.lazy_fs,
        }
        (args.out / "chaos.json").write_text(
            json.dumps({"meta": meta, **result.to_dict()}, indent=1)
        )
        (args.out / "chaos.html").write_text(render(result, meta))
        summary = result.summary()
        width = max(len(k) for k in summary)
        for key, value in summary.items():
            print(f"{key:>{width}}  {value}")
        for anomaly in result.anomalies:
            print(f"ANOMALY {anomaly['kind']} on {anomaly['key']}: {anomaly['message']}")
            for line in anomaly["excerpt"]:
                print("    " + line)
        print(f"report: {args.out / 'chaos.html'}, {args.out / 'chaos.json'}")
        if not result.passed:
            print(f"FAIL; node logs kept in {scratch}", file=sys.stderr)
            sys.exit(1)
    finally:
        cluster.stop()
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
