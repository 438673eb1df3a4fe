"""The node's gauges read at scrape time: a Prometheus collector over the live objects.

Composition root: it reads consensus, storage, the compactor and the lease
service when /metrics is scraped, so these values cost nothing on the hot path.
The counters and histograms updated as things happen live in node/metrics.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from node.storage.compactor import Compactor
from node.storage.recovery import NodeStorage

# name -> (type, help); the collector yields exactly these (docs/OBSERVABILITY.md).
SCRAPED: dict[str, tuple[str, str]] = {
    "rkv_server_has_leader": ("gauge", "1 if this node knows a reachable leader, else 0."),
    "rkv_server_is_leader": ("gauge", "1 if this node is the leader, else 0."),
    "rkv_server_term": ("gauge", "The raft term this node is in."),
    "rkv_server_commit_index": ("gauge", "The highest raft index this node knows committed."),
    "rkv_server_applied_index": ("gauge", "The raft index of the last entry in the state."),
    "rkv_server_apply_lag_entries": (
        "gauge",
        "Committed raft entries this node has not applied yet (commit index - last applied).",
    ),
    "rkv_server_proposals_pending": (
        "gauge",
        "Commands waiting in this node's proposer (queued or in raft, not yet answered).",
    ),
    "rkv_server_ready": ("gauge", "1 if this node is ready (GET /readyz answers 200), else 0."),
    "rkv_cluster_members": ("gauge", "Voting members in this node's raft configuration."),
    "rkv_store_keys": (
        "gauge",
        "Keys in the applied state, rkv's internal keys (producers, leases, users...) included.",
    ),
    "rkv_store_lmdb_map_used_bytes": ("gauge", "Bytes of the LMDB map that hold pages."),
    "rkv_store_lmdb_map_size_bytes": ("gauge", "The LMDB map's size (it grows when full)."),
    "rkv_commit_log_bytes": ("gauge", "Bytes of the commit log's segments on disk."),
    "rkv_commit_log_segments": ("gauge", "Segments of the commit log (closed and active)."),
    "rkv_producers_known": ("gauge", "Idempotent producers whose state this node holds."),
    "rkv_leases": ("gauge", "Leases this node tracks."),
    "rkv_space_nospace_alarms": (
        "gauge",
        "NOSPACE alarms raised in this node's applied state (any member's).",
    ),
    "rkv_space_data_bytes": (
        "gauge",
        "Bytes this node's data takes on disk (log, LMDB, raft journal), last measured.",
    ),
    "rkv_space_quota_bytes": ("gauge", "This node's --quota-bytes (0: no quota)."),
    "rkv_compaction_runs": ("counter", "Commit-log compaction passes since start."),
    "rkv_compaction_reclaimed_bytes": (
        "counter",
        "Bytes of commit log compaction reclaimed since start.",
    ),
}


@dataclass(frozen=True)
class NodeParts:
    """What the collector reads (handed over by node/cli/wiring.py)."""

    status: Callable[[], dict[str, Any]]  # RaftConsensus.status
    storage: NodeStorage
    compactor: Compactor
    producer_count: Callable[[], int | None]
    lease_count: Callable[[], int]
    space: Callable[[], tuple[int, int, int]] = lambda: (0, 0, 0)
    """(nospace alarms raised, data bytes, quota bytes): node/service/space.py."""


class NodeCollector(Collector):
    def __init__(self, parts: NodeParts) -> None:
        self._parts = parts

    def describe(self) -> Iterator[Any]:
        for name, (kind, help_text) in SCRAPED.items():
            yield _family(name, kind, help_text)

    def collect(self) -> Iterator[Any]:
        values = self.values()
        for name, (kind, help_text) in SCRAPED.items():
            value = values.get(name)
            if value is not None:
                yield _family(name, kind, help_text, float(value))

    def values(self) -> dict[str, float | None]:
        parts = self._parts
        status = parts.status()
        store = parts.storage.store
        log = parts.storage.commit_log
        with store.reader() as view:
            # LMDB's entry count: O(1). Without the internal keys it would walk them all
            # (up to --max-producers) on the event loop at every scrape.
            keys = view.count(include_internal=True)
        alarms, data_bytes, quota_bytes = parts.space()
        commit = status.get("commit_index")
        applied = status.get("raft_last_applied")
        return {
            "rkv_server_has_leader": status.get("leader") is not None,
            "rkv_server_is_leader": status.get("role") == "leader",
            "rkv_server_term": status.get("term"),
            "rkv_server_commit_index": commit,
            "rkv_server_applied_index": store.applied_index,
            "rkv_server_apply_lag_entries": None
            if commit is None or applied is None
            else max(0, commit - applied),
            "rkv_server_proposals_pending": status.get("proposals", {}).get("waiting"),
            "rkv_server_ready": bool(status.get("ready")),
            "rkv_cluster_members": len(status.get("members", ())),
            "rkv_store_keys": keys,
            "rkv_store_lmdb_map_used_bytes": store.used_bytes,
            "rkv_store_lmdb_map_size_bytes": store.map_size,
            "rkv_commit_log_bytes": log.size_bytes,
            "rkv_commit_log_segments": log.segment_count,
            "rkv_producers_known": parts.producer_count(),
            "rkv_leases": parts.lease_count(),
            "rkv_space_nospace_alarms": alarms,
            "rkv_space_data_bytes": data_bytes,
            "rkv_space_quota_bytes": quota_bytes,
            "rkv_compaction_runs": parts.compactor.runs,
            "rkv_compaction_reclaimed_bytes": parts.compactor.reclaimed_bytes,
        }


def _family(name: str, kind: str, help_text: str, value: float | None = None) -> Any:
    if kind == "counter":
        family: Any = CounterMetricFamily(name, help_text, value=value)
    else:
        family = GaugeMetricFamily(name, help_text, value=value)
    return family
