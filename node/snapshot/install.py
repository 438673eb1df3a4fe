"""Replacing a live node's whole state with a snapshot of another member's.

A follower whose state is behind a leader's raft marker (it was away, or
wiped, while the leader compacted its raft journal) cannot get the missing
entries from raft any more. It installs the leader's state instead: a
snapshot file (node/snapshot/format.py) taken from ONE LMDB read transaction,
so it is the leader's state at exactly one applied raft index and offset,
every key present with its value and version. (Pulling a range of the
leader's compacted commit log is not enough: a key overwritten after the
range's end has no record left inside it, and a delete whose tombstone
retention ran out is gone.)

:func:`install_snapshot` verifies the file and builds a new commit log (one
record per key at its original offset, the head advanced to the snapshot's
offset) and a new LMDB beside the live ones, then swaps both in on the apply
thread: readers wait a moment and then see the new state. A flag file is
written before the swap and removed after it; a node that crashes in between
finds the flag at start-up (node/storage/recovery.py) and starts
from an empty state, which raft's raft marker then fills again.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import NamedTuple

from node import metrics
from node.snapshot.format import SnapshotHeader, SnapshotProgress
from node.snapshot.restore import build_staging
from node.storage.datadir import (
    INSTALL_FLAG_FILE,
    INSTALL_STAGING_DIR,
    LOG_DIR,
    STATE_DIR,
    fsync_directory,
)
from node.storage.recovery import NodeStorage

logger = logging.getLogger(__name__)


class InstallResult(NamedTuple):
    header: SnapshotHeader
    log_bytes: int
    seconds: float


def install_snapshot(
    storage: NodeStorage,
    snapshot: Path,
    progress: SnapshotProgress | None = None,
) -> InstallResult:
    """Replace ``storage``'s state with the snapshot file's (raft index kept).

    Call on the apply thread, with nothing else applying. Raises
    SnapshotFormatError for a bad file (the live state is then untouched) and
    StorageError/OSError for local failures.
    """
    started = time.monotonic()
    data_dir = storage.data_dir
    staging = data_dir / INSTALL_STAGING_DIR
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        header, _, log_bytes = build_staging(
            snapshot, staging, storage.config, keep_raft_index=True, progress=progress
        )
        _write_flag(data_dir)
        storage.commit_log.replace_with(staging / LOG_DIR)
        storage.store.replace_with(staging / STATE_DIR)
        (data_dir / INSTALL_FLAG_FILE).unlink()
        fsync_directory(data_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    seconds = time.monotonic() - started
    if metrics.enabled:
        metrics.SNAPSHOT_INSTALL_DURATION.observe(seconds)
    logger.info(
        "installed a snapshot of %d keys at raft index %d, offset %d (%d log bytes) in %.2fs",
        header.record_count,
        header.applied_index,
        header.applied_offset,
        log_bytes,
        seconds,
    )
    return InstallResult(header, log_bytes, seconds)


def _write_flag(data_dir: Path) -> None:
    path = data_dir / INSTALL_FLAG_FILE
    with open(path, "w") as f:
        f.write("a snapshot install was swapping this node's state in\n")
        f.flush()
        os.fsync(f.fileno())
    fsync_directory(data_dir)
