"""The domain types and wire constants the service's answers carry.

The HTTP layer sees node/ through node.service: what the service returns
(records, stored values, compaction results, snapshot headers, audit statuses)
is named here once, so http_api/ never reaches into storage, snapshot or audit.
"""

from __future__ import annotations

from node.audit.export import DEFAULT_BUCKETS
from node.audit.jobs import RUNNING, AuditStatus
from node.snapshot.format import CONTENT_TYPE as SNAPSHOT_CONTENT_TYPE
from node.snapshot.format import SnapshotHeader
from node.storage.compaction import CompactionResult
from node.storage.lmdb_store import StoredValue
from node.storage.log_feed import LOG_CONTENT_TYPE
from node.storage.record import Record, RecordOp

__all__ = [
    "DEFAULT_BUCKETS",
    "LOG_CONTENT_TYPE",
    "RUNNING",
    "SNAPSHOT_CONTENT_TYPE",
    "AuditStatus",
    "CompactionResult",
    "Record",
    "RecordOp",
    "SnapshotHeader",
    "StoredValue",
]
