"""One segment of the commit log: a file of records and its sparse offset index.

A segment is named after the first offset it was created to hold
(``00000000000000000001.log``). While it is the active segment, records are
appended with one ``os.write`` per batch and its sparse index lives in memory;
when it is closed, the file is fsynced and the index is written beside it
(``.index``: big-endian ``(offset u64, position u64)`` pairs, one every
``index_interval_bytes``). A closed segment is never written again.

Finding an offset is a binary search in the sparse index followed by a short
forward scan; an offset that is not present yields the next greater one.

Memory: only the active segment's index is in memory (two arrays of u64, 16
bytes per ``index_interval_bytes`` of it, so at most 256 KiB for a 64 MiB
segment). A closed segment searches its index file with ``pread`` (its pages
are page cache, which the kernel reclaims), so a node's memory does not grow
with the size of its log.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import zlib
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from node.errors import CorruptLogError
from node.storage.record import BODY_HEADER, PREFIX, Record, decode_body, ends_entry

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
_INDEX_ENTRY = struct.Struct(">QQ")
_READ_BUFFER = 1024 * 1024


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class FrameError(Exception):
    """A record that cannot be read; ``torn`` when it can only be an unfinished write."""

    def __init__(self, position: int, reason: str, torn: bool) -> None:
        super().__init__(f"at byte {position}: {reason}")
        self.position = position
        self.reason = reason
        self.torn = torn


def iter_frames(
    f: BinaryIO, start: int, end: int, max_record_bytes: int
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(position, verified body)`` for each record between ``start`` and ``end``.

    Raises :class:`FrameError`. A damaged record is called torn only when it is
    the last thing in the file: a header or body cut short by the end, a
    checksum failure on the final record, or a zero-filled tail. Anything else
    is corruption.
    """
    f.seek(start)
    pos = start
    while pos < end:
        prefix = f.read(PREFIX.size)
        if len(prefix) < PREFIX.size or pos + PREFIX.size > end:
            raise FrameError(pos, "record header cut short by the end of the file", torn=True)
        length, crc = PREFIX.unpack(prefix)
        if length < BODY_HEADER.size or length > max_record_bytes:
            torn = prefix == bytes(PREFIX.size) and _rest_is_zero(f, pos + PREFIX.size, end)
            raise FrameError(pos, f"impossible record length {length}", torn=torn)
        if pos + PREFIX.size + length > end:
            raise FrameError(pos, "record body cut short by the end of the file", torn=True)
        body = f.read(length)
        if len(body) < length:
            raise FrameError(pos, "record body cut short by the end of the file", torn=True)
        if zlib.crc32(body) != crc:
            last = pos + PREFIX.size + length == end
            raise FrameError(pos, "checksum mismatch", torn=last)
        yield pos, body
        pos += PREFIX.size + length


def _rest_is_zero(f: BinaryIO, start: int, end: int) -> bool:
    f.seek(start)
    remaining = end - start
    while remaining > 0:
        chunk = f.read(min(remaining, _READ_BUFFER))
        if not chunk:
            return True
        if chunk.count(0) != len(chunk):
            return False
        remaining -= len(chunk)
    return True


class Segment:
    """A segment file; only the commit log creates, appends to and closes them."""

    def __init__(
        self,
        log_path: Path,
        base_offset: int,
        index_interval_bytes: int,
        max_record_bytes: int,
    ) -> None:
        self.log_path = log_path
        self.index_path = log_path.with_suffix(INDEX_SUFFIX)
        self.base_offset = base_offset
        self.size = 0
        self.first_offset = 0  # 0 while empty
        self.last_offset = 0
        self._interval = index_interval_bytes
        self._max_record_bytes = max_record_bytes
        self._index_offsets = array("Q")  # in memory while active (or being opened)
        self._index_positions = array("Q")
        self._disk_entries = 0  # closed: how many entries the index file holds
        self._last_indexed_position = -index_interval_bytes
        self._fd: int | None = None
        self._synced_size = 0
        self._inode = 0  # which file this object describes (a compaction may replace it)

    # -- opening ---------------------------------------------------------------

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, index_interval_bytes: int, max_record_bytes: int
    ) -> Segment:
        path = directory / (segment_name(base_offset) + LOG_SUFFIX)
        segment = cls(path, base_offset, index_interval_bytes, max_record_bytes)
        segment._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        segment._inode = os.fstat(segment._fd).st_ino
        return segment

    @classmethod
    def open_existing(
        cls, log_path: Path, index_interval_bytes: int, max_record_bytes: int, active: bool
    ) -> Segment:
        """Open a segment found on disk.

        The active segment is scanned whole: its index is rebuilt and a torn
        tail is truncated. A closed segment loads its index file and scans only
        the stretch after the last index entry (or everything if the index is
        missing or damaged). Damage that is not a torn tail raises
        :class:`CorruptLogError`.
        """
        base = int(log_path.stem)
        segment = cls(log_path, base, index_interval_bytes, max_record_bytes)
        stat = log_path.stat()
        file_size = stat.st_size
        segment._inode = stat.st_ino
        start = 0
        if not active and segment._load_index(file_size):
            start = segment._index_positions[-1]
        segment._scan(start, file_size, allow_torn_tail=active)
        if active:
            segment._fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
        else:
            if not segment.index_path.exists():
                segment._write_index()
            segment._leave_index_on_disk()
        return segment

    def _load_index(self, file_size: int) -> bool:
        try:
            raw = self.index_path.read_bytes()
        except FileNotFoundError:
            return False
        if not raw or len(raw) % _INDEX_ENTRY.size:
            logger.warning("rebuilding damaged index %s", self.index_path)
            return False
        offsets, positions = array("Q"), array("Q")
        for offset, position in _INDEX_ENTRY.iter_unpack(raw):
            if offsets and (offset <= offsets[-1] or position <= positions[-1]):
                logger.warning("rebuilding inconsistent index %s", self.index_path)
                return False
            offsets.append(offset)
            positions.append(position)
        if positions[-1] >= file_size:
            logger.warning("rebuilding inconsistent index %s", self.index_path)
            return False
        self._index_offsets, self._index_positions = offsets, positions
        self._last_indexed_position = positions[-1]
        self.first_offset = offsets[0]
        return True

    def _scan(self, start: int, file_size: int, allow_torn_tail: bool) -> None:
        if start == 0:
            self._index_offsets, self._index_positions = array("Q"), array("Q")
            self._last_indexed_position = -self._interval
        loaded = len(self._index_offsets)
        valid_end = entry_end = start
        with open(self.log_path, "rb", buffering=_READ_BUFFER) as f:
            try:
                for pos, body in iter_frames(f, start, file_size, self._max_record_bytes):
                    offset = BODY_HEADER.unpack_from(body, 0)[0]
                    self._note_record(offset, pos)
                    valid_end = pos + PREFIX.size + len(body)
                    if ends_entry(body):
                        entry_end = valid_end
            except FrameError as exc:
                if not (allow_torn_tail and exc.torn):
                    raise CorruptLogError(self.log_path, exc.position, exc.reason) from exc
                logger.warning(
                    "truncating torn tail of %s: %d bytes from byte %d (%s)",
                    self.log_path,
                    file_size - exc.position,
                    exc.position,
                    exc.reason,
                )
                os.truncate(self.log_path, exc.position)
        self.size = valid_end
        if not allow_torn_tail and start and len(self._index_offsets) > loaded:
            self.index_path.unlink(missing_ok=True)  # it lacks entries: written anew
        if allow_torn_tail and entry_end < valid_end:
            logger.warning(
                "dropping an incomplete raft entry at the tail of %s: %d bytes from byte %d "
                "(raft will deliver the entry again)",
                self.log_path,
                valid_end - entry_end,
                entry_end,
            )
            os.truncate(self.log_path, entry_end)
            self.first_offset = self.last_offset = 0
            self._scan(0, entry_end, allow_torn_tail=False)

    def _note_record(self, offset: int, position: int) -> None:
        if self.first_offset == 0:
            self.first_offset = offset
        if offset <= self.last_offset:
            raise CorruptLogError(
                self.log_path, position, f"offset {offset} after {self.last_offset}"
            )
        self.last_offset = offset
        if position - self._last_indexed_position >= self._interval:
            self._index_offsets.append(offset)
            self._index_positions.append(position)
            self._last_indexed_position = position

    # -- writing ---------------------------------------------------------------

    def append(self, records: Sequence[tuple[int, bytes]]) -> None:
        """Append ``(offset, encoded record)`` pairs with one write.

        If the write fails (a full disk), the file is cut back to where it was,
        so a later append never lands after half a batch.
        """
        if self._fd is None:
            raise RuntimeError(f"segment {self.log_path} is closed for appends")
        data = b"".join(d for _, d in records)
        try:
            written = os.write(self._fd, data)
            while written < len(data):  # os.write may write less than asked
                written += os.write(self._fd, data[written:])
        except OSError:
            os.ftruncate(self._fd, self.size)
            raise
        position = self.size
        for offset, encoded in records:
            self._note_record(offset, position)
            position += len(encoded)
        self.size = position

    @property
    def unsynced(self) -> bool:
        """Whether bytes were appended since the last sync."""
        return self._fd is not None and self.size != self._synced_size

    def sync(self) -> None:
        # fdatasync: the data and the file size, not timestamps.
        if self._fd is not None and self.size != self._synced_size:
            size = self.size
            os.fdatasync(self._fd)
            self._synced_size = size

    def abandon(self) -> None:
        """Close the file without syncing it or writing an index: a staged segment of a
        compaction that failed (a full disk), about to be deleted."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        """Stop appending: fsync the file and write its index."""
        if self._fd is None:
            return
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = None
        self._write_index()
        self._leave_index_on_disk()

    def _leave_index_on_disk(self) -> None:
        """A closed segment's index is searched in its file from now on."""
        self._disk_entries = len(self._index_offsets)
        self._index_offsets, self._index_positions = array("Q"), array("Q")

    def _write_index(self) -> None:
        tmp = self.index_path.with_suffix(INDEX_SUFFIX + ".tmp")
        data = b"".join(
            _INDEX_ENTRY.pack(o, p)
            for o, p in zip(self._index_offsets, self._index_positions, strict=True)
        )
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.index_path)

    # -- reading ---------------------------------------------------------------

    @property
    def is_empty(self) -> bool:
        return self.first_offset == 0

    @property
    def index_entries(self) -> int:
        return self._disk_entries or len(self._index_offsets)

    def position_for(self, offset: int) -> int:
        """Byte position of the last indexed record at or before ``offset``."""
        if not self._disk_entries:
            i = bisect.bisect_right(self._index_offsets, offset) - 1
            return self._index_positions[i] if i >= 0 else 0
        fd = os.open(self.index_path, os.O_RDONLY)
        try:
            low, high = 0, self._disk_entries  # the first entry above offset is in [low, high]
            while low < high:
                middle = (low + high) // 2
                if self._entry(fd, middle)[0] <= offset:
                    low = middle + 1
                else:
                    high = middle
            return self._entry(fd, low - 1)[1] if low else 0
        finally:
            os.close(fd)

    def _entry(self, fd: int, i: int) -> tuple[int, int]:
        raw = os.pread(fd, _INDEX_ENTRY.size, i * _INDEX_ENTRY.size)
        if len(raw) != _INDEX_ENTRY.size:
            raise FileNotFoundError(f"{self.index_path} was replaced by a compaction")
        offset, position = _INDEX_ENTRY.unpack(raw)
        return int(offset), int(position)

    def _indexed_positions(self, count: int) -> list[int]:
        """About ``count`` indexed positions spread evenly over the segment."""
        entries = self.index_entries
        if not entries:
            return []
        step = max(1, entries // count)
        if not self._disk_entries:
            return list(self._index_positions[::step])
        fd = os.open(self.index_path, os.O_RDONLY)
        try:
            return [self._entry(fd, i)[1] for i in range(0, entries, step)]
        finally:
            os.close(fd)

    def raw_records(self) -> Iterator[tuple[int, bytes]]:
        """Every record as (file position, verified frame bytes), read in large blocks:
        for copying records without decoding them (compaction)."""
        with open(self.log_path, "rb", buffering=0) as f:
            if os.fstat(f.fileno()).st_ino != self._inode:
                raise FileNotFoundError(f"{self.log_path} was replaced by a compaction")
            buffer = b""
            base = 0  # file position of buffer[0]
            end = self.size
            while base < end:
                block = f.read(min(_READ_BUFFER, end - base - len(buffer)))
                if not block and len(buffer) < end - base:
                    raise CorruptLogError(self.log_path, base, "segment shorter than recorded")
                buffer += block
                at = 0
                while len(buffer) - at >= PREFIX.size:
                    length, crc = PREFIX.unpack_from(buffer, at)
                    stop = at + PREFIX.size + length
                    if length < BODY_HEADER.size or length > self._max_record_bytes:
                        raise CorruptLogError(
                            self.log_path, base + at, f"impossible record length {length}"
                        )
                    if stop > len(buffer):
                        break
                    frame = buffer[at:stop]
                    if zlib.crc32(memoryview(frame)[PREFIX.size :]) != crc:
                        raise CorruptLogError(self.log_path, base + at, "checksum mismatch")
                    yield base + at, frame
                    at = stop
                if at == 0 and not block:
                    raise CorruptLogError(self.log_path, base, "record cut short")
                buffer = buffer[at:]
                base += at

    def sample(self, count: int) -> Iterator[bytes]:
        """The verified bodies of about ``count`` records spread evenly over the file by
        bytes (records at indexed positions): what compaction estimates a segment's
        droppable share from without reading it all."""
        positions = self._indexed_positions(count)
        if not positions:
            return
        with open(self.log_path, "rb", buffering=0) as f:
            if os.fstat(f.fileno()).st_ino != self._inode:
                raise FileNotFoundError(f"{self.log_path} was replaced by a compaction")
            for position in positions:
                try:
                    _, body = next(iter_frames(f, position, self.size, self._max_record_bytes))
                except FrameError as exc:
                    raise CorruptLogError(self.log_path, exc.position, exc.reason) from exc
                except StopIteration:
                    return
                yield body

    def read_from(self, offset: int, end: int | None = None) -> Iterator[Record]:
        """Records with offsets >= ``offset`` up to byte ``end`` (default: current size)."""
        stop = self.size if end is None else end
        start = self.position_for(offset)
        with open(self.log_path, "rb", buffering=_READ_BUFFER) as f:
            if os.fstat(f.fileno()).st_ino != self._inode:
                # A compaction replaced this segment's file: the caller looks again.
                raise FileNotFoundError(f"{self.log_path} was replaced by a compaction")
            frames = iter_frames(f, start, stop, self._max_record_bytes)
            while True:
                try:
                    position, body = next(frames)
                except StopIteration:
                    return
                except FrameError as exc:
                    raise CorruptLogError(self.log_path, exc.position, exc.reason) from exc
                if BODY_HEADER.unpack_from(body, 0)[0] < offset:
                    continue
                try:
                    record = decode_body(body)
                except ValueError as exc:
                    raise CorruptLogError(self.log_path, position, str(exc)) from exc
                yield record
