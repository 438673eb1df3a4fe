"""Key-based compaction of the commit log (RocketMQ's Compaction Topic, adapted).

Only closed segments are rewritten; the active one is never touched. A record
is kept iff it is the latest mutation of its key, that is, its offset equals
the key's version in LMDB; a tombstone is kept while it is inside the
retention window (by age or by distance from the head), so a replica that is
behind still learns of the delete, and dropped after. LMDB already is the
key -> latest offset map, on disk, so memory stays bounded whatever the
number of keys (the seed's in-memory OffsetMap is not needed).

Kept records are copied, offsets unchanged, into new segments in a staging
directory, which replace the old ones atomically (node/storage/segment_swap.py).
A read from an offset that compaction removed returns the next greater one,
so reading from 0 gives every live key once plus the tombstones in retention.

Runs off the apply path: it reads LMDB through short read transactions and
writes only new files; the apply thread keeps appending to the active
segment meanwhile. A record kept because its key was not yet overwritten is
simply dropped by the next compaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from node.storage.commit_log import CommitLog
from node.storage.record import BODY_HEADER, ENTRY_END, PREFIX, RecordOp
from node.storage.segment import Segment

if TYPE_CHECKING:  # only for annotations: `rkv get` must not load lmdb via settings
    from node.storage.lmdb_store import LmdbStore

logger = logging.getLogger(__name__)

_CHUNK = 1000


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """How long tombstones stay: a tombstone is kept while either window holds it."""

    tombstone_retention_ms: int = 24 * 3600 * 1000
    tombstone_retention_offsets: int = 100_000


@dataclass(frozen=True, slots=True)
class CompactionResult:
    segments_before: int
    segments_after: int
    bytes_before: int
    bytes_after: int
    records_before: int
    records_kept: int
    tombstones_kept: int
    seconds: float

    @property
    def records_dropped(self) -> int:
        return self.records_before - self.records_kept


Progress = Callable[[int, int], None]
"""Called with (bytes examined, bytes to examine) as compaction goes."""


class _StagedWriter:
    """Fills new staged segments of at most ``segment_bytes`` each."""

    def __init__(self, log: CommitLog, segment_bytes: int) -> None:
        self._log = log
        self._segment_bytes = segment_bytes
        self.segments: list[Segment] = []

    def write(self, frames: list[tuple[int, bytes]]) -> None:
        """Append (offset, frame) pairs: frames are copied as they are, checksums and all."""
        if not frames:
            return
        current = self.segments[-1] if self.segments else None
        if current is None or current.size >= self._segment_bytes:
            current = self._log.new_staged_segment(frames[0][0])
            self.segments.append(current)
        current.append(frames)

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)


class _Frame(NamedTuple):
    offset: int
    timestamp_ms: int
    op: int
    key: bytes
    frame: bytes


def _frames(segments: list[Segment]) -> Iterator[_Frame]:
    """The records of ``segments`` as raw frames with the fields compaction decides on."""
    header_at = PREFIX.size
    for segment in segments:
        if segment.is_empty:
            continue
        for _, frame in segment.raw_records():
            offset, _, timestamp, _, op, key_len, _ = BODY_HEADER.unpack_from(frame, header_at)
            key_at = header_at + BODY_HEADER.size
            yield _Frame(
                offset, timestamp, op & ~ENTRY_END, frame[key_at : key_at + key_len], frame
            )


def compact(
    log: CommitLog,
    store: LmdbStore,
    policy: CompactionPolicy,
    segment_bytes: int,
    *,
    now_ms: int | None = None,
    progress: Progress | None = None,
) -> CompactionResult:
    """Compact every closed segment of ``log`` against ``store``'s current state."""
    with log.rewriting:
        return _compact(log, store, policy, segment_bytes, now_ms=now_ms, progress=progress)


def _compact(
    log: CommitLog,
    store: LmdbStore,
    policy: CompactionPolicy,
    segment_bytes: int,
    *,
    now_ms: int | None,
    progress: Progress | None,
) -> CompactionResult:
    started = time.monotonic()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    head = log.last_offset
    old = log.closed_segments()
    total_bytes = sum(s.size for s in old)
    writer = _StagedWriter(log, segment_bytes)
    examined = kept = tombstones = read_bytes = 0
    chunk: list[_Frame] = []

    def flush() -> None:
        nonlocal kept, tombstones
        keep: list[tuple[int, bytes]] = []
        with store.reader() as view:
            for item in chunk:
                if item.op == RecordOp.PUT:
                    current = view.get(item.key)
                    if current is not None and current.version == item.offset:
                        keep.append((item.offset, item.frame))
                elif (
                    now_ms - item.timestamp_ms < policy.tombstone_retention_ms
                    or head - item.offset < policy.tombstone_retention_offsets
                ):
                    keep.append((item.offset, item.frame))
                    tombstones += 1
        writer.write(keep)
        kept += len(keep)
        chunk.clear()
        if progress is not None:
            progress(read_bytes, total_bytes)

    for item in _frames(old):
        chunk.append(item)
        examined += 1
        read_bytes += len(item.frame)
        if len(chunk) >= _CHUNK:
            flush()
    if chunk:
        flush()
    bytes_before = sum(s.size for s in old)
    if old:
        log.replace_closed(old, writer.segments)
    result = CompactionResult(
        segments_before=len(old),
        segments_after=len(writer.segments),
        bytes_before=bytes_before,
        bytes_after=writer.size,
        records_before=examined,
        records_kept=kept,
        tombstones_kept=tombstones,
        seconds=time.monotonic() - started,
    )
    logger.info(
        "compacted %d segments (%d bytes, %d records) into %d (%d bytes, %d records, "
        "%d tombstones) in %.2fs",
        result.segments_before,
        result.bytes_before,
        result.records_before,
        result.segments_after,
        result.bytes_after,
        result.records_kept,
        result.tombstones_kept,
        result.seconds,
    )
    return result
