"""Replaying commit-log records into LMDB (recovery, and repair after a failed apply)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from node.storage.commit_log import CommitLog
from node.storage.lmdb_store import LmdbStore
from node.storage.record import Record

logger = logging.getLogger(__name__)

_CHUNK = 5000
_PROGRESS_SECONDS = 2.0

ReplayProgress = Callable[[int, int], None]
"""Called with (records replayed so far, offset reached)."""


def replay(commit_log: CommitLog, store: LmdbStore, progress: ReplayProgress | None = None) -> int:
    """Apply every log record after LMDB's applied offset; returns how many.

    Progress goes to ``progress`` after each chunk and to the log every 2 s.
    """
    start = time.monotonic()
    last_report = start
    replayed = 0
    chunk: list[Record] = []

    def flush() -> None:
        nonlocal replayed
        store.apply_records(chunk, max(store.applied_index, chunk[-1].raft_index))
        replayed += len(chunk)
        chunk.clear()
        if progress is not None:
            progress(replayed, store.applied_offset)

    for record in commit_log.read(store.applied_offset + 1):
        chunk.append(record)
        if len(chunk) >= _CHUNK:
            flush()
            now = time.monotonic()
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
    return replayed
