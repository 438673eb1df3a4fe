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

A background pass does not rewrite a segment for little gain: it first reads
a sample of each closed segment's records (about ``SAMPLE_RECORDS``, spread
over its bytes) and rewrites only the segments whose estimated droppable
share reaches ``min_dirty_ratio`` (Kafka's log cleaner waits for
``min.cleanable.dirty.ratio`` likewise). A forced pass rewrites them all.
Each run of consecutive chosen segments is replaced on its own.

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

from node.storage import segment_swap
from node.storage.commit_log import CommitLog
from node.storage.record import BODY_HEADER, ENTRY_END, PREFIX, RecordOp
from node.storage.segment import Segment

if TYPE_CHECKING:  # only for annotations: `rkv get` must not load lmdb via settings
    from node.storage.lmdb_store import LmdbStore, ReadView

logger = logging.getLogger(__name__)

_CHUNK = 1000
SAMPLE_RECORDS = 64


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
    segments_skipped: int = 0
    """Closed segments left as they were: too little to drop (below the dirty ratio)."""
    bytes_skipped: int = 0

    @property
    def records_dropped(self) -> int:
        return self.records_before - self.records_kept

    @property
    def bytes_reclaimed(self) -> int:
        return self.bytes_before - self.bytes_after


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

    def abandon(self) -> None:
        """Drop what was staged (before any swap): close the files, remove the staging."""
        for segment in self.segments:
            segment.abandon()
        self.segments.clear()
        segment_swap.discard_staging(self._log.directory)


class _Frame(NamedTuple):
    offset: int
    timestamp_ms: int
    op: int
    key: bytes
    frame: bytes


def _parse(frame: bytes, header_at: int) -> _Frame:
    offset, _, timestamp, _, op, key_len, _ = BODY_HEADER.unpack_from(frame, header_at)
    key_at = header_at + BODY_HEADER.size
    return _Frame(offset, timestamp, op & ~ENTRY_END, frame[key_at : key_at + key_len], frame)


def _frames(segments: list[Segment]) -> Iterator[_Frame]:
    """The records of ``segments`` as raw frames with the fields compaction decides on."""
    for segment in segments:
        if segment.is_empty:
            continue
        for _, frame in segment.raw_records():
            yield _parse(frame, PREFIX.size)


@dataclass(frozen=True, slots=True)
class _Rules:
    """What decides whether a record stays: the state now, the head, the retention."""

    policy: CompactionPolicy
    head: int
    now_ms: int

    def keeps(self, view: ReadView, item: _Frame) -> bool:
        if item.op == RecordOp.PUT:
            current = view.get(item.key)
            return current is not None and current.version == item.offset
        return (
            self.now_ms - item.timestamp_ms < self.policy.tombstone_retention_ms
            or self.head - item.offset < self.policy.tombstone_retention_offsets
        )


def dirty_ratio(segment: Segment, store: LmdbStore, rules: _Rules) -> float:
    """The share of ``segment``'s records (by bytes, from a sample) a pass would drop."""
    sampled = dropped = 0
    with store.reader() as view:
        for body in segment.sample(SAMPLE_RECORDS):
            sampled += 1
            dropped += not rules.keeps(view, _parse(body, 0))
    return dropped / sampled if sampled else 0.0


def _runs(segments: list[Segment], chosen: list[bool]) -> list[list[Segment]]:
    """The consecutive chosen segments, run by run."""
    runs: list[list[Segment]] = []
    previous = False
    for segment, take in zip(segments, chosen, strict=True):
        if take:
            if not previous:
                runs.append([])
            runs[-1].append(segment)
        previous = take
    return runs


@dataclass
class _Tally:
    total_bytes: int
    read_bytes: int = 0
    examined: int = 0
    kept: int = 0
    tombstones: int = 0
    segments_before: int = 0
    segments_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


def _rewrite(
    log: CommitLog,
    store: LmdbStore,
    run: list[Segment],
    *,
    rules: _Rules,
    size: int,
    tally: _Tally,
    progress: Progress | None,
) -> None:
    """Copy what stays of ``run`` (consecutive closed segments) into new segments and
    swap them in."""
    writer = _StagedWriter(log, size)
    chunk: list[_Frame] = []

    def flush() -> None:
        keep: list[tuple[int, bytes]] = []
        with store.reader() as view:
            for item in chunk:
                if rules.keeps(view, item):
                    keep.append((item.offset, item.frame))
                    tally.tombstones += item.op != RecordOp.PUT
        writer.write(keep)
        tally.kept += len(keep)
        chunk.clear()
        if progress is not None:
            progress(tally.read_bytes, tally.total_bytes)

    try:
        for item in _frames(run):
            chunk.append(item)
            tally.examined += 1
            tally.read_bytes += len(item.frame)
            if len(chunk) >= _CHUNK:
                flush()
        if chunk:
            flush()
    except BaseException:
        # A full disk, most likely: nothing was swapped yet, so the staged copies go
        # (they hold space, and a later run must be able to stage the same names).
        writer.abandon()
        raise
    log.replace_closed(run, writer.segments)
    tally.segments_before += len(run)
    tally.segments_after += len(writer.segments)
    tally.bytes_before += sum(s.size for s in run)
    tally.bytes_after += writer.size


def compact(
    log: CommitLog,
    store: LmdbStore,
    policy: CompactionPolicy,
    segment_bytes: int,
    *,
    now_ms: int | None = None,
    progress: Progress | None = None,
    min_dirty_ratio: float = 0.0,
) -> CompactionResult:
    """Compact the closed segments of ``log`` against ``store``'s current state: every
    one (``min_dirty_ratio`` 0), or those a sample says would lose at least that share."""
    with log.rewriting:
        return _compact(
            log,
            store,
            policy,
            segment_bytes,
            now_ms=now_ms,
            progress=progress,
            min_dirty_ratio=min_dirty_ratio,
        )


def _compact(
    log: CommitLog,
    store: LmdbStore,
    policy: CompactionPolicy,
    segment_bytes: int,
    *,
    now_ms: int | None,
    progress: Progress | None,
    min_dirty_ratio: float,
) -> CompactionResult:
    started = time.monotonic()
    rules = _Rules(policy, log.last_offset, int(time.time() * 1000) if now_ms is None else now_ms)
    closed = [s for s in log.closed_segments() if not s.is_empty]
    if min_dirty_ratio > 0:
        chosen = [dirty_ratio(s, store, rules) >= min_dirty_ratio for s in closed]
    else:
        chosen = [True] * len(closed)
    runs = _runs(closed, chosen)
    skipped = [s for s, take in zip(closed, chosen, strict=True) if not take]
    tally = _Tally(total_bytes=sum(s.size for run in runs for s in run))
    for run in runs:
        _rewrite(
            log,
            store,
            run,
            rules=rules,
            size=segment_bytes,
            tally=tally,
            progress=progress,
        )
    result = CompactionResult(
        segments_before=tally.segments_before,
        segments_after=tally.segments_after,
        bytes_before=tally.bytes_before,
        bytes_after=tally.bytes_after,
        records_before=tally.examined,
        records_kept=tally.kept,
        tombstones_kept=tally.tombstones,
        seconds=time.monotonic() - started,
        segments_skipped=len(skipped),
        bytes_skipped=sum(s.size for s in skipped),
    )
    logger.info(
        "compacted %d segments (%d bytes, %d records) into %d (%d bytes, %d records, "
        "%d tombstones; %d bytes reclaimed) in %.2fs; %d segments (%d bytes) left as they "
        "were, below the dirty ratio %.2f",
        result.segments_before,
        result.bytes_before,
        result.records_before,
        result.segments_after,
        result.bytes_after,
        result.records_kept,
        result.tombstones_kept,
        result.bytes_reclaimed,
        result.seconds,
        result.segments_skipped,
        result.bytes_skipped,
        min_dirty_ratio,
    )
    return result
