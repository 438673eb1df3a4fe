"""HTTP benchmark (not a test): rkv's REST API against a 3-member etcd and a trivial server.

    python bench/http.py [--duration 10] [--connections 64] [--quick] [--out bench/results]
                         [--skip-rkv] [--skip-rkv_secure] [--skip-etcd] [--skip-trivial]
                         [--generator wrk|python]

Per system, one at a time (the others are stopped: they would share the 2 cores), and
with wrk as the load generator (installed with apt-get when missing; an aiohttp
closed-loop generator otherwise, marked ``python*`` in the table):

- put: PUT of unique keys, 100-byte values, ``--connections`` connections, to the leader;
- get_linearizable: GET of preloaded keys, linearizable, to the leader;
- get_stale: GET of preloaded keys, stale (etcd: serializable), spread over every node:
  one wrk thread per node, so the connections are rounded down to a multiple of 3;
- put_1conn: one connection, one thread: the latency of a lone client's PUT.

Systems: ``rkv up`` (3 nodes), ``rkv_secure`` (3 nodes with TLS and auth on, the same
load over HTTPS with a bearer token: bench/rkv_secure.py), etcd from Debian's etcd-server
(3 members, its own fsync defaults, through its JSON gateway) and bench/trivial_server.py
(one aiohttp process: the ceiling for Python here). Every server listens on 127.0.0.1
only and is stopped by PID on exit, Ctrl-C or error. Results: a table, the rkv/etcd
ratios and the cost of TLS + auth (rkv_secure against rkv, target at most 20 %) on
stdout, progress on stderr, bench/results/http.json and http.html. Scratch data goes to
the system temporary directory (set TMPDIR to pick the disk).
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

from bench import http_report  # noqa: E402
from bench.http_report import WORKLOADS  # noqa: E402
from bench.loadgen import Load, Result, preload, run_python  # noqa: E402
from bench.procs import Processes, interrupt_on_signals  # noqa: E402
from bench.support import BenchError, http_json, progress  # noqa: E402
from bench.systems import STARTERS, SYSTEMS, System  # noqa: E402
from bench.wrk_runner import find_wrk, run_wrk, wrk_version  # noqa: E402

Runner = Callable[[Load], Result]


@dataclass(frozen=True)
class Settings:
    duration: float
    connections: int
    keys: int  # preloaded keys for the GET runs
    warmup: float  # seconds of unrecorded PUT load before the runs
    out: Path
    systems: tuple[str, ...]
    generator: str
    keep_data: bool


def loads_for(system: System, settings: Settings) -> list[Load]:
    api, c, leader = system.api, settings.connections, (system.leader,)
    token = f"{int(time.time())}-"

    def load(workload: str, urls: tuple[str, ...], conns: int, threads: int) -> Load:
        op = "put" if workload.startswith("put") else "get"
        path = api.put_path if op == "put" else api.get_path
        extra = {"get_linearizable": api.linearizable, "get_stale": api.stale}.get(workload, "")
        prefix = f"{workload}-{token}" if op == "put" else get_prefix(system)
        threads = min(threads, conns)
        conns = conns // threads * threads  # wrk gives each thread conns // threads
        return Load(system.name, workload, op, api.kind, urls, path, extra, prefix,
                    settings.keys, conns, threads, settings.duration,
                    system.headers, system.cafile)  # fmt: skip

    return [
        load("put", leader, c, 2),
        load("get_linearizable", leader, c, 2),
        load("get_stale", system.members, c, max(2, len(system.members))),  # a thread per node
        load("put_1conn", leader, 1, 1),
    ]


def get_prefix(system: System) -> str:
    return f"get-{system.name}-"


def measure(system: System, settings: Settings, runner: Runner) -> list[Result]:
    progress(f"{system.name}: preloading {settings.keys:,} keys through {system.leader}")
    try:
        preload(
            system.api,
            system.leader,
            get_prefix(system),
            settings.keys,
            system.headers,
            system.cafile,
        )
    except Exception as error:  # aiohttp's errors, or failed answers
        raise BenchError(f"{system.name}: preload failed: {error}") from error
    loads = loads_for(system, settings)
    if settings.warmup > 0:
        progress(f"{system.name}: warm-up, {settings.warmup:g} s of PUT load")
        runner(replace(loads[0], duration=settings.warmup, key_prefix="warmup-"))
    before = raft_terms(system)
    results = [run_one(load, runner) for load in loads]
    after = raft_terms(system)
    if before:
        elections = {url: after.get(url, -1) - term for url, term in before.items()}
        system.about["raft terms before/after load"] = f"{before} -> {after}"
        system.about["elections during load"] = max(elections.values())
        progress(f"{system.name}: elections during the load: {max(elections.values())}")
    return results


def raft_terms(system: System) -> dict[str, int]:
    """Each rkv node's raft term (a new term means an election); empty for other systems."""
    if system.name != "rkv":
        return {}
    terms = {}
    for url in system.members:
        status = http_json(f"{url}/v1/status")
        if isinstance(status, dict) and isinstance(status.get("term"), int):
            terms[url] = status["term"]
    return terms


def run_one(load: Load, runner: Runner) -> Result:
    where = ", ".join(load.urls)
    progress(
        f"start {load.system} {WORKLOADS[load.workload]}: {load.connections} conns, "
        f"{load.threads} threads, {load.duration:g} s -> {where}"
    )
    result = runner(load)
    flag = f", ERRORS {result.errors}" if result.error_count else ""
    progress(
        f"done  {load.system} {WORKLOADS[load.workload]}: {result.ops:,.0f} ops/s, "
        f"p50 {result.p50_ms:.2f} ms, p99 {result.p99_ms:.2f} ms{flag}"
    )
    return result


def bench_system(name: str, settings: Settings, runner: Runner, meta: dict[str, Any]):
    """Start one system in a scratch directory, measure it, stop it (also on errors)."""
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
        "preloaded keys": settings.keys,
        "scratch": tempfile.gettempdir(),
        "routing": "PUT and linearizable GET to the leader; stale GET over every node",
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
    for key in (
        "load generator",
        "etcd version",
        "etcd gateway prefix",
        "load average at start",
        "elections during load",
    ):
        if key in meta:
            print(f"{key}: {meta[key]}")
    print(http_report.text_report(results))
    for name, why in failed.items():
        print(f"{name}: FAILED: {why.splitlines()[0]}")
    paths = http_report.write_results(settings.out, results, meta)
    print(f"results written to {' and '.join(map(str, paths))}")
    return 1 if failed else 0


def parse_settings(argv: list[str] | None) -> Settings:
    parser = argparse.ArgumentParser(description="Benchmark rkv's HTTP API against etcd.")
    parser.add_argument("--duration", type=float, help="seconds per run (default 10)")
    parser.add_argument("--connections", type=int, default=64, help="default 64")
    parser.add_argument("--quick", action="store_true", help="3 s runs, fewer keys")
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
    systems = tuple(s for s in SYSTEMS if not getattr(args, f"skip_{s}"))
    return Settings(
        duration=duration,
        connections=args.connections,
        keys=200 if args.quick else 1000,
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
