"""Idempotent producer benchmark (not a test): what deduplicated writes cost against plain ones.

    .venv/bin/python -m bench.producer [--duration 10] [--workers 32] [--rounds 4]
                                       [--quick] [--out bench/results]

One 3-node ``rkv up`` cluster on loopback (bench/rkv_cluster.py); every write goes to its
leader. The same aiohttp closed-loop generator (``--workers`` workers, each with one
request in flight, one shared connection pool) sends, in two modes:

- plain: the write alone;
- idempotent: each worker owns a producer (POST /v1/producers, before the timed runs)
  and sends its writes one at a time with Rkv-Producer-Id, Rkv-Producer-Epoch and its
  own Rkv-Sequence counter (0, 1, 2, ...). A request without an answer (socket error,
  timeout) or with a 5xx is retried with the same sequence until it is acknowledged,
  as a real producer would; latency runs from the first attempt to the acknowledgement.

and two operations: ``put`` (PUT /v1/kv/{key} of a unique key, 100-byte value) and
``incr`` (POST /v1/kv/{key}?op=incr&by=1 of a counter per worker and mode). Each
(operation, mode) gets ``--duration`` seconds in all, cut into ``--rounds`` segments
whose order alternates (round 0: plain then idempotent, round 1: idempotent then plain,
...), so the drift of this small, noisy machine falls on both modes alike. Before them,
a short unrecorded warm-up of both modes. Reported: throughput (acknowledged writes per
second) and p50/p99 latency per (operation, mode), the ratio idempotent/plain and the cost
in percent (target: below 15 %), with the cost of every round to show the noise. Also the
CPU time per acknowledged write of the 3 node processes and of the generator (from
/proc/<pid>/stat), less sensitive to noise than throughput, and the CPU other processes
of this machine took meanwhile (% of one core; /proc/stat, steal included). A round in
which it exceeds 20 % in either mode is marked ``!`` as disturbed, and the cost is also
given over the quiet rounds alone; PASS/MISS is judged on every round.

Then the results are checked on the leader (linearizable reads): every idempotent answer
was a 200; each idempotent counter equals its worker's acknowledged increments, and each
increment answered the previous value plus one; the idempotent put prefix holds exactly
the acknowledged keys. The plain counterparts are shown too (a plain write that timed out
may or may not have been applied, so they are exact only without errors).

Run from the repository root (``python bench/producer.py`` would let bench/http.py shadow
the standard library). Progress goes to stderr, the tables to stdout, the report to
bench/results/producer.json and producer.html. Scratch data goes to the system temporary
directory (set TMPDIR to pick the disk); the cluster is stopped by PID, also on errors and
Ctrl-C. Exit status 1 when a check fails (a missed cost target only prints MISS).
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import os
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench import rkv_cluster
from bench.compaction import bar_chart
from bench.loadgen import VALUE
from bench.procs import Processes, interrupt_on_signals
from bench.support import BenchError, http_json, http_request, progress

OPS = ("put", "incr")
PLAIN, IDEMPOTENT = "plain", "idempotent"
MODES = (PLAIN, IDEMPOTENT)
TARGET_COST_PCT = 15.0
DISTURBED_PCT = 20.0  # other processes' CPU (% of one core) that marks a segment disturbed
KEY_ROOT = "bench-producer"
REQUEST_TIMEOUT_S = 10.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MAX_ATTEMPTS = 20  # of one idempotent write (same sequence) before the run gives up
RETRY_PAUSE_S = 0.05
SCAN_PAGE = 2000
HEADER = (
    "operation", "mode", "acked", "seconds", "ops/s", "p50 ms", "p99 ms", "errors",
    "retries", "duplicates", "node CPU ms/op", "client CPU ms/op", "other CPU %",
)  # fmt: skip
COMPARE_HEADER = (
    "operation", "plain ops/s", "idempotent ops/s", "idem/plain", "cost %", "cost % by round",
    "cost % quiet rounds",
    "p50 ms plain/idem", "p99 ms plain/idem", "CPU/op idem/plain", f"cost < {TARGET_COST_PCT:.0f}%",
)  # fmt: skip


@dataclass(frozen=True)
class Settings:
    duration: float  # seconds per (operation, mode), over every round
    rounds: int
    workers: int
    warmup: float  # seconds per mode
    out: Path

    @property
    def segment(self) -> float:
        return self.duration / self.rounds


@dataclass(frozen=True)
class Producer:
    producer_id: int
    epoch: int


@dataclass
class Worker:
    """One closed-loop worker; in idempotent mode, its producer and sequence counter."""

    index: int
    producer: Producer
    sequence: int = 0
    next_key: dict[str, int] = field(default_factory=dict)  # put root -> next key number
    acked: dict[str, int] = field(default_factory=dict)  # root -> acknowledged writes
    off_by: dict[str, int] = field(default_factory=dict)  # incr root -> answers != acked+1
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CpuSample:
    """Clock ticks so far: the machine's (user+nice+system), its steal, the cluster's
    process group and this process (the generator)."""

    busy: int
    steal: int
    nodes: int
    client: int


def _ticks(pid: int | str) -> tuple[int, int] | None:
    """(process group, user+system ticks) of a process, None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # from field 3 (state) on
    return int(fields[2]), int(fields[11]) + int(fields[12])


def cpu_sample(pgid: int | None) -> CpuSample:
    cpu = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    nodes = 0
    if pgid is not None:
        for entry in os.listdir("/proc"):
            found = _ticks(entry) if entry.isdigit() else None
            if found is not None and found[0] == pgid:
                nodes += found[1]
    client = _ticks(os.getpid())
    return CpuSample(sum(cpu[:3]), cpu[7], nodes, client[1] if client else 0)


def cluster_pgid(scratch: Path) -> int | None:
    """The process group of the processes whose command line names ``scratch``."""
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if str(scratch).encode() in argv and int(entry) != os.getpid():
            return os.getpgid(int(entry))
    return None


@dataclass
class Segment:
    """One timed (operation, mode) run of every worker."""

    op: str
    mode: str
    round: int
    seconds: float = 0.0
    acked: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # plain: failed requests by kind
    statuses: dict[str, int] = field(default_factory=dict)  # every answer (or "socket")
    retries: int = 0
    duplicates: int = 0
    node_cpu_s: float = 0.0  # CPU seconds of the 3 nodes (and rkv up)
    client_cpu_s: float = 0.0  # of the generator
    other_cpu_s: float = 0.0  # of every other process, and steal
    latencies: list[float] = field(default_factory=list)

    @property
    def ops(self) -> float:
        return self.acked / self.seconds if self.seconds > 0 else 0.0

    @property
    def other_pct(self) -> float:
        """Other processes' CPU, in % of one core."""
        return self.other_cpu_s / self.seconds * 100 if self.seconds > 0 else 0.0

    def account(self, before: CpuSample, after: CpuSample) -> None:
        nodes, client = after.nodes - before.nodes, after.client - before.client
        other = after.busy - before.busy - nodes - client + after.steal - before.steal
        self.node_cpu_s = nodes / CLOCK_TICKS
        self.client_cpu_s = client / CLOCK_TICKS
        self.other_cpu_s = max(0, other) / CLOCK_TICKS

    def count(self, table: dict[str, int], kind: str) -> None:
        table[kind] = table.get(kind, 0) + 1

    def summary(self) -> dict[str, Any]:
        return {
            "op": self.op, "mode": self.mode, "round": self.round, "seconds": self.seconds,
            "acked": self.acked, "ops_per_s": self.ops, "errors": self.errors,
            "statuses": self.statuses, "retries": self.retries, "duplicates": self.duplicates,
            "p50_ms": percentile(sorted(self.latencies), 50),
            "p99_ms": percentile(sorted(self.latencies), 99),
            "node_cpu_s": self.node_cpu_s, "client_cpu_s": self.client_cpu_s,
            "other_cpu_pct": self.other_pct,
        }  # fmt: skip


@dataclass
class Row:
    """Every round of one (operation, mode), pooled."""

    op: str
    mode: str
    acked: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: int
    retries: int
    duplicates: int
    round_ops: list[float]
    round_other_pct: list[float]
    node_cpu_s: float
    client_cpu_s: float
    other_cpu_s: float

    @property
    def ops(self) -> float:
        return self.acked / self.seconds if self.seconds > 0 else 0.0

    @property
    def node_ms_per_op(self) -> float:
        return self.node_cpu_s * 1000 / self.acked if self.acked else 0.0

    @property
    def client_ms_per_op(self) -> float:
        return self.client_cpu_s * 1000 / self.acked if self.acked else 0.0

    @property
    def other_pct(self) -> float:
        return self.other_cpu_s / self.seconds * 100 if self.seconds > 0 else 0.0

    def cells(self) -> tuple[str, ...]:
        return (
            self.op, self.mode, f"{self.acked:,}", f"{self.seconds:.1f}", f"{self.ops:,.0f}",
            f"{self.p50_ms:.2f}", f"{self.p99_ms:.2f}", f"{self.errors:,}",
            f"{self.retries:,}", f"{self.duplicates:,}", f"{self.node_ms_per_op:.3f}",
            f"{self.client_ms_per_op:.3f}", f"{self.other_pct:.0f}",
        )  # fmt: skip


@dataclass
class Comparison:
    op: str
    plain: Row
    idempotent: Row

    @property
    def ratio(self) -> float:
        return self.idempotent.ops / self.plain.ops if self.plain.ops > 0 else 0.0

    @property
    def cost_pct(self) -> float:
        return (1.0 - self.ratio) * 100

    @property
    def round_costs(self) -> list[float]:
        pairs = zip(self.plain.round_ops, self.idempotent.round_ops, strict=True)
        return [(1.0 - i / p) * 100 if p > 0 else 100.0 for p, i in pairs]

    @property
    def quiet_rounds(self) -> list[int]:
        """Rounds where neither mode's segment was disturbed by other processes."""
        pairs = zip(self.plain.round_other_pct, self.idempotent.round_other_pct, strict=True)
        return [r for r, (p, i) in enumerate(pairs) if max(p, i) <= DISTURBED_PCT]

    @property
    def quiet_cost_pct(self) -> float | None:
        """The cost over the quiet rounds only (segments last alike: mean of rates)."""
        quiet = self.quiet_rounds
        plain = sum(self.plain.round_ops[r] for r in quiet)
        idem = sum(self.idempotent.round_ops[r] for r in quiet)
        return (1.0 - idem / plain) * 100 if quiet and plain > 0 else None

    @property
    def cpu_ratio(self) -> float:
        """CPU (nodes and generator) per write, idempotent over plain."""
        plain = self.plain.node_ms_per_op + self.plain.client_ms_per_op
        idem = self.idempotent.node_ms_per_op + self.idempotent.client_ms_per_op
        return idem / plain if plain > 0 else 0.0

    @property
    def status(self) -> str:
        return "PASS" if self.cost_pct < TARGET_COST_PCT else "MISS"

    def cells(self) -> tuple[str, ...]:
        quiet, quiet_cost = self.quiet_rounds, self.quiet_cost_pct
        rounds = " ".join(
            f"{c:+.0f}{'' if r in quiet else '!'}" for r, c in enumerate(self.round_costs)
        )
        quiet_text = "-" if quiet_cost is None else f"{quiet_cost:.1f} ({len(quiet)})"
        return (
            self.op, f"{self.plain.ops:,.0f}", f"{self.idempotent.ops:,.0f}",
            f"{self.ratio:.3f}", f"{self.cost_pct:.1f}", rounds, quiet_text,
            f"{self.plain.p50_ms:.2f}/{self.idempotent.p50_ms:.2f}",
            f"{self.plain.p99_ms:.2f}/{self.idempotent.p99_ms:.2f}", f"{self.cpu_ratio:.3f}",
            self.status,
        )  # fmt: skip


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    required: bool  # False: shown for contrast (plain writes), never failing the run

    def line(self) -> str:
        verdict = ("ok" if self.ok else "FAILED") if self.required else "info"
        return f"[{verdict}] {self.name}: {self.detail}"


def percentile(ordered: list[float], p: float) -> float:
    """The p-th percentile in milliseconds of sorted seconds (as bench/loadgen.py picks it)."""
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000


def key_root(token: str, label: str, mode: str) -> str:
    return f"{KEY_ROOT}/{token}/{label}/{mode}/"


# -- the load -----------------------------------------------------------------------


async def send(
    session: aiohttp.ClientSession, leader: str, op: str, key: str, headers: dict[str, str]
) -> tuple[int, bytes, bool]:
    """(status, body, duplicate) of one write."""
    if op == "put":
        request = session.put(f"{leader}/v1/kv/{key}", data=VALUE, headers=headers)
    else:
        request = session.post(f"{leader}/v1/kv/{key}?op=incr&by=1", headers=headers)
    async with request as response:
        body = await response.read()
        return response.status, body, response.headers.get("Rkv-Duplicate") == "true"


async def plain_write(
    session: aiohttp.ClientSession, leader: str, op: str, key: str, seg: Segment
) -> bytes | None:
    """One attempt; the body of a 200, else None (the failure counted)."""
    try:
        status, body, _ = await send(session, leader, op, key, {})
    except (aiohttp.ClientError, TimeoutError):
        seg.count(seg.statuses, "socket")
        seg.count(seg.errors, "socket")
        return None
    seg.count(seg.statuses, str(status))
    if status != 200:
        seg.count(seg.errors, f"http_{status}")
        return None
    return body


async def idempotent_write(
    session: aiohttp.ClientSession, leader: str, op: str, key: str, seg: Segment, w: Worker
) -> bytes | None:
    """Send with the worker's next sequence until acknowledged; None (and a problem noted
    on the worker) when the server refuses it or it never gets through."""
    headers = {
        "Rkv-Producer-Id": str(w.producer.producer_id),
        "Rkv-Producer-Epoch": str(w.producer.epoch),
        "Rkv-Sequence": str(w.sequence),
    }
    for attempt in range(MAX_ATTEMPTS):
        if attempt:
            seg.retries += 1
            await asyncio.sleep(RETRY_PAUSE_S)
        try:
            status, body, duplicate = await send(session, leader, op, key, headers)
        except (aiohttp.ClientError, TimeoutError):
            seg.count(seg.statuses, "socket")
            continue
        seg.count(seg.statuses, str(status))
        if status == 200:
            seg.duplicates += duplicate
            w.sequence += 1
            return body
        if status < 500 and status != 429:
            w.problems.append(f"{op} {key} seq {w.sequence}: {status} {body[:200]!r}")
            return None
    w.problems.append(f"{op} {key} seq {w.sequence}: no answer after {MAX_ATTEMPTS} attempts")
    return None


async def drive(
    session: aiohttp.ClientSession, leader: str, w: Worker, seg: Segment, root: str, end: float
) -> None:
    """One worker's closed loop until ``end`` (the write in flight then completes)."""
    while time.monotonic() < end and not w.problems:
        if seg.op == "put":
            number = w.next_key.get(root, 0)
            w.next_key[root] = number + 1
            key = f"{root}w{w.index:03d}/{number:08d}"
        else:
            key = f"{root}w{w.index:03d}"
        started = time.perf_counter()
        if seg.mode == IDEMPOTENT:
            body = await idempotent_write(session, leader, seg.op, key, seg, w)
        else:
            body = await plain_write(session, leader, seg.op, key, seg)
        if body is None:
            continue
        seg.latencies.append(time.perf_counter() - started)
        seg.acked += 1
        before = w.acked.get(root, 0)
        w.acked[root] = before + 1
        if seg.op == "incr" and _incr_value(body) != before + 1:
            w.off_by[root] = w.off_by.get(root, 0) + 1


def _incr_value(body: bytes) -> int | None:
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    value = answer.get("value") if isinstance(answer, dict) else None
    return value if isinstance(value, int) else None


async def run_segment(
    session: aiohttp.ClientSession,
    leader: str,
    workers: list[Worker],
    seg: Segment,
    root: str,
    seconds: float,
    pgid: int | None,
) -> Segment:
    cpu = cpu_sample(pgid)
    started = time.monotonic()
    end = started + seconds
    await asyncio.gather(*(drive(session, leader, w, seg, root, end) for w in workers))
    seg.seconds = time.monotonic() - started
    seg.account(cpu, cpu_sample(pgid))
    return seg


async def run_load(
    leader: str, workers: list[Worker], settings: Settings, token: str, pgid: int | None
) -> list[Segment]:
    connector = aiohttp.TCPConnector(limit=settings.workers)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    segments: list[Segment] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for mode in MODES:
            progress(f"warm-up: {settings.warmup:g} s of {mode} puts")
            root = key_root(token, "warmup", mode)
            warm = Segment("put", mode, -1)
            await run_segment(session, leader, workers, warm, root, settings.warmup, pgid)
            _check_workers(workers)
        for round_ in range(settings.rounds):
            for op in OPS:
                for mode in MODES if round_ % 2 == 0 else MODES[::-1]:
                    seg = Segment(op, mode, round_)
                    root = key_root(token, op, mode)
                    await run_segment(session, leader, workers, seg, root, settings.segment, pgid)
                    segments.append(seg)
                    _report_segment(seg, settings.rounds)
                    _check_workers(workers)
    return segments


def _check_workers(workers: list[Worker]) -> None:
    problems = [p for w in workers for p in w.problems]
    if problems:
        raise BenchError(f"{len(problems)} idempotent write(s) failed, e.g. {problems[0]}")


def _report_segment(seg: Segment, rounds: int) -> None:
    summary = seg.summary()
    extra = f", errors {seg.errors}" if seg.errors else ""
    extra += f", retries {seg.retries}" if seg.retries else ""
    extra += f", duplicates {seg.duplicates}" if seg.duplicates else ""
    progress(
        f"round {seg.round + 1}/{rounds} {seg.op:<4} {seg.mode:<10}: {seg.ops:,.0f} ops/s "
        f"({seg.acked:,} in {seg.seconds:.2f} s), p50 {summary['p50_ms']:.2f} ms, "
        f"p99 {summary['p99_ms']:.2f} ms{extra}; CPU ms/op nodes "
        f"{seg.node_cpu_s * 1000 / max(seg.acked, 1):.3f}, client "
        f"{seg.client_cpu_s * 1000 / max(seg.acked, 1):.3f}; other CPU {seg.other_pct:.0f}%"
    )


# -- the cluster and the checks -------------------------------------------------------


def new_producer(leader: str) -> Producer:
    answer = http_json(f"{leader}/v1/producers", "POST")
    if not isinstance(answer, dict) or not isinstance(answer.get("producer_id"), int):
        raise BenchError(f"POST {leader}/v1/producers answered {answer!r}")
    return Producer(answer["producer_id"], int(answer["epoch"]))


def raft_terms(urls: tuple[str, ...]) -> dict[str, int]:
    terms = {}
    for url in urls:
        status = http_json(f"{url}/v1/status")
        if isinstance(status, dict) and isinstance(status.get("term"), int):
            terms[url] = status["term"]
    return terms


def read_counter(leader: str, key: str) -> int | None:
    status, body = http_request(f"{leader}/v1/kv/{key}", timeout=30)
    if status != 200:
        return None
    try:
        return int(body)
    except ValueError:
        return None


def count_keys(leader: str, prefix: str) -> int:
    """How many keys start with ``prefix`` (linearizable scans of SCAN_PAGE keys)."""
    count, after = 0, None
    while True:
        query = {"prefix": prefix, "limit": str(SCAN_PAGE), "encoding": "utf-8"}
        if after is not None:
            query["start_after"] = after
        status, body = http_request(f"{leader}/v1/kv?{urllib.parse.urlencode(query)}", timeout=60)
        if status != 200:
            raise BenchError(f"scan of {prefix!r} answered {status}: {body[:200]!r}")
        page = json.loads(body)
        count += len(page["items"])
        after = page.get("next")
        if not after:
            return count


def verify(leader: str, workers: list[Worker], segments: list[Segment], token: str) -> list[Check]:
    checks: list[Check] = []
    for mode in MODES:
        idem = mode == IDEMPOTENT
        mine = [s for s in segments if s.mode == mode]
        answers = sum(sum(s.statuses.values()) for s in mine)
        other = {k: v for s in mine for k, v in s.statuses.items() if k != "200"}
        errors = sum(sum(s.errors.values()) for s in mine)
        checks.append(
            Check(
                f"{mode} answers all 200",
                not other,
                f"{answers:,} answers, non-200: {other or 'none'}; retries "
                f"{sum(s.retries for s in mine)}, duplicates {sum(s.duplicates for s in mine)}",
                idem,
            )
        )
        root = key_root(token, "incr", mode)
        acked = [w.acked.get(root, 0) for w in workers]
        values = [read_counter(leader, f"{root}w{w.index:03d}") or 0 for w in workers]
        wrong = [
            f"w{w.index}: {v} != {a}"
            for w, v, a in zip(workers, values, acked, strict=True)
            if v != a
        ]
        checks.append(
            Check(
                f"{mode} counters = acknowledged increments",
                not wrong,
                f"{len(workers)} counters, sum {sum(values):,} vs {sum(acked):,} acknowledged"
                + (f"; mismatched: {', '.join(wrong[:5])}" if wrong else ""),
                idem or errors == 0,
            )
        )
        off = sum(w.off_by.get(root, 0) for w in workers)
        checks.append(
            Check(
                f"{mode} incr answers = previous + 1",
                off == 0,
                f"{off} answer(s) off among {sum(acked):,}",
                idem or errors == 0,
            )
        )
        root = key_root(token, "put", mode)
        keys = count_keys(leader, root)
        acked_puts = sum(w.acked.get(root, 0) for w in workers)
        checks.append(
            Check(
                f"{mode} put keys = acknowledged puts",
                keys == acked_puts,
                f"{keys:,} keys under {root} vs {acked_puts:,} acknowledged",
                idem or errors == 0,
            )
        )
    return checks


def measure(procs: Processes, scratch: Path, settings: Settings, meta: dict[str, Any]):
    cluster = rkv_cluster.start(procs, scratch)
    leader = cluster.leader_url
    meta["rkv leader"] = leader
    workers = [Worker(i, new_producer(leader)) for i in range(settings.workers)]
    progress(f"{len(workers)} producers initialised on the leader {leader}")
    token = f"{int(time.time())}"
    pgid = cluster_pgid(scratch)
    if pgid is None:
        progress("the cluster's process group was not found: no CPU accounting of the nodes")
    before = raft_terms(cluster.urls)
    segments = asyncio.run(run_load(leader, workers, settings, token, pgid))
    after = raft_terms(cluster.urls)
    elections = max((after.get(u, -1) - t for u, t in before.items()), default=-1)
    meta["raft terms before/after"] = f"{before} -> {after}"
    meta["elections during load"] = elections
    progress(f"elections during the load: {elections}; checking the writes on {leader}")
    return segments, verify(leader, workers, segments, token)


# -- report -------------------------------------------------------------------------


def pool(segments: list[Segment], op: str, mode: str) -> Row:
    mine = [s for s in segments if s.op == op and s.mode == mode]
    latencies = sorted(x for s in mine for x in s.latencies)
    return Row(
        op, mode, sum(s.acked for s in mine), sum(s.seconds for s in mine),
        percentile(latencies, 50), percentile(latencies, 99),
        sum(sum(s.errors.values()) for s in mine), sum(s.retries for s in mine),
        sum(s.duplicates for s in mine), [s.ops for s in mine], [s.other_pct for s in mine],
        sum(s.node_cpu_s for s in mine), sum(s.client_cpu_s for s in mine),
        sum(s.other_cpu_s for s in mine),
    )  # fmt: skip


def compare(segments: list[Segment]) -> list[Comparison]:
    return [Comparison(op, pool(segments, op, PLAIN), pool(segments, op, IDEMPOTENT)) for op in OPS]


def format_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = [header, *rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]

    def fmt(line: tuple[str, ...]) -> str:
        return "  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True))

    return "\n".join([fmt(header), "  ".join("-" * w for w in widths), *map(fmt, rows)])


def html_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def render_html(comparisons: list[Comparison], checks: list[Check], meta: dict[str, Any]) -> str:
    rows = [r for c in comparisons for r in (c.plain, c.idempotent)]
    throughput = bar_chart([(f"{r.op} {r.mode}", r.ops, "") for r in rows], "ops/s", [])
    ratio = bar_chart(
        [(f"{c.op}", c.ratio * 100, c.status) for c in comparisons],
        "%",
        [(100 - TARGET_COST_PCT, f"target >= {100 - TARGET_COST_PCT:.0f}% (cost < 15%)")],
    )
    latency = bar_chart(
        [(f"{r.op} {r.mode} p50", r.p50_ms, "") for r in rows]
        + [(f"{r.op} {r.mode} p99", r.p99_ms, "") for r in rows],
        "ms",
        [],
    )
    cpu = bar_chart(
        [(f"{r.op} {r.mode} nodes", r.node_ms_per_op, "") for r in rows]
        + [(f"{r.op} {r.mode} client", r.client_ms_per_op, "") for r in rows],
        "ms",
        [],
    )
    about = "".join(f"<li>{html.escape(f'{k}: {v}')}</li>" for k, v in meta.items())
    verified = "".join(f"<li>{html.escape(c.line())}</li>" for c in checks)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>rkv idempotent producer benchmark</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
th,td{{border:1px solid #ccc;padding:3px 10px;text-align:right}}</style></head>
<body><h1>rkv idempotent producer benchmark</h1>
<p>One 3-node <code>rkv up</code> cluster on loopback, every write to the leader, one aiohttp
closed-loop generator with the same number of workers in both modes. Plain: the write alone.
Idempotent: each worker owns a producer and sends its writes one at a time with
Rkv-Producer-Id, Rkv-Producer-Epoch and its own Rkv-Sequence. put: unique keys, 100-byte
values; incr: POST ?op=incr&amp;by=1 of a counter per worker. The modes alternate in rounds
(plain first in even rounds, idempotent first in odd ones); rows pool every round. Cost =
1 - idempotent/plain throughput; target below {TARGET_COST_PCT:.0f}%. CPU ms/op: CPU time
(/proc/&lt;pid&gt;/stat) of the 3 node processes and of the generator per acknowledged write;
other CPU: what every other process (and steal) took meanwhile, in % of one core; a round
where it exceeds {DISTURBED_PCT:.0f}% in either mode is marked ! and left out of the
"quiet rounds" cost.</p>
<ul>{about}</ul>
{html_table(COMPARE_HEADER, [c.cells() for c in comparisons])}
<h2>Idempotent throughput as % of plain</h2>
{ratio}
<h2>Per operation and mode</h2>
{html_table(HEADER, [r.cells() for r in rows])}
<h2>Throughput (acknowledged writes/s)</h2>
{throughput}
<h2>Latency (ms)</h2>
{latency}
<h2>CPU per acknowledged write (ms)</h2>
{cpu}
<h2>Checks on the leader after the load</h2><ul>{verified}</ul>
</body></html>
"""


def write_results(
    out: Path,
    segments: list[Segment],
    comparisons: list[Comparison],
    checks: list[Check],
    meta: dict[str, Any],
) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    rows = [r for c in comparisons for r in (c.plain, c.idempotent)]
    report = {
        "meta": meta,
        "targets": {"cost_pct_below": TARGET_COST_PCT},
        "comparisons": [
            {"op": c.op, "plain_ops_per_s": c.plain.ops, "idempotent_ops_per_s": c.idempotent.ops}
            | {"ratio": c.ratio, "cost_pct": c.cost_pct, "round_cost_pct": c.round_costs}
            | {"quiet_rounds": c.quiet_rounds, "quiet_cost_pct": c.quiet_cost_pct}
            | {"cpu_per_op_ratio": c.cpu_ratio, "status": c.status}
            for c in comparisons
        ],
        "rows": [
            {"op": r.op, "mode": r.mode, "acked": r.acked, "seconds": r.seconds}
            | {"ops_per_s": r.ops, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms, "errors": r.errors}
            | {"retries": r.retries, "duplicates": r.duplicates, "round_ops_per_s": r.round_ops}
            | {"round_other_cpu_pct": r.round_other_pct}
            | {"node_cpu_ms_per_op": r.node_ms_per_op, "client_cpu_ms_per_op": r.client_ms_per_op}
            | {"other_cpu_pct": r.other_pct}
            for r in rows
        ],
        "segments": [s.summary() for s in segments],
        "checks": [{"name": c.name, "ok": c.ok, "required": c.required, "detail": c.detail}
                   for c in checks],
    }  # fmt: skip
    paths = (out / "producer.json", out / "producer.html")
    paths[0].write_text(json.dumps(report, indent=2) + "\n")
    paths[1].write_text(render_html(comparisons, checks, meta))
    return paths


# -- main ---------------------------------------------------------------------------


def load_average() -> str:
    one, five, _ = os.getloadavg()
    busy = (
        " (BUSY: other processes compete for the cores)"
        if one > 0.5 * (os.cpu_count() or 1)
        else ""
    )
    return f"{one:.2f} (1 min), {five:.2f} (5 min){busy}"


def parse_args(argv: list[str] | None) -> Settings:
    parser = argparse.ArgumentParser(description="Benchmark rkv's idempotent producers.")
    parser.add_argument(
        "--duration", type=float, help="seconds per operation and mode, all rounds (default 10)"
    )
    parser.add_argument("--rounds", type=int, help="alternating rounds (default 4; --quick 2)")
    parser.add_argument("--workers", type=int, default=32, help="closed-loop workers (default 32)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 s, 2 rounds")
    out = Path(__file__).resolve().parent / "results"
    parser.add_argument("--out", type=Path, default=out, help="default bench/results")
    args = parser.parse_args(argv)
    duration = args.duration if args.duration is not None else 2.0 if args.quick else 10.0
    rounds = args.rounds if args.rounds is not None else 2 if args.quick else 4
    if duration <= 0 or rounds < 1 or args.workers < 1:
        parser.error("--duration must be positive, --rounds and --workers at least 1")
    warmup = 0.5 if args.quick else 2.0
    return Settings(duration, rounds, args.workers, warmup, args.out)


def main(argv: list[str] | None = None) -> None:
    settings = parse_args(argv)
    interrupt_on_signals()
    meta: dict[str, Any] = {
        "date": time.strftime("%F %T"),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "workers": settings.workers,
        "seconds per operation and mode": settings.duration,
        "rounds": settings.rounds,
        "warm-up s per mode": settings.warmup,
        "scratch": tempfile.gettempdir(),
        "load average at start": load_average(),
        "note": "the load generator runs on the same cores as the 3 nodes",
    }
    progress(f"load average: {meta['load average at start']}")
    try:
        with (
            tempfile.TemporaryDirectory(prefix="rkv-bench-producer-") as tmp,
            Processes() as procs,
        ):
            segments, checks = measure(procs, Path(tmp), settings, meta)
    except KeyboardInterrupt:
        progress("interrupted: every server started was stopped")
        sys.exit(130)
    except BenchError as error:
        raise SystemExit(f"producer benchmark failed: {error}") from None
    meta["load average at end (this run included)"] = load_average().split(" (BUSY")[0]
    comparisons = compare(segments)
    paths = write_results(settings.out, segments, comparisons, checks, meta)
    for key in ("load average at start", "elections during load"):
        print(f"{key}: {meta[key]}")
    print(f"{settings.workers} workers, {settings.duration:g} s per operation and mode in "
          f"{settings.rounds} alternating rounds of {settings.segment:g} s")  # fmt: skip
    rows = [r for c in comparisons for r in (c.plain, c.idempotent)]
    print(format_table(HEADER, [r.cells() for r in rows]))
    print()
    print(format_table(COMPARE_HEADER, [c.cells() for c in comparisons]))
    print(
        f"rounds marked ! were disturbed: another process took > {DISTURBED_PCT:.0f}% of a core "
        "during the plain or the idempotent segment; 'quiet rounds' leaves them out (count)"
    )
    for c in comparisons:
        quiet = c.quiet_cost_pct
        print(
            f"{c.op}: idempotent/plain throughput {c.ratio:.3f}, cost {c.cost_pct:.1f}% "
            f"(target < {TARGET_COST_PCT:.0f}%): {c.status}"
            + ("" if quiet is None else f"; over {len(c.quiet_rounds)} quiet rounds {quiet:.1f}%")
        )
    for check in checks:
        print(check.line())
    print(f"results written to {' and '.join(map(str, paths))}")
    if any(c.required and not c.ok for c in checks):
        sys.exit(1)


if __name__ == "__main__":
    main()
