"""Lease and lock benchmark (not a test): keepalive throughput, expiry lag, lock round trips.

    python -m bench.leases [--leases 10000] [--lag-leases 1000] [--seconds 6]
                           [--out bench/results]

A fresh 3-node cluster of real processes on loopback (bench/nodes.py); every request
goes to its leader over raw HTTP (aiohttp), as docs/LEASES.md describes the API:

1. ``--leases`` leases (TTL 60 s) are granted by 32 concurrent requests, then one
   client keeps them all alive for ``--seconds``, one request in flight: over the batch
   endpoint (POST /v1/leases/keepalive, 10,000 ids a request at most), then over the
   WebSocket stream (GET /v1/leases/keepalive, one message per batch). Reported:
   renewals per second, batches per second and their p50 latency, and the leader's CPU
   (its process's user+system time from /proc/<pid>/stat, % of one core) meanwhile.
2. Expiry lag: ``--lag-leases`` leases with a TTL of 2 s, each granted then given one
   key (PUT /v1/kv/KEY?lease=ID), never kept alive. A watch on the keys' prefix, opened
   before the first grant, notes when each key's delete arrives. A lease's deadline is
   its grant's acknowledgement + TTL (on this machine's monotonic clock); its lag is
   the arrival of its key's delete minus that deadline: p50, p99, max. (The watch
   polls the leader's applied offset every 50 ms, which the lag includes.)
   docs/LEASES.md's bound: one election timeout + 0.1 s + the expiry entry's commit.
3. Lock round trips: acquire (POST /v1/locks/NAME) then release (DELETE) in a loop,
   for ``--seconds``, by 1 and then by 16 contenders on one name, each with a lease
   of its own: round trips per second (all contenders) and the p50/p99 of one.

One table on stdout, progress on stderr, bench/results/leases.json and leases.html.
The load generator shares the machine's cores with the three nodes. Every node is
stopped by PID, also on errors and Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.leases_report import render_html
from bench.nodes import Node, exited, make_nodes, ready, start_node, wait_leader
from bench.procs import Processes, interrupt_on_signals
from bench.support import BenchError, progress, wait_until

LONG_TTL = 60
LAG_TTL = 2
BATCH = 10_000  # ids per keepalive request or message (docs/LEASES.md's most)
GRANTERS = 32
LOCK_NAME = "bench-lock"
LAG_PREFIX = "bench-lease-lag/"
LAG_WAIT_S = 30.0  # after the last deadline, for the stragglers
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
TIMEOUT = aiohttp.ClientTimeout(total=60)


@dataclass
class Row:
    """One line of the table."""

    measurement: str
    value: str
    detail: str


@dataclass
class Results:
    rows: list[Row] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)

    def add(self, measurement: str, value: str, detail: str, **numbers: Any) -> None:
        self.rows.append(Row(measurement, value, detail))
        progress(f"{measurement}: {value} ({detail})")
        self.numbers[measurement] = numbers


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class LeaderCpu:
    """The leader process's CPU, in % of one core, over a ``with`` block."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.percent = 0.0

    def __enter__(self) -> LeaderCpu:
        self._cpu, self._wall = cpu_seconds(self.pid), time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.monotonic() - self._wall
        self.percent = 100 * (cpu_seconds(self.pid) - self._cpu) / wall if wall else 0.0


async def ok_json(response: aiohttp.ClientResponse) -> Any:
    body = await response.read()
    if response.status != 200:
        raise BenchError(
            f"{response.method} {response.url} answered {response.status}: {body[:300]!r}"
        )
    return json.loads(body)


async def grant(session: aiohttp.ClientSession, url: str, ttl: int) -> int:
    async with session.post(f"{url}/v1/leases", json={"ttl": ttl}) as response:
        return int((await ok_json(response))["id"])


async def grant_many(session: aiohttp.ClientSession, url: str, count: int, ttl: int) -> list[int]:
    ids: list[int] = []
    claimed = 0

    async def granter() -> None:
        nonlocal claimed
        while claimed < count:
            claimed += 1  # before the await: no more than ``count`` are granted
            ids.append(await grant(session, url, ttl))

    await asyncio.gather(*(granter() for _ in range(GRANTERS)))
    return ids


async def for_seconds(
    seconds: float, step: Callable[[], Awaitable[int]]
) -> tuple[int, list[float]]:
    """Run ``step`` back to back for ``seconds``: the sum of what it returned, and the
    latency of each call."""
    done, latencies = 0, []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        done += await step()
        latencies.append(time.monotonic() - started)
    return done, latencies


def renewed(answer: Any) -> int:
    """How many leases of a keepalive answer were renewed; a refusal stops the run."""
    leases = answer["leases"]
    failed = [item for item in leases if "ttl" not in item]
    if failed:
        raise BenchError(f"{len(failed)} keepalives refused, the first: {failed[0]}")
    return len(leases)


def batches(ids: list[int]) -> list[list[int]]:
    return [ids[i : i + BATCH] for i in range(0, len(ids), BATCH)]


async def keepalive_batch(
    session: aiohttp.ClientSession, url: str, ids: list[int], seconds: float
) -> tuple[int, list[float]]:
    groups = batches(ids)
    turn = 0

    async def step() -> int:
        nonlocal turn
        group = groups[turn % len(groups)]
        turn += 1
        async with session.post(f"{url}/v1/leases/keepalive", json={"ids": group}) as response:
            return renewed(await ok_json(response))

    return await for_seconds(seconds, step)


async def keepalive_stream(
    session: aiohttp.ClientSession, url: str, ids: list[int], seconds: float
) -> tuple[int, list[float]]:
    groups = batches(ids)
    turn = 0
    async with session.ws_connect(f"{url}/v1/leases/keepalive", max_msg_size=0) as ws:

        async def step() -> int:
            nonlocal turn
            await ws.send_str(json.dumps({"ids": groups[turn % len(groups)]}))
            turn += 1
            return renewed(json.loads(await ws.receive_str()))

        return await for_seconds(seconds, step)


async def measure_keepalives(
    session: aiohttp.ClientSession, url: str, pid: int, count: int, seconds: float, results: Results
) -> None:
    started = time.monotonic()
    ids = await grant_many(session, url, count, LONG_TTL)
    took = time.monotonic() - started
    results.add(
        "leases granted", f"{count:,}", f"{count / took:,.0f} grants/s, {GRANTERS} concurrent",
        grants_per_s=count / took,
    )  # fmt: skip
    for label, run in (("batch POST", keepalive_batch), ("WebSocket", keepalive_stream)):
        try:
            with LeaderCpu(pid) as cpu:
                done, latencies = await run(session, url, ids, seconds)
        except (aiohttp.ClientError, BenchError, ValueError, TypeError, KeyError) as error:
            results.add(f"keepalive, {label}", "n/a", f"{type(error).__name__}: {error}"[:160])
            continue
        total = sum(latencies)
        results.add(
            f"keepalive, {label}",
            f"{done / total:,.0f} renewals/s",
            f"{len(latencies) / total:,.1f} batches/s of {min(BATCH, count):,}, "
            f"p50 {1000 * percentile(latencies, 50):,.0f} ms; leader CPU {cpu.percent:.0f}%",
            renewals_per_s=done / total, batches=len(latencies),
            p50_ms=1000 * percentile(latencies, 50), leader_cpu_pct=cpu.percent,
        )  # fmt: skip


async def watch_deletes(
    session: aiohttp.ClientSession, url: str, seen: dict[str, float], ready: asyncio.Event
) -> None:
    """Note the arrival time of each delete under LAG_PREFIX until cancelled."""
    params = {"prefix": LAG_PREFIX, "encoding": "utf-8"}
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with session.get(f"{url}/v1/watch", params=params, timeout=timeout) as response:
        if response.status != 200:
            raise BenchError(f"GET /v1/watch answered {response.status}")
        ready.set()
        async for line in response.content:
            if not line.strip():
                continue
            event = json.loads(line)
            if event.get("op") == "delete":
                seen.setdefault(event["key"], time.monotonic())


async def measure_expiry_lag(
    session: aiohttp.ClientSession, url: str, count: int, results: Results
) -> None:
    seen: dict[str, float] = {}
    ready = asyncio.Event()
    watch = asyncio.create_task(watch_deletes(session, url, seen, ready))
    await asyncio.wait_for(ready.wait(), 30)
    deadlines: dict[str, float] = {}
    numbers = iter(range(count))

    async def one() -> None:
        for i in numbers:
            lease = await grant(session, url, LAG_TTL)
            acked = time.monotonic()
            key = f"{LAG_PREFIX}{i:06d}"
            async with session.put(f"{url}/v1/kv/{key}?lease={lease}", data=b"x") as response:
                await ok_json(response)
            deadlines[key] = acked + LAG_TTL

    await asyncio.gather(*(one() for _ in range(GRANTERS)))
    last = max(deadlines.values()) + LAG_WAIT_S
    while len(seen) < count and time.monotonic() < last:
        await asyncio.sleep(0.2)
    watch.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watch
    lags = [seen[k] - deadline for k, deadline in deadlines.items() if k in seen]
    missing = count - len(lags)
    early = sum(1 for lag in lags if lag < 0)
    results.add(
        f"expiry lag, {count:,} leases of {LAG_TTL} s",
        f"p50 {percentile(lags, 50):.2f} s",
        f"p99 {percentile(lags, 99):.2f} s, max {max(lags, default=float('nan')):.2f} s; "
        f"{early} before the deadline, {missing} not gone after {LAG_WAIT_S:.0f} s",
        p50_s=percentile(lags, 50), p99_s=percentile(lags, 99),
        max_s=max(lags, default=None), early=early, missing=missing,
    )  # fmt: skip


async def measure_locks(
    session: aiohttp.ClientSession, url: str, contenders: int, seconds: float, results: Results
) -> None:
    leases = [await grant(session, url, LONG_TTL) for _ in range(contenders)]
    latencies: list[float] = []
    end = time.monotonic() + seconds

    async def contend(lease: int) -> None:
        while time.monotonic() < end:
            started = time.monotonic()
            body = {"lease": lease, "timeout": 30}
            async with session.post(f"{url}/v1/locks/{LOCK_NAME}", json=body) as response:
                await ok_json(response)
            async with session.delete(f"{url}/v1/locks/{LOCK_NAME}?lease={lease}") as response:
                await ok_json(response)
            latencies.append(time.monotonic() - started)

    started = time.monotonic()
    await asyncio.gather(*(contend(lease) for lease in leases))
    took = time.monotonic() - started
    for lease in leases:
        async with session.delete(f"{url}/v1/leases/{lease}") as response:
            await ok_json(response)
    results.add(
        f"lock acquire+release, {contenders} contender{'s' if contenders > 1 else ''}",
        f"{len(latencies) / took:,.0f} round trips/s",
        f"one round trip p50 {1000 * percentile(latencies, 50):,.0f} ms, "
        f"p99 {1000 * percentile(latencies, 99):,.0f} ms",
        round_trips_per_s=len(latencies) / took,
        p50_ms=1000 * percentile(latencies, 50), p99_ms=1000 * percentile(latencies, 99),
    )  # fmt: skip


async def run_all(leader: Node, settings: argparse.Namespace, results: Results) -> None:
    assert leader.server is not None
    connector = aiohttp.TCPConnector(limit=GRANTERS + 16)
    async with aiohttp.ClientSession(connector=connector, timeout=TIMEOUT) as session:
        progress(f"{settings.leases:,} leases, kept alive for {settings.seconds:g} s each way")
        await measure_keepalives(
            session, leader.url, leader.server.pid, settings.leases, settings.seconds, results
        )
        progress(f"expiry lag of {settings.lag_leases:,} leases of {LAG_TTL} s")
        await measure_expiry_lag(session, leader.url, settings.lag_leases, results)
        for contenders in (1, 16):
            progress(f"lock round trips, {contenders} contender(s), {settings.seconds:g} s")
            await measure_locks(session, leader.url, contenders, settings.seconds, results)


def format_table(rows: list[Row]) -> str:
    header = Row("measurement", "value", "detail")
    widths = [max(len(getattr(r, f)) for r in [header, *rows]) for f in ("measurement", "value")]
    lines = [
        f"{r.measurement:<{widths[0]}}  {r.value:>{widths[1]}}  {r.detail}" for r in [header, *rows]
    ]
    lines.insert(1, "-" * (widths[0] + widths[1] + 4 + max(len(r.detail) for r in [header, *rows])))
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.leases", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--leases", type=int, default=10_000, help="kept alive (default 10,000)")
    parser.add_argument("--lag-leases", type=int, default=1000, help="for the expiry lag (1000)")
    parser.add_argument("--seconds", type=float, default=6.0, help="per timed phase (default 6)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)
    if args.leases < 1 or args.lag_leases < 1 or args.seconds <= 0:
        parser.error("--leases, --lag-leases and --seconds must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    settings = parse_args(argv)
    interrupt_on_signals()
    results = Results()
    meta: dict[str, Any] = {
        "date": time.strftime("%F %T"),
        "cores": os.cpu_count(),
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "settings": {k: str(v) for k, v in vars(settings).items()},
        "note": "the load generator runs on the same cores as the 3 nodes",
    }
    try:
        with tempfile.TemporaryDirectory(prefix="rkv-bench-leases-") as tmp, Processes() as procs:
            nodes = make_nodes(Path(tmp))
            for node in nodes:
                start_node(procs, node)
            wait_until(
                "every node ready", lambda: all(map(ready, nodes)), 60, lambda: exited(nodes)
            )
            leader = wait_leader(nodes)
            meta["leader"] = leader.node_id
            asyncio.run(run_all(leader, settings, results))
    except KeyboardInterrupt:
        progress("interrupted: every node started was stopped")
        sys.exit(130)
    except BenchError as error:
        raise SystemExit(f"lease benchmark failed: {error}") from None
    settings.out.mkdir(parents=True, exist_ok=True)
    report = {"meta": meta, "rows": [asdict(r) for r in results.rows], "numbers": results.numbers}
    (settings.out / "leases.json").write_text(json.dumps(report, indent=2) + "\n")
    (settings.out / "leases.html").write_text(render_html(results.rows, meta))
    print(format_table(results.rows))
    print(f"results written to {settings.out / 'leases.json'} and {settings.out / 'leases.html'}")


if __name__ == "__main__":
    main()
