"""The segmented, append-only commit log.

Every mutation the state machine applies becomes a record here first; LMDB is
only a cache of this log. Offsets are strictly increasing and never reused
(compaction, later, removes records but never renumbers them), so a record's
offset is the version of its key.

Concurrency: one writer (the apply thread) appends; any number of readers may
iterate at the same time, and another thread may call :meth:`CommitLog.sync`.
A reader sees the segments and sizes as they were when its iteration reached
them, never a half-written batch.

Durability: with :attr:`FsyncPolicy.ALWAYS` every append is fsynced; with
``ON_SYNC`` the owner calls :meth:`CommitLog.sync` at its durability point.
Closing a segment always fsyncs it, its index and the directory.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import os
import shutil
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from node.errors import StorageError
from node.keyspace import MAX_KEY_BYTES
from node.storage import segment_swap
from node.storage.config import FsyncPolicy, StorageConfig
from node.storage.datadir import fsync_directory, make_directories
from node.storage.record import Record, encode_entry_records, max_record_bytes
from node.storage.segment import LOG_SUFFIX, Segment

logger = logging.getLogger(__name__)

FIRST_OFFSET = 1


class CommitLog:
    def __init__(self, directory: Path, config: StorageConfig) -> None:
        """Open (or create) the log in ``directory``; use :meth:`open`."""
        self.directory = directory
        self._config = config
        self._max_record_bytes = max_record_bytes(config.max_value_bytes, MAX_KEY_BYTES)
        self._lock = threading.Lock()
        # sync() may run on another thread than appends (raft/ack_syncer.py):
        # it must not meet a roll half-way, when the active segment's fd closes.
        self._sync_lock = threading.Lock()
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        # Held by a compaction run and by replace_with: one rewrite at a time (and by a
        # reader that needs a complete range, see compacted_through).
        self.rewriting = threading.Lock()
        self.rewrites = 0
        """How many times segments were swapped (compactions, state installs): a reader
        that must see the log as it was at some moment compares it before and after."""
        self.compacted_through = 0
        """Records at or below this offset may have been removed (compacted, or never
        here after a state install); above it the log holds every record. After a
        restart, conservatively, the end of the last closed segment."""

    @classmethod
    def open(cls, directory: Path, config: StorageConfig) -> CommitLog:
        log = cls(directory, config)
        make_directories(directory)
        segment_swap.recover(directory)
        log._segments = log._load_segments()
        log._bases = [s.base_offset for s in log._segments]
        log.compacted_through = log._closed_end()
        return log

    def _closed_end(self) -> int:
        """The last offset of the closed segments (0 if none holds a record)."""
        for segment in reversed(self._segments[:-1]):
            if not segment.is_empty:
                return segment.last_offset
        return 0

    def _load_segments(self) -> list[Segment]:
        directory, config = self.directory, self._config
        for stale in directory.glob("*.tmp"):
            stale.unlink()
        paths = sorted(directory.glob("*" + LOG_SUFFIX))
        segments: list[Segment] = []
        for i, path in enumerate(paths):
            if not path.stem.isdigit():
                raise StorageError(f"unexpected file in the commit log directory: {path}")
            active = i == len(paths) - 1
            segments.append(
                Segment.open_existing(
                    path, config.index_interval_bytes, self._max_record_bytes, active
                )
            )
        if not segments:
            segments.append(self._create_segment(FIRST_OFFSET))
        for before, after in itertools.pairwise(segments):
            if (
                not before.is_empty
                and not after.is_empty
                and after.first_offset <= before.last_offset
            ):
                raise StorageError(
                    f"segments overlap: {before.log_path} ends at {before.last_offset}, "
                    f"{after.log_path} starts at {after.first_offset}"
                )
        return segments

    def _create_segment(self, base_offset: int) -> Segment:
        segment = Segment.create(
            self.directory,
            base_offset,
            self._config.index_interval_bytes,
            self._max_record_bytes,
        )
        fsync_directory(self.directory)
        return segment

    # -- positions ---------------------------------------------------------------

    @property
    def max_record_bytes(self) -> int:
        """The largest record this log accepts (framing included)."""
        return self._max_record_bytes

    @property
    def active(self) -> Segment:
        return self._segments[-1]

    @property
    def last_offset(self) -> int:
        """The highest offset in the log, 0 if it has no record."""
        for segment in reversed(self._segments):
            if not segment.is_empty:
                return segment.last_offset
        return 0

    @property
    def next_offset(self) -> int:
        """The offset the next appended record must have at least."""
        return max(self.active.base_offset, self.last_offset + 1)

    @property
    def first_offset(self) -> int:
        """The lowest offset in the log, 0 if it has no record."""
        for segment in self._segments:
            if not segment.is_empty:
                return segment.first_offset
        return 0

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    # -- writing -----------------------------------------------------------------

    def append(self, records: Sequence[Record]) -> None:
        """Append the records of one raft entry, offsets strictly increasing above
        the head, in one write; the last one carries the end-of-entry flag."""
        if not records:
            return
        encoded = encode_entry_records(records, self.next_offset - 1)
        if self.active.size >= self._config.segment_bytes:
            self.roll()
        self.active.append(encoded)
        if self._config.fsync is FsyncPolicy.ALWAYS:
            self.active.sync()

    def roll(self, base_offset: int | None = None) -> None:
        """Close the active segment and start a new one at the next offset (or above)."""
        if self.active.is_empty:
            return
        base = max(self.next_offset, base_offset or 0)
        with self._sync_lock:
            self.active.close()
            segment = self._create_segment(base)
            with self._lock:
                self._segments.append(segment)
                self._bases.append(base)
        logger.info("commit log rolled to segment %s", segment.log_path.name)

    def advance_to(self, next_offset: int) -> None:
        """Make ``next_offset`` the offset the next record gets, when it is above the head.

        Used after pulling a range whose last records compaction removed at the
        source: the offsets this node assigns next must be the ones every other
        replica assigns. A new active segment named by ``next_offset`` records it.
        """
        if next_offset <= self.next_offset:
            return
        if self.active.is_empty:
            with self._sync_lock, self._lock:
                old = self._segments.pop()
                self._bases.pop()
                old.close()
                old.log_path.unlink()
                old.index_path.unlink(missing_ok=True)
                segment = self._create_segment(next_offset)
                self._segments.append(segment)
                self._bases.append(next_offset)
        else:
            self.roll(base_offset=next_offset)

    @property
    def unsynced(self) -> bool:
        """Whether records were appended since the last sync."""
        return self.active.unsynced

    def replace_with(self, source: Path) -> None:
        """Swap every segment for the closed log in directory ``source`` (consumed).

        Only the apply thread calls this. A running compaction is waited for;
        a reader's next look at the segments finds the new ones (as after a
        compaction, it resumes after the last offset it yielded).
        """
        with self.rewriting, self._sync_lock:
            self.active.close()
            old = self.directory.with_name(self.directory.name + ".replaced")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(self.directory, old)
            os.replace(source, self.directory)
            fsync_directory(self.directory.parent)
            with self._lock:
                self._segments = self._load_segments()
                self._bases = [s.base_offset for s in self._segments]
                # an installed state has no history: nothing below its head is complete
                self.compacted_through = max(self.next_offset - 1, self._closed_end())
                self.rewrites += 1
            shutil.rmtree(old)

    def sync(self) -> None:
        """Make everything appended so far durable (safe from any thread)."""
        with self._sync_lock:
            self.active.sync()

    def close(self) -> None:
        """Fsync and release the active segment; the log must not be used afterwards."""
        self.active.close()

    # -- reading -----------------------------------------------------------------

    def closed_segments(self) -> list[Segment]:
        """The segments that are no longer appended to (what compaction may rewrite)."""
        with self._lock:
            return list(self._segments[:-1])

    def new_staged_segment(self, base_offset: int) -> Segment:
        """An empty segment in the staging directory, for compaction to fill."""
        staging = segment_swap.staging_dir(self.directory)
        staging.mkdir(exist_ok=True)
        return Segment.create(
            staging, base_offset, self._config.index_interval_bytes, self._max_record_bytes
        )

    def replace_closed(self, old: list[Segment], staged: list[Segment]) -> None:
        """Swap ``old`` (consecutive closed segments) for ``staged``, atomically."""
        for segment in staged:
            segment.close()
        with self._lock:
            at = self._segments.index(old[0]) if old and old[0] in self._segments else 0
            if self._segments[at : at + len(old)] != old or at + len(old) >= len(self._segments):
                raise RuntimeError("the closed segments changed during compaction")
        segment_swap.commit(
            self.directory,
            remove=[s.log_path.stem for s in old],
            install=[s.log_path.stem for s in staged],
        )
        installed = [
            Segment.open_existing(
                self.directory / s.log_path.name,
                self._config.index_interval_bytes,
                self._max_record_bytes,
                active=False,
            )
            for s in staged
        ]
        with self._lock:
            at = self._segments.index(old[0]) if old else 0
            self._segments[at : at + len(old)] = installed
            self._bases = [s.base_offset for s in self._segments]
            ends = [s.last_offset for s in old if not s.is_empty]
            self.compacted_through = max([self.compacted_through, *ends])
            self.rewrites += 1

    # -- reading -----------------------------------------------------------------

    def read(self, from_offset: int = FIRST_OFFSET) -> Iterator[Record]:
        """Records with offset >= ``from_offset`` in offset order.

        If ``from_offset`` itself is absent the first record is the next greater
        offset. Records appended while iterating may or may not be included. A
        compaction that replaces segments under a reader is survived: the
        reader resumes after the last offset it yielded in the new segments.
        """
        position = from_offset
        while True:
            try:
                for record in self._read_once(position):
                    position = record.offset + 1
                    yield record
                return
            except FileNotFoundError:
                continue  # a compaction removed the file: look at the segments again

    def _read_once(self, from_offset: int) -> Iterator[Record]:
        with self._lock:
            segments = list(self._segments)
            bases = list(self._bases)
        first = max(bisect.bisect_right(bases, from_offset) - 1, 0)
        for i in range(first, len(segments)):
            segment = segments[i]
            if segment.is_empty or segment.last_offset < from_offset:
                continue
            yield from segment.read_from(from_offset, segment.size)
