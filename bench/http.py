"""HTTP benchmark (not a test): rkv's REST API against a 3-member etcd and a trivial server.

    python -m bench.http [--duration 10] [--connections 64] [--sweep 1,64,256] [--quick]
                         [--out bench/results] [--skip-rkv] [--skip-rkv_workers] [--skip-etcd_grpc]
                         [--skip-rkv_secure] [--skip-etcd] [--skip-trivial]
                         [--generator wrk|python]

One system at a time (the others are stopped: they would share the 2 cores), in this
order, rkv and etcd's gRPC client back to back:

- ``rkv``: ``rkv up`` (3 nodes), loaded with wrk over HTTP (installed with apt-get when
  missing; an aiohttp closed-loop generator otherwise, marked ``python*``);
- ``rkv_workers``: the same with ``--http-workers 2`` on every node (RKV_HTTP_WORKERS),
  started once every node's workers are ready;
- ``etcd_grpc``: etcd from Debian's etcd-server (3 members, its own fsync defaults),
  loaded through its native gRPC API by bench/etcd_load, a Go program on clientv3 that
  bench/etcd_native.py builds offline from Debian's golang-go and golang-etcd-server-dev
  (installed when missing) and caches in the temporary directory;
- ``rkv_secure``: rkv with TLS and auth on, the same wrk load over HTTPS with a bearer
  token (bench/rkv_secure.py);
- ``etcd``: the same etcd through its JSON gateway with wrk (the second reference);
- ``trivial``: bench/trivial_server.py, one aiohttp process (the ceiling for Python).

Workloads, each on random keys among ``--keys`` (10,000; PREFIX%06d, preloaded first)
with 100-byte values: ``put`` (PUT to the leader), ``get_linearizable`` (GET to the
leader, linearizable) and ``get_stale`` (GET on one follower, stale; etcd: serializable).
rkv, rkv_workers and etcd_grpc run each at every ``--sweep`` connection count (1, 64, 256: N clients
over N connections, one request in flight each); the references at ``--connections``
and PUT at 1. Every server listens on 127.0.0.1 only and is stopped by PID on exit,
Ctrl-C or error.

Stdout: the runs (ops/s, p50, p99, errors, elections: the largest increase of a
member's leader-change counter on /metrics during the run), then rkv against etcd gRPC
with every ratio and issue 19's targets (PUT 64 >= 1.0x, linearizable GET 64 >= 1.0x,
stale GET 64 >= 1.2x serializable, one-connection PUT p50 <= 1.5x), rkv against the
JSON gateway and the trivial server, and the cost of TLS + auth. Progress on stderr;
bench/results/http.json and http.html. Scratch data goes to the system temporary
directory (set TMPDIR to pick the disk).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any


def _unshadow_stdlib_http() -> None:
    """Run as a script, bench/ is sys.path[0] and this file would shadow the stdlib's http."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    sys.path.insert(0, os.path.dirname(here))


def _use_the_venv() -> None:
    """Started by a Python without aiohttp (the system's): re-run with the checkout's venv."""
    venv_python = os.path.join(sys.path[0], ".venv", "bin", "python")
    if importlib.util.find_spec("aiohttp") is None and os.path.exists(venv_python):
        print(
            f"[bench] no aiohttp in {sys.executable}: re-running with {venv_python}",
            file=sys.stderr,
        )
        os.execv(venv_python, [venv_python, *sys.argv])


if __name__ == "__main__":
    _unshadow_stdlib_http()
    _use_the_venv()

from bench import etcd_native, http_report  # noqa: E402
from bench.elections import elections_between, read_counts  # noqa: E402
from bench.http_compare import WORKLOADS  # noqa: E402
from bench.loadgen import Load, Result, preload, run_python  # noqa: E402
from bench.procs import Processes, interrupt_on_signals  # noqa: E402
from bench.support import BenchError, progress  # noqa: E402
from bench.systems import ETCD_GRPC, RKV, RKV_WORKERS, STARTERS, SYSTEMS, System  # noqa: E402
from bench.wrk_runner import find_wrk, run_wrk, wrk_version  # noqa: E402

Runner = Callable[[Load], Result]


@dataclass(frozen=True)
class Settings:
    duration: float
    connections: int  # the reference systems' connections
    sweep: tuple[int, ...]  # rkv's and etcd_grpc's connection counts
    keys: int  # the key space: preloaded, then random keys among them
    warmup: float  # seconds of unrecorded PUT load before the runs
    out: Path
    systems: tuple[str, ...]
    generator: str
    keep_data: bool


SWEPT = (RKV, RKV_WORKERS, ETCD_GRPC)  # the systems run at every --sweep connection count


def loads_for(system: System, settings: Settings) -> list[Load]:
    api, prefix = system.api, get_prefix(system)

    def load(workload: str, conns: int) -> Load:
        op = "put" if workload == "put" else "get"
        path = api.put_path if op == "put" else api.get_path
        extra = {"get_linearizable": api.linearizable, "get_stale": api.stale}.get(workload, "")
        urls = (system.follower,) if workload == "get_stale" else (system.leader,)
        threads = min(2, conns)
        conns = conns // threads * threads  # wrk gives each thread conns // threads
        return Load(system.name, workload, op, api.kind, urls, path, extra, prefix,
                    settings.keys, conns, threads, settings.duration,
                    system.headers, system.cafile)  # fmt: skip

    if system.name in SWEPT:
        return [load(w, c) for w in WORKLOADS for c in settings.sweep]
    return [load(w, settings.connections) for w in WORKLOADS] + [load("put", 1)]


def warmup_load(system: System, settings: Settings) -> Load:
    """PUTs at --connections on keys of their own (not the preloaded ones)."""
    put = next(x for x in loads_for(system, settings) if x.workload == "put")
    conns = settings.connections // 2 * 2
    return replace(put, connections=conns, threads=2, duration=settings.warmup,
                   key_prefix="warmup-")  # fmt: skip


def get_prefix(system: System) -> str:
    return f"get-{system.name}-"


def measure(system: System, settings: Settings, runner: Runner) -> list[Result]:
    progress(f"{system.name}: preloading {settings.keys:,} keys through {system.leader}")
    try:
        if system.name == ETCD_GRPC:
            binary = etcd_native.build()
            etcd_native.preload(binary, system.leader, get_prefix(system), settings.keys)
        else:
            preload(system.api, system.leader, get_prefix(system), settings.keys,
                    system.headers, system.cafile)  # fmt: skip
    except Exception as error:  # aiohttp's errors, or failed answers
        raise BenchError(f"{system.name}: preload failed: {error}") from error
    if settings.warmup > 0:
        progress(f"{system.name}: warm-up, {settings.warmup:g} s of PUT load")
        runner(warmup_load(system, settings))
    results = [run_one(system, load, runner) for load in loads_for(system, settings)]
    seen = [r.elections for r in results if r.elections is not None]
    if seen:
        system.about[f"{system.name}: elections during the load"] = sum(seen)
        progress(f"{system.name}: elections during the load: {sum(seen)}")
    return results


def run_one(system: System, load: Load, runner: Runner) -> Result:
    where = ", ".join(load.urls)
    how = "clients, one each" if load.api == "grpc" else f"conns, {load.threads} threads"
    progress(
        f"start {load.system} {WORKLOADS[load.workload]}: {load.connections} {how}, "
        f"{load.duration:g} s -> {where}"
    )
    metric = system.leader_metric
    before = read_counts(system.members, metric) if metric else {}
    result = runner(load)
    if metric:
        result.elections = elections_between(before, read_counts(system.members, metric))
    flag = f", ERRORS {result.errors}" if result.error_count else ""
    progress(
        f"done  {load.system} {WORKLOADS[load.workload]}: {result.ops:,.0f} ops/s, "
        f"p50 {result.p50_ms:.2f} ms, p99 {result.p99_ms:.2f} ms{flag}"
    )
    return result


def bench_system(name: str, settings: Settings, runner: Runner, meta: dict[str, Any]):
    """Start one system in a scratch directory, measure it, stop it (also on errors)."""
    if name == ETCD_GRPC:  # built (or found in the cache) before etcd starts
        binary = etcd_native.build()
        meta["etcd gRPC load generator"] = f"bench/etcd_load, clientv3 ({binary})"
        runner = partial(etcd_native.run_load, binary)
    scratch = tempfile.mkdtemp(prefix=f"rkv-bench-http-{name}-")
    try:
        with Processes() as procs:
            system = STARTERS[name](procs, Path(scratch))
            meta.update(system.about)
            results = measure(system, settings, runner)
            meta.update(system.about)  # what the run learnt (elections during load)
            return results
    finally:
        if settings.keep_data:
            progress(f"{name}: data and logs kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def pick_runner(settings: Settings, meta: dict[str, Any]) -> Runner:
    wrk = find_wrk() if settings.generator == "wrk" else None
    if wrk is not None:
        meta["load generator"] = f"wrk {wrk_version(wrk)} ({wrk})"
        return lambda load: run_wrk(wrk, load)
    if settings.generator == "wrk":
        progress("wrk is missing and could not be installed: using the aiohttp fallback")
    meta["load generator"] = "python* (aiohttp closed loop, one process: a far lower ceiling)"
    return run_python


def base_meta(settings: Settings) -> dict[str, Any]:
    return {
        "date": time.strftime("%F %T"),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "duration s": settings.duration,
        "connections": settings.connections,
        "connection sweep (rkv, etcd gRPC)": ", ".join(map(str, settings.sweep)),
        "keys (preloaded; random keys among them)": settings.keys,
        "value bytes": 100,
        "scratch": tempfile.gettempdir(),
        "routing": "PUT and linearizable GET to the leader; stale GET on one follower",
        "note": "the load generator runs on the same cores as the servers",
        "load average at start": load_average(),
    }


def load_average() -> str:
    one, five, _ = os.getloadavg()
    busy = (
        " (BUSY: other processes compete for the cores)"
        if one > 0.5 * (os.cpu_count() or 1)
        else ""
    )
    return f"{one:.2f} (1 min), {five:.2f} (5 min){busy}"


PRINTED = (
    "load generator",
    "etcd gRPC load generator",
    "etcd version",
    "etcd gateway prefix",
    "load average at start",
)


def run(settings: Settings) -> int:
    meta = base_meta(settings)
    progress(f"load average: {meta['load average at start']}")
    runner = pick_runner(settings, meta)
    results: list[Result] = []
    failed: dict[str, str] = {}
    for name in settings.systems:
        progress(f"=== {name} ===")
        try:
            results += bench_system(name, settings, runner, meta)
        except BenchError as error:
            progress(f"{name} FAILED: {error}")
            failed[name] = str(error)
    if failed:
        meta["failed"] = failed
    for key, about in meta.items():
        if key in PRINTED or key.endswith("elections during the load"):
            print(f"{key}: {about}")
    print(http_report.text_report(results))
    for name, why in failed.items():
        print(f"{name}: FAILED: {why.splitlines()[0]}")
    paths = http_report.write_results(settings.out, results, meta)
    print(f"results written to {' and '.join(map(str, paths))}")
    return 1 if failed else 0


def parse_settings(argv: list[str] | None) -> Settings:
    parser = argparse.ArgumentParser(description="Benchmark rkv's HTTP API against etcd.")
    parser.add_argument("--duration", type=float, help="seconds per run (default 10)")
    parser.add_argument(
        "--connections", type=int, default=64, help="the reference systems' (default 64)"
    )
    parser.add_argument(
        "--sweep",
        default="1,64,256",
        help="rkv's and etcd gRPC's connection counts, comma-separated (default 1,64,256)",
    )
    parser.add_argument("--keys", type=int, help="key space (default 10000; --quick 1000)")
    parser.add_argument("--quick", action="store_true", help="3 s runs, 1,000 keys")
    out = Path(__file__).resolve().parent / "results"
    parser.add_argument("--out", type=Path, default=out, help="default bench/results")
    for name in SYSTEMS:
        parser.add_argument(f"--skip-{name}", action="store_true", help=f"do not run {name}")
    parser.add_argument(
        "--generator",
        choices=("wrk", "python"),
        default="wrk",
        help="wrk (default; the aiohttp generator if wrk cannot be installed) or python",
    )
    parser.add_argument("--keep-data", action="store_true", help="keep data dirs and logs")
    args = parser.parse_args(argv)
    duration = args.duration if args.duration is not None else 3.0 if args.quick else 10.0
    if duration <= 0 or args.connections < 3:
        parser.error("--duration must be positive and --connections at least 3")
    try:
        sweep = tuple(sorted({int(c) for c in args.sweep.split(",") if c.strip()}))
    except ValueError:
        parser.error(f"--sweep {args.sweep!r}: want connection counts such as 1,64,256")
    if not sweep or min(sweep) < 1:
        parser.error("--sweep needs connection counts of at least 1")
    keys = args.keys if args.keys is not None else 1000 if args.quick else 10_000
    if keys < 1:
        parser.error("--keys must be at least 1")
    systems = tuple(s for s in SYSTEMS if not getattr(args, f"skip_{s}"))
    return Settings(
        duration=duration,
        connections=args.connections,
        sweep=sweep,
        keys=keys,
        warmup=1.0 if args.quick else 2.0,
        out=args.out,
        systems=systems,
        generator=args.generator,
        keep_data=args.keep_data,
    )


def main(argv: list[str] | None = None) -> None:
    settings = parse_settings(argv)
    interrupt_on_signals()
    try:
        code = run(settings)
    except KeyboardInterrupt:
        progress("interrupted: every server started was stopped")
        code = 130
    except BenchError as error:
        progress(f"FAILED: {error}")
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
