"""Snapshot files (RIP-22 phase 2): the public names, re-exported.

The format, its constants and the validating reader are node/snapshot/format.py;
the writer from one LMDB read view is node/snapshot/export.py; restoring into a
fresh data directory (with its external merge sort) is node/snapshot/restore.py.
"""

from __future__ import annotations

from node.snapshot.export import export_snapshot, write_snapshot
from node.snapshot.format import (
    CONTENT_TYPE,
    FORMAT_VERSION,
    HEADER_BYTES,
    MAGIC,
    TRAILER_BYTES,
    TRAILER_MAGIC,
    SnapshotHeader,
    SnapshotProgress,
    SnapshotReader,
    verify_snapshot,
)
from node.snapshot.restore import (
    MERGE_FAN_IN,
    RUN_BYTES,
    RUN_RECORDS,
    STAGING_DIR,
    RestoreResult,
    check_fresh_data_dir,
    restore_snapshot,
)

__all__ = [
    "CONTENT_TYPE",
    "FORMAT_VERSION",
    "HEADER_BYTES",
    "MAGIC",
    "MERGE_FAN_IN",
    "RUN_BYTES",
    "RUN_RECORDS",
    "STAGING_DIR",
    "TRAILER_BYTES",
    "TRAILER_MAGIC",
    "RestoreResult",
    "SnapshotHeader",
    "SnapshotProgress",
    "SnapshotReader",
    "check_fresh_data_dir",
    "export_snapshot",
    "restore_snapshot",
    "verify_snapshot",
    "write_snapshot",
]
