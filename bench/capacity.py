"""Capacity benchmark (not a test): data many times larger than a node's memory cap.

Issue "Data larger than memory". For each multiple N (``--multiples``, default 4 and
10) a fresh cluster of three real ``python -m node.cli node`` processes on loopback,
on their default settings (no tuning flags; RKV_* variables are removed from their
environment), each started inside a memory cgroup of its own limited to
``--cap-mib`` (default 256 MiB: the per-node cap; tests/support/memcg.py, cgroup v1
or v2). Measured, one row per N:

- load: N x cap bytes of values per replica (``--value-bytes`` each, default 1 KiB,
  keys ``cap/000000042``, values derived from the key's number so any can be
  checked) through POST /v1/txn on the leader, 1000 puts per transaction, 8
  transactions in flight (8 threads, each with a keep-alive connection); seconds,
  MB/s of value bytes (MB = 1e6) and keys/s. Then every follower is waited for
  (its applied offset reaches the leader's) and 1000 random keys are read back
  from every node with stale reads and must match;
- memory: every node's anonymous RSS (RssAnon in /proc/<pid>/status) sampled every
  0.5 s on a background thread for the whole row, the maximum kept per node; the
  cgroup's own peak charge (which also counts the page cache the node brought in,
  so it is bounded by the cap); both shown against the formula of
  docs/OPERATIONS.md, section "Memory" (computed in bench/capacity_model.py from its
  constants, with 4 entries in flight of the largest transaction body sent). OOM kills are the sum
  of the three groups' oom_kill counters; "alive" says whether every node process
  was still running at the end of the row;
- disk: the bytes of the files in each node's data directory after the load,
  apparent (st_size) and allocated (st_blocks x 512), each file counted once
  (hard links), divided by the logical bytes of one replica (key bytes + value
  bytes); the maximum over the nodes. The target is checked on allocated bytes;
- reads, for a fixed time each (10 s, ``--quick`` 3 s), 8 threads each with a
  keep-alive http.client connection: stale GETs (?consistency=stale) on a
  follower, linearizable GETs (the default consistency) on the leader; each with
  uniform keys and with skewed keys: 90% of the reads go to a hot 1% of the keys
  (every 100th key), the other 10% uniformly to all keys. GET/s counts answers
  that were 200 with the right value; p50/p99 are over every request. The client
  is Python on the same machine as the nodes: these are lower bounds;
- rebuild: one follower is SIGKILLed, its data directory deleted and it is
  restarted with the same argv inside the same cgroup. Timed from the restart
  until GET /readyz answers 200 AND its applied offset (GET /v1/status) reaches
  the leader's; rebuild MB/s = value bytes of one replica / those seconds. Its
  log line "caught up: N records (M MB) pulled from URL in S s" is reported when
  present, and its peak RssAnon during the rebuild. 1000 keys are then read back
  from it with stale reads.

Targets (met/missed, printed under the tables and in the HTML): zero OOM kills (the
issue states it at 10x) with every node alive; peak RssAnon within the formula;
rebuild >= 50 MB/s; load >= 20 MB/s; disk <= 2.5 allocated bytes per logical byte.

Run from the repository root as root: ``python -m bench.capacity [--quick]
[--cap-mib 256] [--multiples 4,10] [--value-bytes 1024] [--out bench/results]``.
Writes capacity.json and capacity.html to --out. Scratch data goes to the system
temporary directory (set TMPDIR to pick the disk) and is deleted afterwards; every
node is stopped by PID and every cgroup removed, also on errors and Ctrl-C.

This module measures and is the entry point; bench/capacity_model.py holds the
constants, the result dataclasses, the targets and the memory formula, and
bench/capacity_report.py writes the report (text tables, targets, HTML, JSON).
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import random
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from bench import nodes as cluster
from bench.capacity_model import (
    ALPHABET,
    CATCH_UP_TIMEOUT_S,
    CATCHING_UP,
    CAUGHT_UP,
    DEFAULT_MULTIPLES,
    HOT_EVERY,
    HOT_SHARE,
    IN_FLIGHT,
    NODES,
    PROGRESS_SECONDS,
    PUTS_PER_TXN,
    QUICK_MULTIPLES,
    QUICK_READ_SECONDS,
    READ_SECONDS,
    READ_THREADS,
    REBUILD_TIMEOUT_S,
    SAMPLE_INTERVAL_S,
    SAMPLE_KEYS,
    START_TIMEOUT_S,
    TXN_ATTEMPTS,
    Disk,
    Load,
    Reads,
    Rebuild,
    Row,
    disk_breakdown,
    formula_bytes,
    mib,
)
from bench.capacity_report import format_report, write_results
from bench.nodes import applied, leader_of, ready
from bench.procs import Processes, Server, interrupt_on_signals
from bench.support import (
    LOOPBACK,
    BenchError,
    progress,
    wait_until,
)
from tests.support import memcg


def key_of(i: int) -> str:
    return f"cap/{i:09d}"


def value_of(i: int, value_bytes: int) -> str:
    """Exactly ``value_bytes`` ASCII characters: the number, then letters shifted by it."""
    fill = ALPHABET * (value_bytes // len(ALPHABET) + 2)
    start = i % len(ALPHABET)
    return f"{i:010d}" + fill[start : start + value_bytes - 10]


# -- the cluster --------------------------------------------------------------------


@dataclass
class Node(cluster.Node):
    """A node of bench/nodes.py and the memory cgroup it runs in."""

    group: memcg.MemoryCgroup = field(kw_only=True)


def make_nodes(scratch: Path, groups: list[memcg.MemoryCgroup]) -> list[Node]:
    """The nodes of bench/nodes.py on default settings, node i in ``groups[i]``."""
    return [
        Node(n.node_id, n.url, n.data_dir, n.argv, group=group)
        for n, group in zip(cluster.make_nodes(scratch), groups, strict=True)
    ]


def start_node(procs: Processes, node: Node, log_name: str) -> Server:
    """Start ``node`` inside its cgroup, on default settings (no RKV_* variables)."""
    return cluster.start_node(procs, node, log_name, wrap=node.group.wrap, drop_rkv_env=True)


def oom_kills(node: Node) -> str:
    """The line ``exited`` adds about a stopped node: its cgroup's OOM kills."""
    return f"(OOM kills in its cgroup: {node.group.oom_kills()})"


def exited(nodes: list[Node]) -> str | None:
    """How the first node that stopped ended, with its cgroup's OOM kills."""
    return cluster.exited(nodes, oom_kills)


def wait_leader(nodes: list[Node]) -> Node:
    """The leader, waited for up to 60 s; fails once a node stops (with its OOM kills)."""
    return cluster.wait_leader(nodes, explain=oom_kills)


def connect(url: str, timeout: float) -> http.client.HTTPConnection:
    parts = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or LOOPBACK, parts.port, timeout=timeout)


# -- memory sampling ----------------------------------------------------------------


def rss_anon_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class Sampler:
    """A background thread: the RssAnon of each watched PID and the anonymous memory of
    each cgroup, every SAMPLE_INTERVAL_S; the maximum seen under each name."""

    def __init__(self) -> None:
        self._pids: dict[str, int] = {}
        self._groups: dict[str, memcg.MemoryCgroup] = {}
        self.rss_peaks: dict[str, int] = {}
        self.group_anon_peaks: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def watch(self, name: str, pid: int) -> None:
        with self._lock:
            self._pids[name] = pid

    def unwatch(self, name: str) -> None:
        with self._lock:
            self._pids.pop(name, None)

    def watch_group(self, name: str, group: memcg.MemoryCgroup) -> None:
        with self._lock:
            self._groups[name] = group

    def sample(self) -> None:
        with self._lock:
            for name, pid in self._pids.items():
                rss = rss_anon_bytes(pid)
                if rss is not None:
                    self.rss_peaks[name] = max(self.rss_peaks.get(name, 0), rss)
            for name, group in self._groups.items():
                try:
                    anon = group.anon_bytes()
                except OSError:
                    continue
                self.group_anon_peaks[name] = max(self.group_anon_peaks.get(name, 0), anon)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            self.sample()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(5)


# -- load ---------------------------------------------------------------------------


def txn_body(start: int, keys: int, value_bytes: int) -> bytes:
    ops = [
        {"op": "put", "key": key_of(i), "value": value_of(i, value_bytes)}
        for i in range(start, min(start + PUTS_PER_TXN, keys))
    ]
    return json.dumps({"success": ops}).encode()


def load(nodes: list[Node], keys: int, value_bytes: int) -> Load:
    """Put ``keys`` keys through the leader, IN_FLIGHT transactions at a time."""
    lock = threading.Lock()
    stop = threading.Event()
    state = {"next": 0, "done": 0, "retries": 0, "largest": 0}
    errors: list[str] = []
    leader = [wait_leader(nodes)]

    def post(conn: http.client.HTTPConnection, body: bytes) -> tuple[int, bytes]:
        conn.request("POST", "/v1/txn?encoding=utf-8", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()

    def worker() -> None:
        url = leader[0].url
        conn = connect(url, 120)
        try:
            while not stop.is_set():
                with lock:
                    start = state["next"]
                    state["next"] += PUTS_PER_TXN
                if start >= keys:
                    return
                body = txn_body(start, keys, value_bytes)
                with lock:
                    state["largest"] = max(state["largest"], len(body))
                for attempt in range(TXN_ATTEMPTS):
                    if leader[0].url != url:
                        conn.close()
                        url = leader[0].url
                        conn = connect(url, 120)
                    try:
                        code, answer = post(conn, body)
                    except (OSError, http.client.HTTPException) as error:
                        code, answer = 0, repr(error).encode()
                        conn.close()
                        conn = connect(url, 120)
                    if code == 200:
                        with lock:
                            state["done"] += min(PUTS_PER_TXN, keys - start)
                        break
                    with lock:
                        state["retries"] += 1
                    progress(f"txn at {start} answered {code}: {answer[:200]!r}; retrying")
                    if stop.wait(0.5 * (attempt + 1)):
                        return
                    found = leader_of(nodes)
                    if found is not None:
                        leader[0] = found
                else:
                    errors.append(f"POST /v1/txn at key {start} failed {TXN_ATTEMPTS} times")
                    stop.set()
        finally:
            conn.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(IN_FLIGHT)]
    for thread in threads:
        thread.start()
    last = started
    try:
        while any(t.is_alive() for t in threads):
            time.sleep(0.2)
            problem = exited(nodes)
            if problem is not None:
                raise BenchError(f"during the load: {problem}")
            now = time.perf_counter()
            if now - last >= PROGRESS_SECONDS:
                last = now
                done = state["done"]
                progress(
                    f"  loaded {done:,}/{keys:,} keys "
                    f"({done * value_bytes / 1e6 / (now - started):,.1f} MB/s of values)"
                )
        seconds = time.perf_counter() - started
    finally:
        stop.set()
    if errors:
        raise BenchError(errors[0])
    key_bytes = sum(len(key_of(i)) for i in range(keys))
    return Load(
        keys, keys * value_bytes, key_bytes + keys * value_bytes, seconds,
        state["largest"], state["retries"],
    )  # fmt: skip


def verify_sample(node: Node, keys: int, value_bytes: int, seed: int) -> int:
    """Stale reads of SAMPLE_KEYS random keys on ``node``; every one must match."""
    picks = random.Random(seed).sample(range(keys), min(SAMPLE_KEYS, keys))
    conn = connect(node.url, 30)
    try:
        for i in picks:
            conn.request("GET", f"/v1/kv/{urllib.parse.quote(key_of(i))}?consistency=stale")
            response = conn.getresponse()
            body = response.read()
            if response.status != 200 or body != value_of(i, value_bytes).encode():
                raise BenchError(
                    f"{node.node_id}: {key_of(i)} answered {response.status} {body[:120]!r}"
                )
    finally:
        conn.close()
    return len(picks)


# -- disk ---------------------------------------------------------------------------


def disk_bytes(directory: Path) -> tuple[int, int, dict[str, int]]:
    """(apparent st_size, allocated st_blocks x 512, allocated per top-level entry) of
    the files under ``directory``, each inode counted once."""
    seen: set[tuple[int, int]] = set()
    apparent = allocated = 0
    by_entry: dict[str, int] = {}
    for root, _dirs, files in os.walk(directory):
        for name in files:
            path = Path(root, name)
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            apparent += st.st_size
            allocated += st.st_blocks * 512
            entry = path.relative_to(directory).parts[0]
            by_entry[entry] = by_entry.get(entry, 0) + st.st_blocks * 512
    return apparent, allocated, by_entry


# -- reads --------------------------------------------------------------------------


def uniform(keys: int) -> Callable[[random.Random], int]:
    return lambda rng: rng.randrange(keys)


def skewed(keys: int) -> Callable[[random.Random], int]:
    hot = max(1, keys // HOT_EVERY)

    def pick(rng: random.Random) -> int:
        if rng.random() < HOT_SHARE:
            return HOT_EVERY * rng.randrange(hot)
        return rng.randrange(keys)

    return pick


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def read_phase(
    node: Node,
    query: str,
    pick: Callable[[random.Random], int],
    value_bytes: int,
    seconds: float,
) -> Reads:
    """READ_THREADS threads of GETs on ``node`` for ``seconds``, each on one keep-alive
    connection."""
    latencies: list[list[float]] = [[] for _ in range(READ_THREADS)]
    counts = [[0, 0] for _ in range(READ_THREADS)]  # ok, errors
    deadline = time.perf_counter() + seconds

    def worker(n: int) -> None:
        rng = random.Random(1000 + n)
        conn = connect(node.url, 10)
        mine, count = latencies[n], counts[n]
        try:
            while time.perf_counter() < deadline:
                i = pick(rng)
                path = f"/v1/kv/{urllib.parse.quote(key_of(i))}{query}"
                began = time.perf_counter()
                try:
                    conn.request("GET", path)
                    response = conn.getresponse()
                    body = response.read()
                except (OSError, http.client.HTTPException):
                    mine.append(time.perf_counter() - began)
                    count[1] += 1
                    conn.close()
                    conn = connect(node.url, 10)
                    continue
                mine.append(time.perf_counter() - began)
                if response.status == 200 and body == value_of(i, value_bytes).encode():
                    count[0] += 1
                else:
                    count[1] += 1
        finally:
            conn.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(READ_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    every = sorted(x for one in latencies for x in one)
    ok, errors = sum(c[0] for c in counts), sum(c[1] for c in counts)
    return Reads(
        node.node_id, elapsed, len(every), ok, errors,
        percentile(every, 0.50) * 1000, percentile(every, 0.99) * 1000,
    )  # fmt: skip


# -- rebuild ------------------------------------------------------------------------


def rebuild(
    procs: Processes,
    nodes: list[Node],
    leader: Node,
    sampler: Sampler,
    value_bytes_total: int,
) -> Rebuild:
    target = applied(leader)
    wait_until(
        f"every node at the leader's offset {target:,}",
        lambda: all(applied(n) >= target for n in nodes),
        CATCH_UP_TIMEOUT_S,
        lambda: exited(nodes),
    )
    victim = next(n for n in nodes if n is not leader)
    cluster.kill_and_wipe(procs, victim)
    log_name = f"{victim.node_id}-rebuild.log"
    started = time.perf_counter()
    server = start_node(procs, victim, log_name)
    sampler.watch(victim.node_id, server.pid)
    sampler.watch("rebuild", server.pid)
    became_ready: list[float] = []

    def rebuilt() -> bool:
        if not became_ready and ready(victim):
            became_ready.append(time.perf_counter() - started)
        return bool(became_ready) and applied(victim) >= target

    wait_until(
        f"{victim.node_id} ready at offset {target:,}",
        rebuilt,
        REBUILD_TIMEOUT_S,
        lambda: exited(nodes),
    )
    seconds = time.perf_counter() - started
    sampler.sample()
    sampler.unwatch("rebuild")
    log = (victim.data_dir.parent / log_name).read_text(errors="replace")
    caught = CAUGHT_UP.findall(log)
    how = CATCHING_UP.search(log)
    records, pulled_mb, pull_s = (
        (int(caught[-1][0]), float(caught[-1][1]), float(caught[-1][3])) if caught else (None,) * 3
    )
    progress(
        f"rebuilt in {seconds:.2f}s ({value_bytes_total / 1e6 / seconds:,.1f} MB/s); "
        f"log: {caught[-1] if caught else 'no caught-up line'}"
    )
    return Rebuild(
        victim.node_id, seconds, became_ready[0], target, value_bytes_total,
        how.group(1).strip() if how else "", records, pulled_mb, pull_s,
        mib(sampler.rss_peaks.get("rebuild", 0)),
    )  # fmt: skip


# -- one row ------------------------------------------------------------------------


def measure(
    procs: Processes, sampler: Sampler, nodes: list[Node], row: Row, read_seconds: float
) -> None:
    """Fill ``row`` step by step; raises BenchError when a step cannot go on."""
    for node in nodes:
        server = start_node(procs, node, f"{node.node_id}.log")
        sampler.watch(node.node_id, server.pid)
        sampler.watch_group(node.node_id, node.group)
    wait_until(
        "/readyz on 3 nodes", lambda: all(map(ready, nodes)), START_TIMEOUT_S, lambda: exited(nodes)
    )
    keys = math.ceil(row.multiple * row.cap_mib * 2**20 / row.value_bytes)
    progress(
        f"{row.multiple}x: loading {keys:,} keys of {row.value_bytes} B values "
        f"({mib(keys * row.value_bytes):,.0f} MiB per replica), {PUTS_PER_TXN} puts per txn, "
        f"{IN_FLIGHT} in flight"
    )
    row.load = loaded = load(nodes, keys, row.value_bytes)
    row.formula_mib = mib(formula_bytes(loaded.largest_body_bytes))
    progress(f"loaded in {loaded.seconds:.1f}s ({loaded.mb_per_s:,.1f} MB/s of values)")
    leader = wait_leader(nodes)
    loaded.leader_offset = target = applied(leader)
    wait_until(
        f"every node at the leader's offset {target:,}",
        lambda: all(applied(n) >= target for n in nodes),
        CATCH_UP_TIMEOUT_S,
        lambda: exited(nodes),
    )
    for seed, node in enumerate(nodes):
        loaded.sample_verified += verify_sample(node, keys, row.value_bytes, seed)
    progress(f"verified {SAMPLE_KEYS:,} random keys on each node with stale reads")
    sizes = {node.node_id: disk_bytes(node.data_dir) for node in nodes}
    row.disk = Disk(
        {k: v[0] for k, v in sizes.items()}, {k: v[1] for k, v in sizes.items()},
        loaded.kv_bytes_total, {k: v[2] for k, v in sizes.items()},
    )  # fmt: skip
    progress(
        f"disk per logical byte: {row.disk.allocated_ratio:.2f} allocated, "
        f"{row.disk.apparent_ratio:.2f} apparent; {disk_breakdown(row.disk)}"
    )
    leader = wait_leader(nodes)
    follower = next(n for n in nodes if n is not leader)
    phases = [
        ("stale uniform", follower, "?consistency=stale", uniform(keys)),
        ("stale skewed", follower, "?consistency=stale", skewed(keys)),
        ("linearizable uniform", leader, "", uniform(keys)),
        ("linearizable skewed", leader, "", skewed(keys)),
    ]
    for kind, node, query, pick in phases:
        progress(f"reads: {kind} on {node.node_id} for {read_seconds:.0f}s")
        found = read_phase(node, query, pick, row.value_bytes, read_seconds)
        row.reads[kind] = found
        progress(
            f"  {found.per_s:,.0f} GET/s, p50 {found.p50_ms:.2f} ms, p99 {found.p99_ms:.2f} ms, "
            f"{found.errors} errors"
        )
        problem = exited(nodes)
        if problem is not None:
            raise BenchError(f"during the reads: {problem}")
    leader = wait_leader(nodes)
    row.rebuild = rebuilt = rebuild(procs, nodes, leader, sampler, loaded.value_bytes_total)
    victim = next(n for n in nodes if n.node_id == rebuilt.node)
    rebuilt.sample_verified = verify_sample(victim, keys, row.value_bytes, 99)
    progress(f"verified {rebuilt.sample_verified:,} random keys on the rebuilt {victim.node_id}")


def run_row(multiple: int, cap_mib: int, value_bytes: int, read_seconds: float) -> Row:
    """One fresh cluster in fresh cgroups; its processes are stopped and its groups
    removed before this returns, whatever happens."""
    full_body = len(txn_body(0, PUTS_PER_TXN, value_bytes))
    row = Row(multiple, cap_mib, value_bytes, mib(formula_bytes(full_body)))
    groups: list[memcg.MemoryCgroup] = []
    try:
        for i in range(NODES):
            name = f"rkv-bench-capacity-{os.getpid()}-x{multiple}-n{i}"
            groups.append(memcg.MemoryCgroup(name, cap_mib * 2**20))
        with (
            tempfile.TemporaryDirectory(prefix=f"rkv-bench-capacity-{multiple}x-") as tmp,
            Processes() as procs,
            Sampler() as sampler,
        ):
            nodes = make_nodes(Path(tmp), groups)
            try:
                measure(procs, sampler, nodes, row, read_seconds)
            except BenchError as error:
                row.error = str(error)
                progress(f"{multiple}x failed: {error}")
            sampler.sample()
            row.alive = all(n.alive for n in nodes)
            row.peak_rss_anon_mib = {
                n.node_id: mib(sampler.rss_peaks.get(n.node_id, 0)) for n in nodes
            }
            row.peak_cgroup_anon_mib = {
                n.node_id: mib(sampler.group_anon_peaks.get(n.node_id, 0)) for n in nodes
            }
            row.peak_charge_mib = {n.node_id: mib(n.group.peak_bytes()) for n in nodes}
            row.oom_kills = sum(n.group.oom_kills() for n in nodes)
    finally:
        for group in groups:
            try:
                group.remove()
            except OSError as error:
                progress(f"could not remove cgroup {group.path}: {error}")
    return row


# -- main ---------------------------------------------------------------------------


@dataclass
class Args:
    cap_mib: int
    multiples: list[int]
    value_bytes: int
    read_seconds: float
    out: Path


def parse_args(argv: list[str] | None) -> Args:
    parser = argparse.ArgumentParser(
        description="Benchmark rkv nodes in memory cgroups holding many times their cap."
    )
    parser.add_argument("--cap-mib", type=int, default=256, help="per-node cgroup limit (256)")
    parser.add_argument(
        "--multiples",
        help="comma-separated N: N x cap of values per replica, one row each "
        f"(default {','.join(map(str, DEFAULT_MULTIPLES))})",
    )
    parser.add_argument("--value-bytes", type=int, default=1024, help="bytes per value (1024)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"multiples {','.join(map(str, QUICK_MULTIPLES))} and "
        f"{QUICK_READ_SECONDS:.0f} s reads (a smoke run)",
    )
    out = Path(__file__).resolve().parent / "results"
    parser.add_argument("--out", type=Path, default=out, help="default bench/results")
    args = parser.parse_args(argv)
    if args.multiples is not None:
        try:
            multiples = [int(m) for m in args.multiples.split(",") if m.strip()]
        except ValueError:
            parser.error(
                f"--multiples must be integers separated by commas, not {args.multiples!r}"
            )
    else:
        multiples = list(QUICK_MULTIPLES if args.quick else DEFAULT_MULTIPLES)
    if not multiples or min(multiples) < 1:
        parser.error("--multiples must be positive integers")
    if args.cap_mib < 64:
        parser.error("--cap-mib must be at least 64")
    if args.value_bytes < 16:
        parser.error("--value-bytes must be at least 16")
    seconds = QUICK_READ_SECONDS if args.quick else READ_SECONDS
    return Args(args.cap_mib, multiples, args.value_bytes, seconds, args.out)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    interrupt_on_signals()
    reason = memcg.unavailable()
    meta = (
        f"{time.strftime('%F %T')}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"cap {args.cap_mib} MiB per node, values of {args.value_bytes} B, "
        f"scratch in {tempfile.gettempdir()}"
    )
    progress(meta)
    started = time.monotonic()
    try:
        if reason is not None:
            raise BenchError(f"no memory cgroup can be made here: {reason}")
        rows = [
            run_row(multiple, args.cap_mib, args.value_bytes, args.read_seconds)
            for multiple in args.multiples
        ]
    except BenchError as error:
        raise SystemExit(f"capacity benchmark failed: {error}") from None
    write_results(args.out, rows, meta)
    print(format_report(rows))
    print(f"took {time.monotonic() - started:.0f} s")
    print(f"results written to {args.out / 'capacity.json'} and {args.out / 'capacity.html'}")
    if any(r.error for r in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
