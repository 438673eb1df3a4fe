"""Bulk load benchmark (not a test): N keys into a fresh 3-node cluster.

Issue 19's target: 1,000,000 keys at >= 150,000 keys/s, 0 errors, 0 elections.
A fresh cluster of three nodes is started with ``rkv up`` on loopback (its
defaults: a cluster secret, fsync at raft's durability point); the body, N lines
``{"key": "load/000000000042", "value": "<value-bytes of text>"}``, is built
before the clock starts and sent as one ``POST /v1/kv:load?encoding=utf-8``
(``--mode load``, the default) to the leader (or ``--via follower``). Progress
lines are shown on stderr as they come.

``--mode txn`` loads the same keys the way the issue measured it before: POST
/v1/txn with 1000 puts each, 8 in flight, for the comparison.

Printed: keys/s and MB/s (key + value bytes, MB = 1e6) until the load's answer
(every key committed on a majority), the seconds until all three nodes have
applied it, the raft elections during the load (the largest term change of a
node; must be 0), errors (failed requests or lines not loaded; must be 0), and
a check of 1000 keys read back from every node. ``--profile DIR`` records the
leader and one follower with py-spy for the load (raw collapsed stacks and a
summary of the top frames).

Run from the repository root: ``python -m bench.load [--keys 1000000]
[--value-bytes 100] [--via leader|follower] [--mode load|txn] [--profile DIR]``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.procs import Processes
from bench.rkv_cluster import RkvCluster, start
from bench.support import BenchError, http_json, http_request, progress, wait_until

TXN_PUTS = 1000
TXN_IN_FLIGHT = 8
SAMPLE = 1000


def key_of(i: int) -> str:
    return f"load/{i:012d}"


def value_of(i: int, size: int) -> str:
    stem = f"{i:012d}-"
    return (stem * (size // len(stem) + 1))[:size]


def body_of(keys: int, value_bytes: int) -> bytes:
    return b"".join(
        json.dumps({"key": key_of(i), "value": value_of(i, value_bytes)}).encode() + b"\n"
        for i in range(keys)
    )


def load_stream(url: str, body: bytes, keys: int) -> tuple[int, int]:
    """POST the body; (keys loaded, errors)."""
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parsed.hostname or "", parsed.port, timeout=120)
    connection.request(
        "POST",
        "/v1/kv:load?encoding=utf-8",
        body=body,
        headers={"Content-Type": "application/x-ndjson"},
    )
    response = connection.getresponse()
    if response.status != 200:
        raise BenchError(f"POST /v1/kv:load answered {response.status}: {response.read()[:300]!r}")
    started = last = time.perf_counter()
    final: dict[str, object] = {}
    for raw in response:
        item = json.loads(raw)
        final = item
        now = time.perf_counter()
        if now - last >= 1.0:
            last = now
            loaded = int(item.get("loaded", 0))
            progress(f"  loaded {loaded:,}/{keys:,} keys ({loaded / (now - started):,.0f} keys/s)")
    connection.close()
    if "error" in final:
        progress(f"the load stopped: {final['error']}")
    loaded = int(final.get("loaded", 0))  # type: ignore[call-overload]
    return loaded, keys - loaded


def load_txns(url: str, keys: int, value_bytes: int) -> tuple[int, int]:
    """The same keys through POST /v1/txn, TXN_PUTS per txn, TXN_IN_FLIGHT at once."""
    target = f"{url}/v1/txn?encoding=utf-8"

    def txn(first: int) -> tuple[int, int]:
        ops = [
            {"op": "put", "key": key_of(i), "value": value_of(i, value_bytes)}
            for i in range(first, min(first + TXN_PUTS, keys))
        ]
        code, answer = http_request(target, "POST", {"success": ops}, timeout=60)
        if code != 200:
            progress(f"txn at {first} answered {code}: {answer[:200]!r}")
            return 0, len(ops)
        return len(ops), 0

    loaded = errors = 0
    started = last = time.perf_counter()
    with ThreadPoolExecutor(TXN_IN_FLIGHT) as pool:
        for ok, failed in pool.map(txn, range(0, keys, TXN_PUTS)):
            loaded += ok
            errors += failed
            now = time.perf_counter()
            if now - last >= 1.0:
                last = now
                progress(
                    f"  loaded {loaded:,}/{keys:,} keys ({loaded / (now - started):,.0f} keys/s)"
                )
    return loaded, errors


def terms(cluster: RkvCluster) -> dict[str, int]:
    found = {}
    for url in cluster.urls:
        status = http_json(f"{url}/v1/status")
        if isinstance(status, dict) and isinstance(status.get("term"), int):
            found[url] = status["term"]
    return found


def applied(url: str) -> int:
    status = http_json(f"{url}/v1/status")
    return int(status.get("applied_offset", -1)) if isinstance(status, dict) else -1


def check_sample(cluster: RkvCluster, keys: int, value_bytes: int) -> int:
    """Keys of the sample missing or wrong on any node."""
    wrong = 0
    for i in random.Random(7).sample(range(keys), min(SAMPLE, keys)):
        for url in cluster.urls:
            quoted = urllib.parse.quote(key_of(i), safe="")
            code, value = http_request(f"{url}/v1/kv/{quoted}?consistency=stale")
            if code != 200 or value.decode() != value_of(i, value_bytes):
                wrong += 1
    return wrong


def start_profiles(
    directory: Path, procs: list[tuple[str, int]]
) -> list[tuple[str, subprocess.Popen[bytes], Path]]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    started = []
    for name, pid in procs:
        out = directory / f"{name}.raw"
        argv = [spy, "record", "-r", "200", "-f", "raw", "-o", str(out), "-p", str(pid)]
        started.append((name, subprocess.Popen(argv, stdout=subprocess.DEVNULL), out))
    return started


def stop_profiles(started: list[tuple[str, subprocess.Popen[bytes], Path]]) -> None:
    for _, process, _ in started:
        process.send_signal(2)  # SIGINT: py-spy writes what it has
    for name, process, out in started:
        process.wait(timeout=60)
        progress(f"py-spy, {name}: top frames (self time) from {out}")
        for line in top_frames(out):
            progress("  " + line)


def top_frames(raw: Path, count: int = 12) -> list[str]:
    own: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        total += int(n)
        own[stack.split(";")[-1]] += int(n)
    return [f"{100 * n / max(total, 1):5.1f}% {frame}" for frame, n in own.most_common(count)]


def pid_of_port(url: str) -> int | None:
    """The pid listening on ``url``'s port (ss), for py-spy."""
    port = urllib.parse.urlsplit(url).port
    done = subprocess.run(
        ["ss", "-Htlnp", f"sport = :{port}"], capture_output=True, text=True, check=False
    )
    marker = "pid="
    at = done.stdout.find(marker)
    if at < 0:
        return None
    digits = done.stdout[at + len(marker) :].split(",", 1)[0]
    return int(digits) if digits.isdigit() else None


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used (/proc/PID/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--via", choices=("leader", "follower"), default="leader")
    parser.add_argument("--mode", choices=("load", "txn"), default="load")
    parser.add_argument("--profile", type=Path, help="record leader and a follower with py-spy")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rkv-bench-load-") as scratch, Processes() as procs:
        cluster = start(procs, Path(scratch))
        followers = [url for url in cluster.urls if url != cluster.leader_url]
        target = cluster.leader_url if args.via == "leader" else followers[0]
        body = body_of(args.keys, args.value_bytes) if args.mode == "load" else b""
        data_bytes = args.keys * (len(key_of(0)) + args.value_bytes)
        before = terms(cluster)
        pids = {url: pid_of_port(url) for url in cluster.urls}
        cpu_before = {url: cpu_seconds(pid) for url, pid in pids.items() if pid}
        profiles = []
        if args.profile is not None:
            args.profile.mkdir(parents=True, exist_ok=True)
            who = [("leader", cluster.leader_url), ("follower", followers[-1])]
            spied = [(name, pids[url]) for name, url in who]
            profiles = start_profiles(args.profile, [(n, p) for n, p in spied if p is not None])
            time.sleep(1.0)
        progress(f"loading {args.keys:,} keys ({args.mode}) through {args.via} {target}")
        started = time.perf_counter()
        if args.mode == "load":
            loaded, errors = load_stream(target, body, args.keys)
        else:
            loaded, errors = load_txns(target, args.keys, args.value_bytes)
        seconds = time.perf_counter() - started
        head = applied(cluster.leader_url)
        wait_until(
            "every node to apply the load",
            lambda: all(applied(url) >= head for url in cluster.urls),
            300,
        )
        everywhere = time.perf_counter() - started
        cpu = {url: cpu_seconds(pid) - cpu_before[url] for url, pid in pids.items() if pid}
        if profiles:
            stop_profiles(profiles)
        after = terms(cluster)
        elections = max((after.get(url, -1) - term for url, term in before.items()), default=-1)
        wrong = check_sample(cluster, args.keys, args.value_bytes)
    print(f"bulk load ({args.mode}, via {args.via}), {args.keys:,} keys of {args.value_bytes} B")
    print(f"  keys/s            {loaded / seconds:,.0f}")
    print(f"  MB/s              {data_bytes / seconds / 1e6:,.1f}")
    print(f"  seconds           {seconds:.2f} (all 3 nodes applied: {everywhere:.2f})")
    cpu_text = ", ".join(
        f"{'leader' if url == cluster.leader_url else 'follower'} {used:.2f}"
        for url, used in cpu.items()
    )
    print(f"  node CPU s        {cpu_text} ({sum(cpu.values()) / max(loaded, 1) * 1e6:.1f} us/key)")
    print(f"  elections         {elections}")
    print(f"  errors            {errors}")
    print(f"  sample wrong      {wrong} of {min(SAMPLE, args.keys) * len(cluster.urls)} reads")
    met = loaded / seconds >= 150_000 and elections == 0 and errors == 0 and wrong == 0
    print(f"  target >= 150,000 keys/s, 0 elections, 0 errors: {'met' if met else 'missed'}")
    return 0 if errors == 0 and wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
