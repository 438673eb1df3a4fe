"""The Redis replicator's metrics: docs/OBSERVABILITY.md lists exactly what it registers,
command labels stay within the names it knows, and its progress is read at scrape time."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from replication.redis.metrics import LastSync, ReplicatorMetrics, ReplicatorProgress
from tests.unit.test_metrics import REPLICATOR_HEADING

DOC = Path(__file__).resolve().parents[2] / "docs" / "OBSERVABILITY.md"
_SUFFIX = {"counter": "_total", "info": "_info"}


def documented() -> set[str]:
    section = DOC.read_text().split(REPLICATOR_HEADING)[1].split("\n## ")[0]
    return set(re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.MULTILINE))


def scrape(metrics: ReplicatorMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def progress(**changes: object) -> ReplicatorProgress:
    values: dict[str, object] = {
        "link_up": True,
        "full_sync_running": False,
        "received_offset": 1500,
        "acknowledged_offset": 1200,
        "lag_bytes": 300,
        "lag_seconds": 0.5,
    }
    values.update(changes)
    return ReplicatorProgress(**values)  # type: ignore[arg-type]


def test_the_doc_lists_exactly_the_replicators_metrics() -> None:
    metrics = ReplicatorMetrics()
    metrics.watch(progress)
    registered = {
        family.name + _SUFFIX.get(family.type, "") for family in metrics.registry.collect()
    }
    assert registered == documented()
    assert all(name.startswith("rkv_redis_") for name in registered)


def test_commands_are_counted_by_known_name_and_other() -> None:
    metrics = ReplicatorMetrics()
    metrics.count_commands([b"set", b"set", b"hset", b"ping", b"nosuchcommand", b"set\x00x"])
    samples = scrape(metrics)
    assert samples[("rkv_redis_commands_total", (("command", "set"),))] == 2
    assert samples[("rkv_redis_commands_total", (("command", "hset"),))] == 1
    assert samples[("rkv_redis_commands_total", (("command", "ping"),))] == 1
    assert samples[("rkv_redis_commands_total", (("command", "other"),))] == 2


def test_progress_is_read_when_scraped_and_unknowns_are_absent() -> None:
    metrics = ReplicatorMetrics()
    now = [progress()]
    metrics.watch(lambda: now[0])
    samples = scrape(metrics)
    assert samples[("rkv_redis_master_link_up", ())] == 1
    assert samples[("rkv_redis_received_offset", ())] == 1500
    assert samples[("rkv_redis_acknowledged_offset", ())] == 1200
    assert samples[("rkv_redis_lag_bytes", ())] == 300
    now[0] = progress(link_up=False, received_offset=None, lag_bytes=None, lag_seconds=None)
    samples = scrape(metrics)
    assert samples[("rkv_redis_master_link_up", ())] == 0
    assert ("rkv_redis_received_offset", ()) not in samples
    assert ("rkv_redis_lag_bytes", ()) not in samples
    assert samples[("rkv_redis_acknowledged_offset", ())] == 1200


def test_a_clusters_metrics_carry_each_shards_label_in_one_registry() -> None:
    metrics = ReplicatorMetrics(shards=True)
    first, second = metrics.for_shard("83a632e652af"), metrics.for_shard("7bbfec5c2d35")
    first.watch(progress)
    second.watch(lambda: progress(lag_bytes=7, received_offset=None))
    first.full_syncs.inc()
    second.partial_syncs.inc()
    second.count_commands([b"set", b"set"])
    with first.batch_commit.time():
        pass
    samples = scrape(metrics)
    a, b = (("shard", "83a632e652af"),), (("shard", "7bbfec5c2d35"),)
    assert samples[("rkv_redis_full_syncs_total", a)] == 1
    assert samples[("rkv_redis_full_syncs_total", b)] == 0
    assert samples[("rkv_redis_partial_syncs_total", b)] == 1
    assert samples[("rkv_redis_commands_total", (("command", "set"), *b))] == 2
    assert samples[("rkv_redis_batch_commit_duration_seconds_count", a)] == 1
    assert samples[("rkv_redis_lag_bytes", a)] == 300
    assert samples[("rkv_redis_lag_bytes", b)] == 7
    assert ("rkv_redis_received_offset", b) not in samples  # unknown: not reported
    assert samples[("rkv_redis_received_offset", a)] == 1500


def test_a_sync_counts_its_path_and_a_switch_of_master_shows() -> None:
    metrics = ReplicatorMetrics()
    first = LastSync("+FULLRESYNC", "10.0.0.1:6379", "a" * 40, 100, 0.0, switched=False)
    metrics.synced(first)
    moved = LastSync("+CONTINUE", "10.0.0.2:6380", "b" * 40, 900, 1.0, switched=True)
    metrics.synced(moved)
    samples = scrape(metrics)
    assert samples[("rkv_redis_full_syncs_total", ())] == 1
    assert samples[("rkv_redis_partial_syncs_total", ())] == 1
    assert samples[("rkv_redis_master_switches_total", (("path", "continue"),))] == 1
    assert samples[("rkv_redis_master_switches_total", (("path", "fullresync"),))] == 0
    info = (("address", "10.0.0.2:6380"), ("replid", "b" * 40))
    assert samples[("rkv_redis_master_info", info)] == 1
