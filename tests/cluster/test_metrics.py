"""GET /metrics on real nodes: after puts, failed compare-and-sets, a leader killed with
SIGKILL and a forced compaction, each node's counters hold what happened (bounds,
never timings), and no label carries a key."""

from __future__ import annotations

import functools

from prometheus_client.parser import text_string_to_metric_families

from tests.support.cluster import LocalCluster, NodeProcess, http, wait_until

PUTS = 20
FAILED_CAS = 3
KEY_MARK = "metricskey"  # in every key written: no label value may contain it


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(node: NodeProcess) -> Samples:
    response = http("GET", f"{node.url}/metrics")
    assert response.status == 200, response.body
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.body.decode()):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            assert not any(KEY_MARK in value for _, value in labels), sample
            samples[(sample.name, labels)] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_count_a_scripted_workload(cluster: LocalCluster) -> None:
    leader = cluster.leader()
    for i in range(PUTS):
        response = http("PUT", f"{leader.url}/v1/kv/{KEY_MARK}/{i}", body=b"v%d" % i)
        assert response.status == 200, response.body
    for i in range(FAILED_CAS):
        stale = http(
            "PUT",
            f"{leader.url}/v1/kv/{KEY_MARK}/{i}",
            body=b"lost",
            headers={"If-Match": '"999999"'},
        )
        assert stale.status == 412, stale.body

    on_leader = scrape(leader)
    assert value(on_leader, "rkv_server_proposals_committed_total") >= PUTS + FAILED_CAS
    assert value(on_leader, "rkv_server_proposals_applied_total", result="ok") >= PUTS
    assert (
        value(on_leader, "rkv_server_proposals_applied_total", result="version_conflict")
        >= FAILED_CAS
    )
    assert value(on_leader, "rkv_server_is_leader") == 1
    assert value(on_leader, "rkv_server_group_commit_batch_commands_count") >= 1
    assert value(on_leader, "rkv_disk_lmdb_write_txn_duration_seconds_count") >= PUTS
    assert value(on_leader, "rkv_disk_commit_log_fsync_duration_seconds_count") >= 1
    assert value(on_leader, "rkv_store_keys") >= PUTS
    assert value(on_leader, "process_resident_memory_bytes") > 0
    # Requests are counted by route template, never by path.
    puts = value(
        on_leader, "rkv_http_requests_total", method="PUT", route="/v1/kv/{key}", code="2xx"
    )
    assert puts >= PUTS
    conflicts = value(
        on_leader, "rkv_http_requests_total", method="PUT", route="/v1/kv/{key}", code="4xx"
    )
    assert conflicts >= FAILED_CAS

    survivors = cluster.followers()
    before = {node.node_id: scrape(node) for node in survivors}
    for node in survivors:
        assert value(before[node.node_id], "rkv_server_has_leader") == 1
        assert value(before[node.node_id], "rkv_server_is_leader") == 0
        applied = value(before[node.node_id], "rkv_server_proposals_applied_total", result="ok")
        assert applied >= PUTS
    cluster.kill(cluster.nodes.index(leader))
    new_leader = cluster.wait_for_new_leader(leader)

    def sees_new_leader(node: NodeProcess) -> bool:
        now = scrape(node)
        seen = value(now, "rkv_server_leader_changes_seen_total")
        old = value(before[node.node_id], "rkv_server_leader_changes_seen_total")
        return seen > old and value(now, "rkv_server_has_leader") == 1

    for node in survivors:
        wait_until(functools.partial(sees_new_leader, node), 20, node.node_id)

    compacted = http("POST", f"{new_leader.url}/v1/admin/compact")
    assert compacted.status == 200, compacted.body
    after = scrape(new_leader)
    assert value(after, "rkv_compaction_runs_total") >= 1
    assert value(after, "rkv_compaction_duration_seconds_count") >= 1
    assert value(after, "rkv_server_is_leader") == 1
    assert value(after, "rkv_server_term") >= 2
