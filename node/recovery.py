"""Opening a node's data directory and bringing LMDB up to the commit log.

Layout of a data directory::

    <data_dir>/log/     commit-log segments (the source of truth)
    <data_dir>/state/   LMDB (a cache of the log)

On open, records after LMDB's applied offset are replayed into LMDB. If LMDB
claims an offset the log does not have (possible only if the log lost an
unsynced tail in a power loss while LMDB's pages reached the disk), LMDB is
discarded and rebuilt from the log, because the log is what the cluster
agreed on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from node.commit_log import CommitLog
from node.lmdb_store import LmdbStore
from node.record import Record
from node.state_machine import StateMachine
from node.storage_config import StorageConfig

logger = logging.getLogger(__name__)

LOG_DIR = "log"
STATE_DIR = "state"
_REPLAY_CHUNK = 5000
_PROGRESS_SECONDS = 2.0

ReplayProgress = Callable[[int, int], None]
"""Called with (records replayed so far, offset reached)."""


@dataclass
class NodeStorage:
    commit_log: CommitLog
    store: LmdbStore
    state_machine: StateMachine
    replayed_records: int

    def sync(self) -> None:
        self.commit_log.sync()

    def close(self) -> None:
        self.commit_log.close()
        self.store.close()


def open_storage(
    data_dir: Path, config: StorageConfig, progress: ReplayProgress | None = None
) -> NodeStorage:
    data_dir.mkdir(parents=True, exist_ok=True)
    commit_log = CommitLog.open(data_dir / LOG_DIR, config)
    store_path = data_dir / STATE_DIR
    store = LmdbStore.open(store_path, config.lmdb_map_size)
    if store.applied_offset > commit_log.last_offset:
        logger.warning(
            "LMDB has applied offset %d but the commit log ends at %d: "
            "rebuilding LMDB from the commit log",
            store.applied_offset,
            commit_log.last_offset,
        )
        store.close()
        LmdbStore.destroy(store_path)
        store = LmdbStore.open(store_path, config.lmdb_map_size)
    replayed = replay(commit_log, store, progress)
    machine = StateMachine(commit_log, store, config.max_value_bytes)
    return NodeStorage(commit_log, store, machine, replayed)


def replay(commit_log: CommitLog, store: LmdbStore, progress: ReplayProgress | None = None) -> int:
    """Apply every log record after LMDB's applied offset; returns how many."""
    start = time.monotonic()
    last_report = start
    replayed = 0
    chunk: list[Record] = []

    def flush() -> None:
        nonlocal replayed
        store.apply(chunk, max(store.applied_index, chunk[-1].raft_index))
        replayed += len(chunk)
        chunk.clear()

    for record in commit_log.read(store.applied_offset + 1):
        chunk.append(record)
        if len(chunk) >= _REPLAY_CHUNK:
            flush()
            now = time.monotonic()
            if progress is not None:
                progress(replayed, store.applied_offset)
            if now - last_report >= _PROGRESS_SECONDS:
                last_report = now
                logger.info(
                    "replaying commit log: %d records, at offset %d of %d (%.0f records/s)",
                    replayed,
                    store.applied_offset,
                    commit_log.last_offset,
                    replayed / (now - start),
                )
    if chunk:
        flush()
    if replayed:
        logger.info(
            "replayed %d records into LMDB in %.2fs (applied offset %d)",
            replayed,
            time.monotonic() - start,
            store.applied_offset,
        )
        store.sync()
    return replayed
