"""etcd's native client as a load generator: bench/etcd_load (Go, clientv3 over gRPC).

The generator is built once per source version, offline, from Debian's packages
``golang-go`` (the compiler) and ``golang-etcd-server-dev`` (clientv3 and its
dependencies under /usr/share/gocode), in GOPATH mode; both are installed with apt-get
when missing, the way bench/wrk_runner.py installs wrk. The binary is cached in the
system temporary directory under a name keyed by the hash of main.go, never in the
checkout. ``run_load`` turns a ``Load`` into one run of it and reads its JSON line.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.loadgen import VALUE, Load, Result
from bench.support import REPO, BenchError, apt_install, ensure_command, progress

SOURCE_DIR = Path(__file__).resolve().parent / "etcd_load"
GOCODE = Path("/usr/share/gocode")
CLIENTV3 = GOCODE / "src" / "go.etcd.io" / "etcd" / "clientv3"  # etcd 3.4's import path
BUILD_TIMEOUT_S = 900.0  # the first build compiles grpc and clientv3: minutes on 2 cores
OPS = {"put": "put", "get_linearizable": "get-linearizable", "get_stale": "get-serializable"}
REQUEST_TIMEOUT = "5s"  # as wrk's --timeout: a slower request counts as an error


@dataclass(frozen=True)
class Stats:
    """What one run of the generator printed."""

    ops: int
    errors: int  # failed requests, timeouts and GETs that found no key (missing)
    missing: int
    seconds: float
    ops_per_s: float
    p50_ms: float
    p99_ms: float
    first_error: str


def parse_line(output: str) -> Stats:
    """The generator's JSON line (the last line of ``output`` that is a JSON object)."""
    lines = [x for x in output.splitlines() if x.startswith("{")]
    if not lines:
        raise BenchError(f"etcd-load printed no JSON line: {output[-500:]!r}")
    try:
        data: dict[str, Any] = json.loads(lines[-1])
        return Stats(
            ops=int(data["ops"]),
            errors=int(data["errors"]),
            missing=int(data.get("missing", 0)),
            seconds=float(data["seconds"]),
            ops_per_s=float(data["ops_per_s"]),
            p50_ms=float(data["p50_ms"]),
            p99_ms=float(data["p99_ms"]),
            first_error=str(data.get("first_error", "")),
        )
    except (ValueError, KeyError, TypeError) as error:
        raise BenchError(f"etcd-load's JSON line is not what bench expects: {error}") from error


def source_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted(SOURCE_DIR.glob("*.go")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def cache_dir() -> Path:
    """Where the binary of this source version lives: $TMPDIR/rkv-etcd-load-<hash>/."""
    return Path(tempfile.gettempdir()) / f"rkv-etcd-load-{source_hash()}"


def ensure_toolchain() -> str:
    """go's path, installing golang-go and golang-etcd-server-dev when missing."""
    go = ensure_command("go", "golang-go", "golang-etcd-server-dev")
    if go is not None and not CLIENTV3.is_dir():
        progress(f"{CLIENTV3} is missing: installing golang-etcd-server-dev")
        apt_install("golang-etcd-server-dev")
    if go is None or not CLIENTV3.is_dir():
        raise BenchError(
            "cannot build bench/etcd_load: needs Debian's golang-go and golang-etcd-server-dev "
            "(`apt-get install golang-go golang-etcd-server-dev`), or use --skip-etcd_grpc"
        )
    return go


def build_environment(scratch: Path) -> dict[str, str]:
    """GOPATH mode, offline: Debian's /usr/share/gocode is the only source of packages."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GO")}
    return env | {
        "GOPATH": f"{scratch / 'gopath'}:{GOCODE}",
        "GO111MODULE": "off",
        "GOCACHE": str(scratch / "gocache"),
        "GOPROXY": "off",
        "GOFLAGS": "",
        "CGO_ENABLED": "0",
    }


def build() -> Path:
    """The generator's binary for this source, built on first use and cached."""
    where = cache_dir()
    binary = where / "etcd-load"
    if binary.exists():
        return binary
    go = ensure_toolchain()
    where.mkdir(parents=True, exist_ok=True)
    partial = where / f"etcd-load.partial-{os.getpid()}"
    progress(f"building bench/etcd_load with {go} (GOPATH mode, offline) into {where}")
    argv = [go, "build", "-o", str(partial), f"./{SOURCE_DIR.relative_to(REPO)}"]
    try:
        done = subprocess.run(
            argv,
            cwd=REPO,
            env=build_environment(where),
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise BenchError(f"building bench/etcd_load took over {BUILD_TIMEOUT_S:.0f} s") from error
    if done.returncode != 0:
        raise BenchError(f"building bench/etcd_load failed:\n{done.stdout}{done.stderr}")
    partial.replace(binary)  # atomic: a concurrent run sees a whole binary or none
    return binary


def argv(binary: Path, load: Load) -> list[str]:
    """N clients over N connections (one request in flight each, as wrk's connections)."""
    endpoints = ",".join(url.split("://", 1)[1] for url in load.urls)
    return [
        str(binary),
        f"--endpoints={endpoints}",
        f"--op={OPS[load.workload]}",
        f"--duration={load.duration:g}s",
        f"--clients={load.connections}",
        f"--conns={load.connections}",
        f"--keys={load.keys}",
        f"--value-bytes={len(VALUE)}",
        f"--prefix={load.key_prefix}",
        f"--timeout={REQUEST_TIMEOUT}",
    ]


def _run(command: list[str], timeout: float) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as error:
        raise BenchError(f"etcd-load hung past {timeout:.0f} s: {' '.join(command)}") from error
    if done.returncode != 0:
        raise BenchError(f"etcd-load failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def preload(binary: Path, url: str, prefix: str, keys: int) -> None:
    """Write keys prefix000000 .. once through ``url`` (the leader), 32 clients."""
    endpoint = url.split("://", 1)[1]
    command = [str(binary), f"--endpoints={endpoint}", "--op=put", "--preload", "--duration=0s"]
    command += ["--clients=32", "--conns=4", f"--keys={keys}", f"--prefix={prefix}"]
    command += [f"--value-bytes={len(VALUE)}"]
    _run(command, timeout=300)


def run_load(binary: Path, load: Load) -> Result:
    command = argv(binary, load)
    output = _run(command, timeout=load.duration + 120)
    stats = parse_line(output)
    errors = {"failed": stats.errors - stats.missing, "missing": stats.missing}
    return Result(
        load=load,
        generator="clientv3",
        requests=stats.ops,
        seconds=stats.seconds,
        p50_ms=stats.p50_ms,
        p99_ms=stats.p99_ms,
        errors={kind: count for kind, count in errors.items() if count},
        raw=output + (f"first error: {stats.first_error}\n" if stats.first_error else ""),
    )
