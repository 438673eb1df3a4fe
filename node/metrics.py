"""The node's Prometheus metrics that code updates as things happen, and their registry.

A floor module (it imports prometheus_client and nothing of rkv), so storage,
raft, the service and the HTTP layer may all update them. The gauges read at
scrape time (leader, term, indexes, keys, disk use...) are a collector the
composition root registers (node/cli/node_metrics.py): they cost nothing
between scrapes. docs/OBSERVABILITY.md lists every metric; a unit test keeps
the two the same.

Hot-path rules: no label holds a key or a raw path (labels are route templates,
result codes, reasons); counters are updated once per raft entry or per batch,
never per record. ``enabled`` is False with ``--metrics off``: the call sites
test it before updating anything, so the cost of metrics can be measured.
Names follow etcd's where the meaning is the same (etcd_server_has_leader ->
rkv_server_has_leader, etcd_disk_wal_fsync_duration_seconds ->
rkv_disk_journal_fsync_duration_seconds...).
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

# No *_created series: etcd has none, and they double the output (untyped upstream).
disable_created_metrics()  # type: ignore[no-untyped-call]

enabled = True
"""Whether the call sites update the metrics below (``--metrics``)."""

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)  # process_cpu_seconds_total, resident memory, open fds
PlatformCollector(registry=REGISTRY)  # python_info

# Seconds: an fsync or a write transaction takes from ~50 µs (page cache, NVMe) to seconds
# (a saturated disk); etcd's wal fsync buckets start at 1 ms, these go lower for NVMe.
_DISK_SECONDS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)
_BATCH_COMMANDS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
_HTTP_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
_LONG_SECONDS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)

# -- raft and proposals -----------------------------------------------------------------

LEADER_CHANGES = Counter(
    "rkv_server_leader_changes_seen",
    "Times this node saw a leader after none or another (an election's end; the first "
    "leader it follows counts).",
    registry=REGISTRY,
)
PROPOSALS_COMMITTED = Counter(
    "rkv_server_proposals_committed",
    "Commands proposed through this node that raft committed and applied "
    "(a failed compare-and-set counts: it was committed, its outcome is a result).",
    registry=REGISTRY,
)
PROPOSALS_FAILED = Counter(
    "rkv_server_proposals_failed",
    "Commands proposed through this node that raft did not commit, by reason "
    "(the error code a client got: not_applied, overloaded, unknown_outcome...).",
    ["reason"],
    registry=REGISTRY,
)
PROPOSALS_APPLIED = Counter(
    "rkv_server_proposals_applied",
    "Commands this node's state machine applied, by result code (ok, version_conflict...).",
    ["result"],
    registry=REGISTRY,
)
LINEARIZABLE_READS = Counter(
    "rkv_server_linearizable_reads",
    "Linearizable read rounds this node waited for, by how: read_index (a heartbeat "
    "round, no log entry) or barrier (an entry through the log, where ReadIndex "
    "cannot be used).",
    ["path"],
    registry=REGISTRY,
)
BATCH_COMMANDS = Histogram(
    "rkv_server_group_commit_batch_commands",
    "Commands per raft entry this node proposed (group commit).",
    buckets=_BATCH_COMMANDS,
    registry=REGISTRY,
)
PEER_SEND_FAILURES = Counter(
    "rkv_network_peer_send_failures",
    "Raft messages this node could not hand to a peer's connection (not connected, "
    "or the connection failed while sending).",
    registry=REGISTRY,
)

# -- disk -------------------------------------------------------------------------------

JOURNAL_FSYNC = Histogram(
    "rkv_disk_journal_fsync_duration_seconds",
    "Duration of an fdatasync of the raft journal (etcd: wal fsync).",
    unit="seconds",
    buckets=_DISK_SECONDS,
    registry=REGISTRY,
)
COMMIT_LOG_FSYNC = Histogram(
    "rkv_disk_commit_log_fsync_duration_seconds",
    "Duration of a group fsync of the commit log before clients are answered.",
    unit="seconds",
    buckets=_DISK_SECONDS,
    registry=REGISTRY,
)
LMDB_WRITE = Histogram(
    "rkv_disk_lmdb_write_txn_duration_seconds",
    "Duration of one LMDB write transaction applying an entry (etcd: backend commit).",
    unit="seconds",
    buckets=_DISK_SECONDS,
    registry=REGISTRY,
)

# -- compaction, catch-up, snapshot installs, audit -----------------------------------------

COMPACTION_DURATION = Histogram(
    "rkv_compaction_duration_seconds",
    "Duration of one commit-log compaction pass.",
    unit="seconds",
    buckets=_LONG_SECONDS,
    registry=REGISTRY,
)

CATCH_UPS = Counter(
    "rkv_catch_up",
    "Rounds of filling a gap behind a raft marker from another member (its log range, "
    "else its whole state), by result (ok, failed: the next source or round retries).",
    ["result"],
    registry=REGISTRY,
)
CATCH_UP_DURATION = Histogram(
    "rkv_catch_up_duration_seconds",
    "Duration of one catch-up from one source, successful or not.",
    unit="seconds",
    buckets=_LONG_SECONDS,
    registry=REGISTRY,
)
SNAPSHOT_INSTALL_DURATION = Histogram(
    "rkv_snapshot_install_duration_seconds",
    "Duration of installing a whole-state snapshot file (its _count: installs done).",
    unit="seconds",
    buckets=_LONG_SECONDS,
    registry=REGISTRY,
)
AUDIT_EXPORTS = Counter(
    "rkv_audit_exports",
    "Consistency-audit exports of this node's cut, by result (ok, failed).",
    ["result"],
    registry=REGISTRY,
)

# -- HTTP -------------------------------------------------------------------------------

HTTP_REQUESTS = Counter(
    "rkv_http_requests",
    "HTTP requests answered, by method, route template (never a raw path or key) and "
    "status class (2xx, 3xx, 4xx, 5xx).",
    ["method", "route", "code"],
    registry=REGISTRY,
)
HTTP_DURATION = Histogram(
    "rkv_http_request_duration_seconds",
    "Time from a request's arrival at the app to its response (a stream: until it ends), "
    "by method and route template.",
    ["method", "route"],
    unit="seconds",
    buckets=_HTTP_SECONDS,
    registry=REGISTRY,
)
STREAMS_OPEN = Gauge(
    "rkv_http_streams_open",
    "Watches and election observers this node is serving now.",
    registry=REGISTRY,
)
