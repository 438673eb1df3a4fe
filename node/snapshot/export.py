"""Snapshot export (RIP-22 phase 2): a snapshot file from ONE LMDB read view.

The format is node/snapshot/format.py. The records, the count and the applied
index/offset all come from the same read transaction, so the file is the state
at exactly one applied index. Memory is bounded by one chunk of items (1000
items or 4 MiB of values).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable
from typing import BinaryIO

from node.errors import StoreError
from node.snapshot.format import (
    FORMAT_VERSION,
    TRAILER,
    TRAILER_MAGIC,
    ProgressReporter,
    SnapshotHeader,
    SnapshotProgress,
)
from node.storage.lmdb_store import LmdbStore, ReadView, StoredValue
from node.storage.record import Record, RecordOp, encode_record


class SnapshotWriter:
    """Writes one snapshot file whose record count is known up front: the header at
    once, then :meth:`add` chunks of (key, stored value) in LMDB order, then
    :meth:`finish` (the trailer). Also used for the buckets of an audit export."""

    def __init__(self, out: BinaryIO, header: SnapshotHeader) -> None:
        self._out = out
        self._header = header
        self._digest = hashlib.sha256()
        self.written = 0
        self.bytes = 0
        self._emit(header.encode())

    def _emit(self, data: bytes) -> None:
        self._digest.update(data)
        self._out.write(data)
        self.bytes += len(data)

    def add(self, items: Iterable[tuple[bytes, StoredValue]]) -> None:
        index, now = self._header.applied_index, self._header.created_at_ms
        chunk = [
            encode_record(
                Record(
                    stored.version,
                    index,
                    now,
                    RecordOp.PUT,
                    key,
                    stored.value,
                    stored.create_version,
                )
            )
            for key, stored in items
        ]
        self._emit(b"".join(chunk))
        self.written += len(chunk)

    def finish(self, *, part: bool = False) -> None:
        """The trailer: the count and the SHA-256 of every byte before it. A ``part``
        (the rest of a cut transfer) counts the records it holds, fewer than the
        header's count of the whole state."""
        count = self.written if part else self._header.record_count
        if self.written != count:  # impossible inside one read transaction
            raise StoreError(f"LMDB counted {count} keys but the export read {self.written}")
        trailer = TRAILER.pack(TRAILER_MAGIC, count, self._digest.digest())
        self._out.write(trailer)
        self.bytes += len(trailer)
        self._out.flush()


def snapshot_header(view: ReadView, created_at_ms: int | None = None) -> SnapshotHeader:
    """The header of ``view``'s snapshot: its applied index and offset, its key count."""
    applied_index, applied_offset = view.applied()
    count = view.count(include_internal=True)
    now = int(time.time() * 1000) if created_at_ms is None else created_at_ms
    return SnapshotHeader(FORMAT_VERSION, applied_index, applied_offset, count, now)


def write_snapshot(
    view: ReadView,
    out: BinaryIO,
    *,
    created_at_ms: int | None = None,
    progress: SnapshotProgress | None = None,
    header: SnapshotHeader | None = None,
    after: bytes | None = None,
) -> SnapshotHeader:
    """Write every key of ``view`` (one LMDB read transaction) to ``out``.

    The applied index and offset, the count and the records all come from the
    view, so the file is the state at exactly one applied index. With ``after``,
    a part: the same ``header`` (the whole state's, from the same view), only the
    keys after that key, and a trailer counting them (the rest of a cut transfer).
    """
    header = header or snapshot_header(view, created_at_ms)
    report = ProgressReporter("export", header.record_count, progress)
    writer = SnapshotWriter(out, header)
    for chunk in view.all_items(after=after):
        writer.add(chunk)
        report(writer.written)
    writer.finish(part=after is not None)
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
