"""Limits benchmark (not a test): a well-behaved client's throughput while hostile
clients attack the same node (issue 15, "bounded under hostile clients").

Phases, one at a time: first undisturbed, then one per attack of bench/limits_attacks.py
(ATTACKS: txn results, scans, a connection flood, slowloris, a watch flood, snapshot
readers that never read, 16 MiB bodies refused, valid 16 MiB txns, malformed requests, a
gzip bomb, raft port garbage, membership spam). Each phase gets a fresh cluster, so that
no attack's aftermath (a leader change, a held view, a long raft journal) weighs on the
next: three real ``python -m node.cli node`` processes on loopback, on their default
limits, given a 64 KiB value and 64 values of 1 MiB through the leader (what the txn,
scan and snapshot attacks read), warmed up by the client for a few seconds, followers
caught up.

In each phase the well-behaved client (bench/limits_client.py: 16 keep-alive
connections from 127.0.0.1, PUT then GET of its own keys) runs against the leader a
moment, the attack starts against the same node in a process of its own (the attackers
bind to 127.0.0.2 and up) and, once it holds what it came for, the client is measured
for ``--seconds``; then the attack stops and cleans up. Reported per phase: the client's
ops/s and share of the undisturbed ops/s, its p99, the 429/503 refusals it got
(documented, by code) apart from any other error, the attacked node's peak RSS over the
phase (VmHWM, reset through /proc/PID/clear_refs before the attack), and whether the
cluster was healthy after: every node alive and ready, a leader, the same three members,
a probe write read back on every node, and no Traceback in any node's log. Target, per
attack (printed MET/MISSED, never asserted): >= 70 % of the undisturbed ops/s, no error
beyond the documented ones, healthy after.

Run from the repository root: ``python -m bench.limits [--seconds 15] [--attack NAME]
[--keep]``. Scratch data goes to the system temporary directory (set TMPDIR to pick the
disk) and is deleted afterwards (``--keep`` keeps it, with the node logs); every node and
attack process is stopped by PID, also on errors and Ctrl-C. The attacks and the client
share the machine's cores with the nodes: run it on a quiet machine, and compare phases
of one run rather than runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench import nodes as cluster
from bench.limits_attacks import ATTACKS, AttackProcess
from bench.limits_client import CONNECTIONS, Served, WellBehavedClient
from bench.limits_report import (
    UNDISTURBED,
    Row,
    format_details,
    format_table,
    set_shares,
    target_line,
    write_results,
)
from bench.limits_wire import Target
from bench.nodes import Node, applied, exited, leader_of, ready, wait_leader
from bench.procs import Processes, interrupt_on_signals
from bench.support import BenchError, http_json, http_request, progress, wait_until

MiB = 1024 * 1024
DEFAULT_SECONDS = 15.0
CLIENT_PREFIX = "limits/client/"
BIG_KEY = "limits/big"
SCAN_PREFIX = "limits/scan/"
SCAN_VALUES = 64
WARMUP_S = 1.0
WARM_UP_RUN_S = 5.0  # before the first phase: a fresh cluster is slower at first
READY_TIMEOUT_S = 30.0
HEALTH_TIMEOUT_S = 30.0
SETTLE_TIMEOUT_S = 120.0
START_TIMEOUT_S = 60.0


def raft_address(node: Node) -> str:
    return node.argv[node.argv.index("--raft-listen") + 1]


def log_of(node: Node) -> Path:
    return node.data_dir.parent / f"{node.node_id}.log"


def prepare(leader: Node) -> None:
    """What the attacks read: a 64 KiB value and SCAN_VALUES values of 1 MiB."""
    writes = [(BIG_KEY, b"B" * 64 * 1024)]
    writes += [(f"{SCAN_PREFIX}{i:02d}", bytes([65 + i % 26]) * MiB) for i in range(SCAN_VALUES)]
    for key, value in writes:
        status = put(f"{leader.url}/v1/kv/{key}", value)
        if status != 200:
            raise BenchError(f"PUT {key} on {leader.node_id} answered {status}")


def put(url: str, value: bytes) -> int:
    """The status of PUT ``value`` (raw bytes) at ``url``; 0 if unreachable."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, value, method="PUT"), timeout=60):
            return 200
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def reset_peak(pid: int) -> None:
    """Reset the process's VmHWM to its current RSS (Linux >= 4.0, same user)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def peak_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


async def measure(url: str, pid: int, seconds: float, attack: AttackProcess | None) -> Served:
    """The client's warm-up, then the attack's start, then ``seconds`` counted."""
    async with WellBehavedClient(url, CLIENT_PREFIX) as client:
        await asyncio.sleep(WARMUP_S)
        reset_peak(pid)
        if attack is not None and not await asyncio.to_thread(attack.start, READY_TIMEOUT_S):
            progress(f"the attack was not ready after {READY_TIMEOUT_S:.0f} s; measuring anyway")
        client.start_counting()
        await asyncio.sleep(seconds)
        client.stop_counting()
    return client.served


def health(nodes: list[Node], attacked: Node, log_sizes: dict[str, int], probe: str) -> str:
    """ "ok", or what is wrong with the cluster after an attack."""
    if not attacked.alive:
        return f"the attacked node {attacked.node_id} exited"
    problems = [f"{n.node_id} exited" for n in nodes if not n.alive]
    live = [n for n in nodes if n.alive]
    try:
        wait_until("every live node ready", lambda: all(map(ready, live)), HEALTH_TIMEOUT_S)
    except BenchError:
        late = [n.node_id for n in live if not ready(n)]
        return f"not ready within {HEALTH_TIMEOUT_S:.0f} s: {late}"
    leader = leader_of(nodes)
    if leader is None:
        return "no leader"
    listed = http_json(f"{leader.url}/v1/cluster/members") or {}
    ids = sorted(str(m.get("id")) for m in listed.get("members", []))
    if ids != sorted(n.node_id for n in nodes):
        problems.append(f"members are {ids}")
    key = f"limits/probe/{probe}"
    value = f"{probe}-{time.time()}".encode()
    if put(f"{leader.url}/v1/kv/{key}", value) != 200:
        problems.append("the probe write failed")
    else:
        for node in live:
            url = f"{node.url}/v1/kv/{key}?consistency=stale"

            def reads_back(url: str = url) -> bool:
                return http_request(url) == (200, value)

            try:
                wait_until(f"the probe on {node.node_id}", reads_back, HEALTH_TIMEOUT_S)
            except BenchError:
                problems.append(f"the probe did not read back on {node.node_id}")
    for node in nodes:
        with log_of(node).open("rb") as log:
            log.seek(log_sizes[node.node_id])
            error = traceback_in(log.read().decode(errors="replace"))
        if error is not None:
            problems.append(f"a Traceback in {log_of(node).name}: {error}")
    return "; ".join(problems) or "ok"


def traceback_in(text: str) -> str | None:
    """The exception line of the first traceback in ``text`` and the log line that
    introduced it (the last one starting with a timestamp), or None."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Traceback")), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if not lines[i][:1].isspace()), start)
    logged = next((lines[i] for i in range(start, -1, -1) if lines[i][:1].isdigit()), "")
    return f"{lines[end]} (logged: {logged[:200]})"


def start_cluster(procs: Processes, scratch: Path) -> tuple[list[Node], Node]:
    """A fresh 3-node cluster under ``scratch``, ready, with what the attacks read, warmed
    up, every follower caught up: (its nodes, its leader)."""
    scratch.mkdir(parents=True)
    nodes = cluster.make_nodes(scratch)
    for node in nodes:
        cluster.start_node(procs, node)
    everyone = lambda: all(map(ready, nodes))  # noqa: E731
    wait_until("/readyz on 3 nodes", everyone, START_TIMEOUT_S, lambda: exited(nodes))
    leader = wait_leader(nodes, START_TIMEOUT_S)
    assert leader.server is not None
    prepare(leader)
    asyncio.run(measure(leader.url, leader.server.pid, WARM_UP_RUN_S, None))
    offset = applied(leader)
    caught_up = lambda: all(applied(n) >= offset for n in nodes)  # noqa: E731
    wait_until(f"every node at offset {offset:,}", caught_up, SETTLE_TIMEOUT_S)
    return nodes, leader


def phase(procs: Processes, scratch: Path, name: str, seconds: float) -> Row:
    what = "no attack" if name == UNDISTURBED else ATTACKS[name].what
    progress(f"phase {name}: {what}; a fresh cluster")
    nodes, leader = start_cluster(procs, scratch)
    assert leader.server is not None
    try:
        progress(f"phase {name}: {seconds:g} s against the leader {leader.node_id}")
        log_sizes = {n.node_id: log_of(n).stat().st_size for n in nodes}
        target = Target(leader.url, raft_address(leader), BIG_KEY, SCAN_PREFIX, CLIENT_PREFIX)
        attack = None if name == UNDISTURBED else AttackProcess(name, target)
        try:
            served = asyncio.run(measure(leader.url, leader.server.pid, seconds, attack))
        finally:
            tally = attack.finish() if attack is not None else {}
        peak = peak_rss_mib(leader.server.pid) if leader.alive else None
        found = health(nodes, leader, log_sizes, name)
    finally:
        for node in nodes:
            if node.server is not None:
                procs.stop(node.server)
    refused, errors = sum(served.refused.values()), sum(served.errors.values())
    progress(f"phase {name}: {served.ops_per_s:,.0f} ops/s, {refused} refused, {errors} errors")
    return Row(
        name, what, served.seconds, served.ops, served.ops_per_s, served.percentile_ms(50),
        served.percentile_ms(99), dict(served.refused), dict(served.errors), peak, found, tally,
    )  # fmt: skip


def run(
    procs: Processes, scratch: Path, attacks: list[str], seconds: float, keep: bool
) -> list[Row]:
    rows = []
    for name in [UNDISTURBED, *attacks]:
        try:
            rows.append(phase(procs, scratch / name, name, seconds))
        except BenchError as error:
            progress(f"phase {name} could not run: {error}")
            rows.append(Row(name, "", 0, 0, 0, 0, 0, {}, {}, None, f"not run: {error}"))
        if not keep:  # the data directories; the logs stay until the end
            for data in (scratch / name).iterdir():
                if data.is_dir():
                    shutil.rmtree(data, ignore_errors=True)
    return rows


@contextmanager
def scratch_dir(keep: bool) -> Iterator[Path]:
    if not keep:
        with tempfile.TemporaryDirectory(prefix="rkv-bench-limits-") as tmp:
            yield Path(tmp)
        return
    kept = Path(tempfile.mkdtemp(prefix="rkv-bench-limits-"))
    try:
        yield kept
    finally:
        progress(f"kept the scratch directory {kept}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="A well-behaved client's throughput under attacks."
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=DEFAULT_SECONDS,
        help=f"measured seconds per phase (default {DEFAULT_SECONDS:g})",
    )
    parser.add_argument(
        "--attack",
        action="append",
        choices=list(ATTACKS),
        help="run only this attack (repeatable; default: all, in order)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the scratch directory (data and node logs)"
    )
    out = Path(__file__).resolve().parent / "results"
    parser.add_argument("--out", type=Path, default=out, help="default bench/results")
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error("--seconds must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    attacks: list[str] = args.attack or list(ATTACKS)
    interrupt_on_signals()
    meta = (
        f"{time.strftime('%F %T')}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"{args.seconds:g} s per phase, scratch in {tempfile.gettempdir()}"
    )
    method = (
        "Each phase on a fresh cluster: 3 node processes on loopback, default limits, a "
        f"64 KiB value and {SCAN_VALUES} x 1 MiB put, warmed up. A well-behaved client "
        f"({CONNECTIONS} keep-alive connections from 127.0.0.1, PUT then GET of its own "
        "100-byte values) is measured against the leader, undisturbed, then while each "
        "attack runs against the same node from 127.0.0.2 and up, in a process of its own. "
        "Refused: 429/503 answers (documented); other errors: anything else. Peak RSS: the "
        "attacked node's VmHWM over the phase. Healthy after: all nodes ready, a leader, 3 "
        "members, a probe write read back everywhere, no Traceback in the logs."
    )
    progress(meta)
    try:
        with scratch_dir(args.keep) as tmp, Processes() as procs:
            rows = run(procs, tmp, attacks, args.seconds, args.keep)
    except BenchError as error:
        raise SystemExit(f"limits benchmark failed: {error}") from None
    set_shares(rows)
    config = {"seconds": args.seconds, "connections": CONNECTIONS, "attacks": attacks}
    write_results(args.out, rows, meta, method, config)
    print(format_table(rows))
    print(target_line(rows))
    if args.seconds < DEFAULT_SECONDS:
        print(f"(a short run: {args.seconds:g} s per phase instead of {DEFAULT_SECONDS:g}; noisy)")
    print()
    print(format_details(rows))
    print(f"results written to {args.out / 'limits.json'} and {args.out / 'limits.html'}")


if __name__ == "__main__":
    main()
