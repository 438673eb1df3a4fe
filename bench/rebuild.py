"""Replica rebuild benchmark (not a test): how long a wiped follower takes to come back.

Three real ``python -m node.cli node`` processes on loopback (fresh ports, a cluster
secret, ``--raft-compaction-entries 1000`` so the leader's raft journal is compacted
and a wiped follower cannot be brought back from it). N keys with 100-byte values are
loaded through the leader with POST /v1/txn (1000 puts per transaction, several
requests in flight), then read-only transactions until the leader compacts its journal
(so its raft marker covers the whole load: the follower must pull every record).
Once every follower has applied the leader's offset, one follower
is SIGKILLed, its data directory deleted, and it is restarted with the same arguments.
Timed: from the restart until it answers GET /readyz with 200 AND its applied offset
(GET /v1/status) reaches the leader's. Reported: the records it pulled (its node.log's
"caught up: N records (M MB) pulled ... in S s"), the seconds, keys/s, and its peak RSS
(VmHWM in /proc/<pid>/status at the end). A sample of keys is then read back from the
rebuilt node with stale reads and must match what was written.

Run from the repository root: ``python -m bench.rebuild [--quick] [--keys N]``.
Scratch data goes to the system temporary directory (set TMPDIR to pick the disk)
and is deleted afterwards; every node is stopped by PID, also on errors and Ctrl-C.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import random
import re
import sys
import tempfile
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from bench import nodes as cluster
from bench.compaction import bar_chart
from bench.nodes import Node, applied, exited, leader_of, ready, status, wait_leader
from bench.procs import Processes, interrupt_on_signals
from bench.support import (
    BenchError,
    http_request,
    progress,
    wait_until,
)

VALUE_BYTES = 100
PUTS_PER_TXN = 1000
CONCURRENCY = 4
RAFT_COMPACTION_ENTRIES = 1000
FULL_KEYS = 1_000_000
QUICK_KEYS = 100_000
SAMPLE_KEYS = 2000
TARGET_S = 60.0
START_TIMEOUT_S = 60.0
REBUILD_TIMEOUT_S = 900.0
PROGRESS_SECONDS = 3.0
CAUGHT_UP = re.compile(r"caught up: (\d+) records \([\d.]+ MB\) pulled from \S+ in ([\d.]+)s")
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
HEADER = (
    "keys", "load s", "load keys/s", "records pulled", "pull s", "to ready s", "total s",
    "keys/s", "peak RSS MiB", "sample ok", "total <= 60 s",
)  # fmt: skip


def key_of(i: int) -> str:
    return f"rebuild/{i:08d}"


def value_of(i: int) -> str:
    return f"{i:010d}".ljust(VALUE_BYTES, "v")


# -- the cluster --------------------------------------------------------------------


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


# -- load ---------------------------------------------------------------------------


def load(leader_url: str, keys: int) -> float:
    """Put ``keys`` keys through the leader; returns the seconds it took."""
    url = f"{leader_url}/v1/txn?encoding=utf-8"

    def txn(start: int) -> int:
        ops = [
            {"op": "put", "key": key_of(i), "value": value_of(i)}
            for i in range(start, min(start + PUTS_PER_TXN, keys))
        ]
        for _attempt in range(3):
            code, body = http_request(url, "POST", {"success": ops}, timeout=60)
            if code == 200:
                return len(ops)
            progress(f"txn at {start} answered {code}: {body[:200]!r}; retrying")
        raise BenchError(f"POST /v1/txn at key {start} failed 3 times")

    started = last = time.perf_counter()
    done = 0
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        for n in pool.map(txn, range(0, keys, PUTS_PER_TXN)):
            done += n
            now = time.perf_counter()
            if now - last >= PROGRESS_SECONDS:
                last = now
                progress(f"  loaded {done:,}/{keys:,} keys ({done / (now - started):,.0f} keys/s)")
    return time.perf_counter() - started


def compact_leader_journal(nodes: list[Node], leader: Node) -> tuple[Node, int]:
    """Read-only transactions (one raft entry each, no records) until the leader's raft
    journal shrinks: its raft marker then covers every loaded entry, so a wiped
    follower cannot be sent them from the journal. Returns the leader (an election may
    happen meanwhile) and how many transactions it took."""
    before = int(status(leader).get("raft_log_entries") or 0)
    body = {"success": [{"op": "get", "key": key_of(0)}]}
    for n in range(1, 3 * RAFT_COMPACTION_ENTRIES + 1):
        code, answer = http_request(f"{leader.url}/v1/txn?encoding=utf-8", "POST", body, 10)
        if code != 200:
            progress(f"read-only txn answered {code}: {answer[:200]!r}; finding the leader")
            wait_until("a leader", lambda: leader_of(nodes) is not None, 60, lambda: exited(nodes))
            leader = leader_of(nodes) or leader
            before = int(status(leader).get("raft_log_entries") or 0)
        elif n % 20 == 0:
            now = int(status(leader).get("raft_log_entries") or 0)
            if now < before:  # a compaction since the last look, so after the load
                return leader, n
            before = now
    raise BenchError(f"the leader's raft journal did not shrink after {n} entries")


def verify_sample(node: Node, keys: int) -> int:
    """Stale reads of a sample of keys on ``node``; every one must match what was written."""
    picks = sorted(random.Random(7).sample(range(keys), min(SAMPLE_KEYS, keys)))
    for i in {0, keys - 1, *picks}:
        path = urllib.parse.quote(key_of(i))
        code, body = http_request(f"{node.url}/v1/kv/{path}?consistency=stale")
        if code != 200 or body != value_of(i).encode():
            raise BenchError(f"rebuilt node: {key_of(i)} answered {code} {body[:120]!r}")
    return len({0, keys - 1, *picks})


# -- one run ------------------------------------------------------------------------


@dataclass
class Row:
    keys: int
    load_seconds: float
    records_pulled: int
    pull_seconds: float
    ready_seconds: float
    seconds: float
    peak_rss_mib: float
    sample_verified: int
    leader_offset: int
    phases: dict[str, float]

    @property
    def keys_per_s(self) -> float:
        return self.keys / self.seconds

    @property
    def status(self) -> str:
        return "PASS" if self.seconds <= TARGET_S else "MISS"

    def cells(self) -> tuple[str, ...]:
        return (
            f"{self.keys:,}",
            f"{self.load_seconds:.1f}",
            f"{self.keys / self.load_seconds:,.0f}",
            f"{self.records_pulled:,}",
            f"{self.pull_seconds:.2f}",
            f"{self.ready_seconds:.2f}",
            f"{self.seconds:.2f}",
            f"{self.keys_per_s:,.0f}",
            f"{self.peak_rss_mib:,.1f}",
            f"{self.sample_verified:,}",
            self.status,
        )


def log_phases(log: Path, restarted_wall: float) -> dict[str, float]:
    """Seconds after the restart at which notable lines of the rebuilt node's log appear."""
    marks = {"catching up:": "pull started", "caught up:": "pull finished"}
    found: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        stamp = LOG_TIME.match(line)
        for needle, name in marks.items():
            if stamp and needle in line and name not in found:
                wall = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                found[name] = round(wall - restarted_wall, 3)
    return found


def measure(procs: Processes, scratch: Path, keys: int) -> Row:
    nodes = cluster.make_nodes(scratch, ["--raft-compaction-entries", str(RAFT_COMPACTION_ENTRIES)])
    for node in nodes:
        cluster.start_node(procs, node)
    wait_until(
        "/readyz on 3 nodes", lambda: all(map(ready, nodes)), START_TIMEOUT_S, lambda: exited(nodes)
    )
    leader = wait_leader(nodes, 30)
    progress(f"leader {leader.node_id}; loading {keys:,} keys, {PUTS_PER_TXN} puts per txn")
    load_seconds = load(leader.url, keys)
    target = applied(leader)
    progress(f"loaded in {load_seconds:.1f}s; leader at offset {target:,}")
    leader, fillers = compact_leader_journal(nodes, leader)
    progress(f"leader's raft journal compacted after {fillers} read-only entries")
    wait_until(
        "followers at the leader's offset",
        lambda: all(applied(n) >= target for n in nodes),
        300,
        lambda: exited(nodes),
    )
    victim = next(n for n in nodes if n is not leader)
    cluster.kill_and_wipe(procs, victim)
    log = victim.data_dir.parent / f"{victim.node_id}.log"
    restarted_wall = time.time()
    started = time.perf_counter()
    server = cluster.start_node(procs, victim)
    became_ready: list[float] = []

    def rebuilt() -> bool:
        if not became_ready and ready(victim):
            became_ready.append(time.perf_counter() - started)
        return bool(became_ready) and applied(victim) >= target

    wait_until(
        f"{victim.node_id} ready at offset {target:,}", rebuilt, REBUILD_TIMEOUT_S, server.exited
    )
    seconds = time.perf_counter() - started
    rss = peak_rss_mib(server.pid)
    caught = CAUGHT_UP.findall(log.read_text(errors="replace"))
    pulled, pull_s = (int(caught[-1][0]), float(caught[-1][1])) if caught else (0, 0.0)
    progress(f"rebuilt in {seconds:.2f}s ({pulled:,} records pulled in {pull_s:.2f}s)")
    sample = verify_sample(victim, keys)
    progress(f"verified {sample:,} keys on {victim.node_id} with stale reads")
    return Row(
        keys, load_seconds, pulled, pull_s, became_ready[0], seconds, rss, sample, target,
        log_phases(log, restarted_wall),
    )  # fmt: skip


# -- report -------------------------------------------------------------------------


def format_table(rows: list[Row]) -> str:
    lines = [HEADER, *(row.cells() for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]

    def fmt(line: tuple[str, ...]) -> str:
        return "  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True))

    return "\n".join([fmt(HEADER), "  ".join("-" * w for w in widths), *map(fmt, lines[1:])])


def render_html(rows: list[Row], meta: str) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row.cells()) + "</tr>"
        for row in rows
    )
    chart = bar_chart(
        [(f"{r.keys:,} keys", r.seconds, r.status) for r in rows],
        "s",
        [(TARGET_S, f"target <= {TARGET_S:.0f} s")],
    )
    phases = "".join(f"<li>{r.keys:,} keys: {html.escape(json.dumps(r.phases))}</li>" for r in rows)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>rkv replica rebuild benchmark</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
th,td{{border:1px solid #ccc;padding:3px 10px;text-align:right}}</style></head>
<body><h1>rkv replica rebuild benchmark</h1><p>{html.escape(meta)}</p>
<p>3 node processes on loopback, --raft-compaction-entries {RAFT_COMPACTION_ENTRIES}. Keys with
{VALUE_BYTES}-byte values loaded through the leader with POST /v1/txn ({PUTS_PER_TXN} puts per
transaction, {CONCURRENCY} in flight). One follower SIGKILLed, its data directory deleted and
restarted; "total s" runs from the restart until it answers /readyz 200 and its applied offset
reaches the leader's. "pull s" is the node's own log line; peak RSS is its VmHWM. A sample
of keys was read back from it with stale reads.</p>
<table><tr>{head}</tr>{body}</table>
<h2>Rebuild time (s)</h2>
{chart}
<h2>Log lines, seconds after the restart</h2><ul>{phases}</ul>
</body></html>
"""


def write_results(out: Path, rows: list[Row], meta: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "meta": meta,
        "config": {"nodes": cluster.NODES, "value_bytes": VALUE_BYTES, "puts_per_txn": PUTS_PER_TXN}
        | {"concurrency": CONCURRENCY, "raft_compaction_entries": RAFT_COMPACTION_ENTRIES},
        "targets": {"seconds_at_most": TARGET_S},
        "rows": [asdict(r) | {"keys_per_s": r.keys_per_s, "status": r.status} for r in rows],
    }
    (out / "rebuild.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "rebuild.html").write_text(render_html(rows, meta))


# -- main ---------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> tuple[int, Path]:
    parser = argparse.ArgumentParser(description="Benchmark rebuilding a wiped rkv replica.")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_KEYS:,} keys")
    parser.add_argument("--keys", type=int, help=f"keys to load (default {FULL_KEYS:,})")
    out = Path(__file__).resolve().parent / "results"
    parser.add_argument("--out", type=Path, default=out, help="default bench/results")
    args = parser.parse_args(argv)
    keys: int = args.keys if args.keys is not None else QUICK_KEYS if args.quick else FULL_KEYS
    if keys < PUTS_PER_TXN:
        parser.error(f"--keys must be at least {PUTS_PER_TXN}")
    return keys, args.out


def main(argv: list[str] | None = None) -> None:
    keys, out = parse_args(argv)
    interrupt_on_signals()
    meta = (
        f"{time.strftime('%F %T')}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"scratch in {tempfile.gettempdir()}"
    )
    progress(meta)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="rkv-bench-rebuild-") as tmp,
            Processes() as procs,
        ):
            rows = [measure(procs, Path(tmp), keys)]
    except BenchError as error:
        raise SystemExit(f"rebuild benchmark failed: {error}") from None
    write_results(out, rows, meta)
    print(format_table(rows))
    print(
        f"target: rebuild of a wiped follower <= {TARGET_S:.0f} s (restart to ready and caught up)"
    )
    print(f"log lines after the restart (s): {rows[0].phases}")
    print(f"results written to {out / 'rebuild.json'} and {out / 'rebuild.html'}")


if __name__ == "__main__":
    main()
