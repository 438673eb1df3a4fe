"""The HTTP benchmark's comparisons: rkv's rows against another system's, ratio by ratio,
with the targets each ratio is held to (issue 19's against etcd's gRPC client, issue 16's
for the cost of TLS + auth). Pure functions of the results.

A throughput ratio is mine/other ops/s (> 1: mine is faster); a latency ratio is
mine/other milliseconds (< 1: mine is quicker). A target is met only when the ratio is
within its bound and my row had no errors and no election during its load.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench.loadgen import Result

WORKLOADS = {
    "put": "PUT to the leader",
    "get_linearizable": "linearizable GET, leader",
    "get_stale": "stale GET, one follower",
}
METRICS = {"ops": "ops/s", "p50": "p50 ms", "p99": "p99 ms"}
Key = tuple[str, str, int]  # (system, workload, connections)


@dataclass(frozen=True)
class Bound:
    at_least: bool  # ratio >= limit (throughput), else ratio <= limit (latency)
    limit: float

    def holds(self, ratio: float) -> bool:
        return ratio >= self.limit if self.at_least else ratio <= self.limit

    def text(self) -> str:
        limit = f"{self.limit:g}"
        return f"{'>=' if self.at_least else '<='} {limit if '.' in limit else limit + '.0'}x"


Targets = Callable[[str, int, str], Bound | None]  # (workload, connections, metric) -> bound


def issue19_targets(workload: str, connections: int, metric: str) -> Bound | None:
    """rkv against etcd's gRPC client, in one run on this machine (issue 19)."""
    table = {
        ("put", 64, "ops"): Bound(True, 1.0),
        ("get_linearizable", 64, "ops"): Bound(True, 1.0),
        ("get_stale", 64, "ops"): Bound(True, 1.2),  # against etcd's serializable GET
        ("put", 1, "p50"): Bound(False, 1.5),
    }
    return table.get((workload, connections, metric))


SECURE_KEEPS = 0.8
"""Issue 16: TLS + token auth may cost at most 20 % of rkv's throughput (and its one
connection p50 may grow by at most 1 / 0.8)."""


def secure_targets(workload: str, connections: int, metric: str) -> Bound | None:
    """Throughput under load; a lone connection is judged by its p50 latency."""
    if metric == "ops" and connections > 1:
        return Bound(True, SECURE_KEEPS)
    if (workload, connections, metric) == ("put", 1, "p50"):
        return Bound(False, 1 / SECURE_KEEPS)
    return None


def no_targets(workload: str, connections: int, metric: str) -> Bound | None:
    return None


@dataclass(frozen=True)
class Comparison:
    workload: str
    connections: int
    metric: str  # ops | p50 | p99
    mine: float | None
    other: float | None
    ratio: float | None  # mine / other; None when a side is missing or zero
    target: str  # "" when the ratio has no target
    status: str  # met | missed | "" (no target) | n/a (a side is missing)
    mine_errors: int | None
    other_errors: int | None
    mine_elections: int | None
    other_elections: int | None


def by_key(results: list[Result]) -> dict[Key, Result]:
    return {(r.load.system, r.load.workload, r.load.connections): r for r in results}


def value(result: Result | None, metric: str) -> float | None:
    if result is None:
        return None
    return {"ops": result.ops, "p50": result.p50_ms, "p99": result.p99_ms}[metric]


def points(results: list[Result], mine: str, other: str) -> list[tuple[str, int, str]]:
    """(workload, connections, metric) rows both systems ran: ops/s for every load, and
    the p50 and p99 latency of the one-connection PUT."""
    found = by_key(results)
    out = []
    for workload in WORKLOADS:
        conns = sorted({c for (s, w, c) in found if s == mine and w == workload})
        for c in conns:
            if (other, workload, c) not in found:
                continue
            out.append((workload, c, "ops"))
            if (workload, c) == ("put", 1):
                out += [(workload, c, "p50"), (workload, c, "p99")]
    return out


def compare_one(
    mine: Result | None, other: Result | None, metric: str, bound: Bound | None
) -> tuple[float | None, str]:
    """(ratio, status) of one row."""
    a, b = value(mine, metric), value(other, metric)
    ratio = a / b if a is not None and b else None
    if bound is None:
        return ratio, ""
    if ratio is None or mine is None:
        return ratio, "n/a"
    clean = not mine.error_count and not mine.elections
    return ratio, "met" if bound.holds(ratio) and clean else "missed"


def compare(
    results: list[Result], mine: str, other: str, targets: Targets = no_targets
) -> list[Comparison]:
    found = by_key(results)
    out = []
    for workload, conns, metric in points(results, mine, other):
        a, b = found.get((mine, workload, conns)), found.get((other, workload, conns))
        bound = targets(workload, conns, metric)
        ratio, status = compare_one(a, b, metric, bound)
        out.append(
            Comparison(
                workload=workload,
                connections=conns,
                metric=metric,
                mine=value(a, metric),
                other=value(b, metric),
                ratio=ratio,
                target=bound.text() if bound else "",
                status=status,
                mine_errors=a.error_count if a else None,
                other_errors=b.error_count if b else None,
                mine_elections=a.elections if a else None,
                other_elections=b.elections if b else None,
            )
        )
    return out


def missing_targets(results: list[Result], mine: str, other: str, targets: Targets) -> list[str]:
    """The targets no row of the run could be compared on (a run was skipped or failed)."""
    have = {(c.workload, c.connections, c.metric) for c in compare(results, mine, other)}
    wanted = [
        (w, c, m)
        for w in WORKLOADS
        for c in (1, 64, 256)
        for m in METRICS
        if targets(w, c, m) is not None
    ]
    absent = [point for point in wanted if point not in have]
    return [f"{WORKLOADS[w]} at {c} conn(s), {METRICS[m]}" for w, c, m in absent]
