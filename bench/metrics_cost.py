"""The hot-path cost of metrics (not a test): PUT/s and GET/s with ``--metrics on`` and off.

    python bench/metrics_cost.py [--duration 6] [--connections 32] [--rounds 2]

Starts a 3-node ``rkv up`` cluster with RKV_METRICS=on, loads it with wrk (PUTs, then
linearizable GETs of the preloaded keys, both on random keys among KEYS and to the
leader; bench/wrk/kv.lua), stops it,
and does the same with RKV_METRICS=off. Rounds alternate the order (on off, off on...)
so that a drift of the machine's load weighs on both alike; the table shows the mean
of each. On a shared machine a difference of a few percent is noise unless repeated
runs agree. About rounds * 2 * (start + 2 * duration) seconds in all.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

if __name__ == "__main__":
    # Run as a script, bench/ is sys.path[0] and bench/http.py would shadow the stdlib's.
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != _here]
    sys.path.insert(0, str(_here.parent))

from bench import rkv_cluster
from bench.loadgen import REST, Load, preload
from bench.procs import Processes, interrupt_on_signals
from bench.support import BenchError, progress
from bench.wrk_runner import find_wrk, run_wrk

KEYS = 1000


@dataclass(frozen=True)
class Rates:
    put: float
    get: float


def measure(mode: str, duration: float, connections: int, wrk: str) -> Rates:
    scratch = Path(tempfile.mkdtemp(prefix=f"rkv-bench-metrics-{mode}-"))
    try:
        with Processes() as procs:
            env = os.environ | {"RKV_METRICS": mode}
            cluster = rkv_cluster.start(procs, scratch, env=env)
            leader = cluster.leader_url
            preload(REST, leader, "get-", KEYS)

            def load(workload: str, op: str, extra: str, prefix: str, seconds: float) -> float:
                spec = Load("rkv", workload, op, "rest", (leader,), "/v1/kv/", extra, prefix,
                            KEYS, connections, 2, seconds)  # fmt: skip
                result = run_wrk(wrk, spec)
                if result.error_count:
                    progress(f"{mode} {workload}: errors {result.errors}")
                return result.ops

            load("put", "put", "", "warmup-", 1.0)
            rates = Rates(
                put=load("put", "put", "", f"put-{mode}-", duration),
                get=load("get_linearizable", "get", REST.linearizable, "get-", duration),
            )
            progress(f"metrics {mode}: {rates.put:,.0f} PUT/s, {rates.get:,.0f} GET/s")
            return rates
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def mean(runs: list[Rates]) -> Rates:
    return Rates(sum(r.put for r in runs) / len(runs), sum(r.get for r in runs) / len(runs))


def table(on: Rates, off: Rates) -> str:
    lines = ["| workload | metrics on | metrics off | on vs off |", "|---|---|---|---|"]
    for name, a, b in (("PUT/s", on.put, off.put), ("GET/s (linearizable)", on.get, off.get)):
        change = (a - b) / b * 100 if b else float("nan")
        lines.append(f"| {name} | {a:,.0f} | {b:,.0f} | {change:+.1f} % |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="PUT/s and GET/s with metrics on and off.")
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per run (6)")
    parser.add_argument("--connections", type=int, default=32, help="default 32")
    parser.add_argument("--rounds", type=int, default=2, help="on/off pairs (2)")
    args = parser.parse_args(argv)
    interrupt_on_signals()
    wrk = find_wrk()
    if wrk is None:
        progress("FAILED: wrk is missing and could not be installed")
        sys.exit(1)
    runs: dict[str, list[Rates]] = {"on": [], "off": []}
    try:
        for i in range(max(1, args.rounds)):
            for mode in ("on", "off") if i % 2 == 0 else ("off", "on"):
                runs[mode].append(measure(mode, args.duration, args.connections, wrk))
    except BenchError as error:
        progress(f"FAILED: {error}")
        sys.exit(1)
    print(table(mean(runs["on"]), mean(runs["off"])))


if __name__ == "__main__":
    main()
