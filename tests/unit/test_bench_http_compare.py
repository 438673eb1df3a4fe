"""The HTTP benchmark's pure parts: the etcd generator's JSON line, the leader-change
counter on /metrics, and the rkv/etcd ratios with issue 19's targets."""

from __future__ import annotations

import json

import pytest

from bench.elections import counter_value, elections_between
from bench.etcd_native import parse_line
from bench.http_compare import compare, issue19_targets, missing_targets, secure_targets
from bench.loadgen import Load, Result
from bench.support import BenchError

LINE = {
    "op": "put",
    "endpoints": "127.0.0.1:2379",
    "clients": 64,
    "conns": 64,
    "keys": 10000,
    "preloaded": 0,
    "ops": 12000,
    "errors": 3,
    "missing": 1,
    "seconds": 2.0,
    "ops_per_s": 6000.0,
    "p50_ms": 0.8,
    "p99_ms": 4.5,
    "max_ms": 9.0,
    "first_error": "context deadline exceeded",
}


def result(
    system: str,
    workload: str,
    conns: int,
    ops: float = 1000.0,
    p50: float = 1.0,
    p99: float = 2.0,
    errors: dict[str, int] | None = None,
    elections: int | None = 0,
) -> Result:
    load = Load(system, workload, "put" if workload == "put" else "get", "rest", ("u",), "/",
                "", "k-", 10, conns, 1, 1.0)  # fmt: skip
    return Result(load, "wrk", int(ops * 2), 2.0, p50, p99, errors or {}, "", elections)


def issue19_run(errors: dict[str, int] | None = None, elections: int | None = 0) -> list[Result]:
    """rkv and etcd gRPC at 1 and 64 connections; rkv's PUT at 64 with these errors and
    elections."""
    return [
        result("rkv", "put", 1, ops=400, p50=1.4, p99=9.0),
        result("rkv", "put", 64, ops=6000, errors=errors, elections=elections),
        result("rkv", "get_linearizable", 64, ops=9000),
        result("rkv", "get_stale", 64, ops=11000),
        result("etcd_grpc", "put", 1, ops=1000, p50=1.0, p99=3.0),
        result("etcd_grpc", "put", 64, ops=5000),
        result("etcd_grpc", "get_linearizable", 64, ops=10000),
        result("etcd_grpc", "get_stale", 64, ops=10000),
    ]


def rows_by_point(results: list[Result]) -> dict[tuple[str, int, str], tuple[float, str]]:
    rows = compare(results, "rkv", "etcd_grpc", issue19_targets)
    return {
        (c.workload, c.connections, c.metric): (round(c.ratio or 0.0, 6), c.status) for c in rows
    }


def test_parse_line_reads_the_generators_json_after_other_output() -> None:
    stats = parse_line("warming up\n" + json.dumps(LINE) + "\n")
    assert (stats.ops, stats.errors, stats.missing) == (12000, 3, 1)
    assert (stats.ops_per_s, stats.p50_ms, stats.p99_ms) == (6000.0, 0.8, 4.5)
    assert stats.first_error == "context deadline exceeded"


def test_parse_line_refuses_output_without_or_with_a_broken_line() -> None:
    with pytest.raises(BenchError, match="no JSON line"):
        parse_line("etcd-load: connection refused\n")
    with pytest.raises(BenchError, match="not what bench expects"):
        parse_line(json.dumps({k: v for k, v in LINE.items() if k != "p99_ms"}))


def test_counter_value_finds_the_leader_change_counter_in_an_exposition() -> None:
    text = (
        "# HELP etcd_server_leader_changes_seen_total The number of leader changes seen.\n"
        "# TYPE etcd_server_leader_changes_seen_total counter\n"
        "etcd_server_leader_changes_seen_total 3\n"
        "# TYPE etcd_server_has_leader gauge\n"
        "etcd_server_has_leader 1\n"
    )
    assert counter_value(text, "etcd_server_leader_changes_seen_total") == 3.0
    assert counter_value(text, "rkv_server_leader_changes_seen_total") is None
    assert counter_value("not { an exposition", "etcd_server_has_leader") is None


def test_elections_are_the_largest_increase_on_a_member_read_twice() -> None:
    before = {"a": 1.0, "b": 1.0, "c": 2.0}
    assert elections_between(before, {"a": 2.0, "b": 2.0, "c": 2.0}) == 1
    assert elections_between(before, dict(before)) == 0
    assert elections_between(before, {"d": 5.0}) is None


def test_issue19_ratios_and_targets() -> None:
    rows = rows_by_point(issue19_run())
    assert rows[("put", 64, "ops")] == (1.2, "met")
    assert rows[("get_linearizable", 64, "ops")] == (0.9, "missed")
    assert rows[("get_stale", 64, "ops")] == (1.1, "missed")  # needs 1.2x
    assert rows[("put", 1, "p50")] == (1.4, "met")  # rkv p50 / etcd p50
    assert rows[("put", 1, "p99")] == (3.0, "")  # reported, no target
    assert rows[("put", 1, "ops")] == (0.4, "")


def test_a_row_with_errors_or_an_election_misses_its_target_whatever_its_ratio() -> None:
    assert rows_by_point(issue19_run(errors={"timeout": 1}))[("put", 64, "ops")][1] == "missed"
    assert rows_by_point(issue19_run(elections=1))[("put", 64, "ops")][1] == "missed"
    assert rows_by_point(issue19_run(elections=None))[("put", 64, "ops")][1] == "met"


def test_rows_only_one_system_ran_are_left_out_and_named_as_not_measured() -> None:
    left_out = ("etcd_grpc", "get_stale")
    results = [r for r in issue19_run() if (r.load.system, r.load.workload) != left_out]
    assert ("get_stale", 64, "ops") not in rows_by_point(results)
    missing = missing_targets(results, "rkv", "etcd_grpc", issue19_targets)
    assert missing == ["stale GET, one follower at 64 conn(s), ops/s"]


def test_the_tls_cost_holds_throughput_under_load_and_a_lone_clients_p50() -> None:
    assert secure_targets("put", 64, "ops") is not None
    assert secure_targets("put", 1, "ops") is None
    bound = secure_targets("put", 1, "p50")
    assert bound is not None and bound.holds(1.25) and not bound.holds(1.3)
