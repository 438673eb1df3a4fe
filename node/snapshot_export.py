"""Snapshot export (RIP-22 phase 2): a snapshot file from ONE LMDB read view.

The format is node/snapshot_format.py. The records, the count and the applied
index/offset all come from the same read transaction, so the file is the state
at exactly one applied index. Memory is bounded by one chunk of items (1000
items or 4 MiB of values).
"""

from __future__ import annotations

import hashlib
import time
from typing import BinaryIO

from node.errors import StoreError
from node.lmdb_store import LmdbStore, ReadView
from node.record import Record, RecordOp, encode_record
from node.snapshot_format import (
    FORMAT_VERSION,
    TRAILER,
    TRAILER_MAGIC,
    ProgressReporter,
    SnapshotHeader,
    SnapshotProgress,
)


def write_snapshot(
    view: ReadView,
    out: BinaryIO,
    *,
    created_at_ms: int | None = None,
    progress: SnapshotProgress | None = None,
) -> SnapshotHeader:
    """Write every key of ``view`` (one LMDB read transaction) to ``out``.

    The applied index and offset, the count and the records all come from the
    view, so the file is the state at exactly one applied index.
    """
    applied_index, applied_offset = view.applied()
    count = view.count(include_internal=True)
    now = int(time.time() * 1000) if created_at_ms is None else created_at_ms
    header = SnapshotHeader(FORMAT_VERSION, applied_index, applied_offset, count, now)
    digest = hashlib.sha256()
    report = ProgressReporter("export", count, progress)

    def emit(data: bytes) -> None:
        digest.update(data)
        out.write(data)

    emit(header.encode())
    written = 0
    for chunk in view.all_items():
        emit(
            b"".join(
                encode_record(
                    Record(
                        stored.version,
                        applied_index,
                        now,
                        RecordOp.PUT,
                        key,
                        stored.value,
                        stored.create_version,
                    )
                )
                for key, stored in chunk
            )
        )
        written += len(chunk)
        report(written)
    if written != count:  # impossible inside one read transaction
        raise StoreError(f"LMDB counted {count} keys but the export read {written}")
    out.write(TRAILER.pack(TRAILER_MAGIC, count, digest.digest()))
    out.flush()
    return header


def export_snapshot(
    store: LmdbStore, out: BinaryIO, progress: SnapshotProgress | None = None
) -> SnapshotHeader:
    """:func:`write_snapshot` from one read transaction of ``store``.

    The transaction stays open while the file is written: LMDB keeps the pages
    it sees (the map may grow meanwhile) and a map resize waits for it.
    """
    with store.reader() as view:
        return write_snapshot(view, out, progress=progress)
