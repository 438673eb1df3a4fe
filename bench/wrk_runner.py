"""Run one ``Load`` with wrk and bench/wrk/kv.lua, and read what wrk measured.

kv.lua's done() prints one ``BENCH_JSON {...}`` line (exact counts, latency percentiles in
microseconds); wrk's own text (``--latency`` distribution, Requests/sec, socket errors) is
kept in ``Result.raw`` for the JSON report. wrk counts only HTTP >= 400 as errors; kv.lua
counts every answer outside 2xx, and etcd range answers without the key.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from bench.loadgen import VALUE, Load, Result
from bench.support import BenchError, ensure_command

SCRIPT = Path(__file__).resolve().parent / "wrk" / "kv.lua"
MARKER = "BENCH_JSON "
SOCKET_ERRORS = ("connect", "read", "write", "timeout")
TIMEOUT = "5s"  # a request slower than this counts as a timeout error


def find_wrk() -> str | None:
    """wrk's path, installing Debian's ``wrk`` package if it is missing."""
    return ensure_command("wrk", "wrk")


def wrk_version(wrk: str) -> str:
    done = subprocess.run([wrk, "-v"], capture_output=True, text=True, check=False)
    match = re.search(r"wrk (\S+)", done.stdout + done.stderr)
    return match.group(1) if match else "unknown"


def command(wrk: str, load: Load) -> list[str]:
    return [
        wrk,
        f"--threads={load.threads}",
        f"--connections={load.connections}",
        f"--duration={load.duration:g}s",
        f"--timeout={TIMEOUT}",
        "--latency",
        f"--script={SCRIPT}",
        load.urls[0] + "/",
    ]


def environment(load: Load) -> dict[str, str]:
    hosts = ",".join(url.split("://", 1)[1] for url in load.urls)
    authorization = dict(load.headers).get("Authorization", "")
    return os.environ | {
        "BENCH_OP": load.op,
        "BENCH_API": load.api,
        "BENCH_PATH": load.path,
        "BENCH_EXTRA": load.extra,
        "BENCH_PREFIX": load.key_prefix,
        "BENCH_KEYS": str(load.keys),
        "BENCH_VALUE": VALUE.decode(),
        "BENCH_HOSTS": hosts,
        "BENCH_AUTH": authorization,
    }


def run_wrk(wrk: str, load: Load) -> Result:
    argv = command(wrk, load)
    done = subprocess.run(
        argv,
        env=environment(load),
        capture_output=True,
        text=True,
        timeout=load.duration + 60,
        check=False,
    )
    if done.returncode != 0 or MARKER not in done.stdout:
        raise BenchError(
            f"wrk failed (exit {done.returncode}): {' '.join(argv)}\n{done.stdout}{done.stderr}"
        )
    return parse(load, done.stdout)


def parse(load: Load, output: str) -> Result:
    line = next(x for x in output.splitlines() if x.startswith(MARKER))
    stats = json.loads(line.removeprefix(MARKER))
    errors = {kind: stats[kind] for kind in SOCKET_ERRORS}
    errors["non_2xx"] = stats["non_2xx"]
    errors["missing"] = stats["missing"]
    raw = output.replace(line + "\n", "")
    return Result(
        load=load,
        generator="wrk",
        requests=stats["requests"],
        seconds=stats["duration_us"] / 1e6,
        p50_ms=stats["p50_us"] / 1000,
        p99_ms=stats["p99_us"] / 1000,
        errors={kind: count for kind, count in errors.items() if count},
        raw=raw,
    )
