"""pysyncobj's journal with the entries on disk only, compactable by bytes.

pysyncobj 0.3.17's FileJournal writes each entry to a memory-mapped file and
also keeps every entry in a Python list: a node's memory grows with the bytes
of its uncompacted journal (5,000 entries of 1.4 MB are 7 GB). This journal
writes the same file format (an existing journal opens unchanged, and one it
wrote opens in pysyncobj's own class) and keeps in memory only three machine
words per entry: where the entry starts in the file, its index and its term.
An entry's command is read back from the mapping when pysyncobj asks for it
(when it sends entries to a follower, or applies them).

:attr:`DiskJournal.size_bytes` is what the journal holds; raft/consensus.py
asks pysyncobj for a compaction (a raft marker) when it passes the
``compaction_bytes`` setting, so the file stays near that size whatever the
size of entries. The file grows with its blocks allocated (``posix_fallocate``),
so a full disk is an OSError (ENOSPC) from :meth:`DiskJournal.add`, not a
SIGBUS on the next write to the mapping.

File layout (pysyncobj's): a 40-byte header (application name, version,
format 1, the offset past the last record), then records
``size u32 | index u64 | term u64 | command | size u32`` (little-endian, size
counting the index, term and command).
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import struct
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any, overload

from pysyncobj.journal import (
    APP_NAME,
    APP_VERSION,
    FIRST_RECORD_OFFSET,
    JOURNAL_FORMAT_VERSION,
    LAST_RECORD_OFFSET_OFFSET,
    NAME_SIZE,
    VERSION_SIZE,
    Journal,
)

from node.storage.datadir import fsync_directory
from raft.meta_file import DurableMeta

logger = logging.getLogger(__name__)

_FIRST: int = FIRST_RECORD_OFFSET
_END_FIELD: int = LAST_RECORD_OFFSET_OFFSET
_SIZE = struct.Struct("<I")
_INDEX_TERM = struct.Struct("<QQ")
_INITIAL_BYTES = 1024 * 1024
_GROWTH_STEP = 64 * 1024
_MAX_FILE_BYTES = 2**32 - 1  # the header stores the end offset in 32 bits
Entry = tuple[bytes, int, int]


def _default_header() -> bytes:
    name = bytes(APP_NAME).ljust(int(NAME_SIZE), b"\0")
    version = bytes(APP_VERSION).ljust(int(VERSION_SIZE), b"\0")
    return name + version + struct.pack("<II", JOURNAL_FORMAT_VERSION, FIRST_RECORD_OFFSET)


class EntryView:
    """Entries ``start``..``stop`` of a journal, read from the file one at a time.

    What a slice of the journal gives pysyncobj: it iterates it (applying entries),
    looks at its first entries, or slices it again, and a slice of the view is a
    plain list (pysyncobj pickles it to send it), so a follower far behind costs a
    batch of entries in memory, not the whole journal."""

    def __init__(self, journal: DiskJournal, start: int, stop: int) -> None:
        self._journal = journal
        self._start = start
        self._stop = max(start, stop)

    def __len__(self) -> int:
        return self._stop - self._start

    def __bool__(self) -> bool:
        return self._stop > self._start

    def __iter__(self) -> Iterator[Entry]:
        for position in range(self._start, self._stop):
            yield self._journal.read_entry(position)

    def __reversed__(self) -> Iterator[Entry]:
        for position in range(self._stop - 1, self._start - 1, -1):
            yield self._journal.read_entry(position)

    @overload
    def __getitem__(self, item: int) -> Entry: ...

    @overload
    def __getitem__(self, item: slice) -> list[Entry]: ...

    def __getitem__(self, item: int | slice) -> Entry | list[Entry]:
        if isinstance(item, slice):
            positions = range(self._start, self._stop)[item]
            return [self._journal.read_entry(position) for position in positions]
        length = self._stop - self._start
        if item < 0:
            item += length
        if not 0 <= item < length:
            raise IndexError("entry view index out of range")
        return self._journal.read_entry(self._start + item)


def _allocate(fd: int, size: int, new_size: int) -> None:
    """Grow the file to ``new_size`` with its blocks allocated: a page of the mapping
    past what the disk could hold would kill the process with SIGBUS when written,
    where this raises OSError (ENOSPC) and leaves the file as it was."""
    try:
        os.posix_fallocate(fd, size, new_size - size)
    except OSError as error:
        os.ftruncate(fd, size)  # a partial allocation may have grown it
        if error.errno not in (errno.EOPNOTSUPP, errno.ENOTSUP):
            raise
        # A filesystem that cannot allocate ahead (some FUSE and network ones): grow
        # the file sparse, as before (a full disk is then a SIGBUS, not ENOSPC).
        os.ftruncate(fd, new_size)


class JournalFullError(OSError):
    """The journal file would pass 4 GiB, the format's limit (compaction did not keep up)."""


class DiskJournal(Journal):  # type: ignore[misc]
    """pysyncobj's Journal interface over one memory-mapped file (see the module docs)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._directory = Path(os.path.abspath(path)).parent
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.write(_default_header())
                f.flush()
                os.fsync(f.fileno())
            fsync_directory(self._directory)  # the new file's name, durable
        self._file = open(path, "r+b")  # noqa: SIM115 (held open for the mapping)
        size = os.fstat(self._file.fileno()).st_size
        if size < _INITIAL_BYTES:
            _allocate(self._file.fileno(), size, _INITIAL_BYTES)
        self._map = mmap.mmap(self._file.fileno(), 0)
        self._starts = array("Q")
        self._indexes = array("Q")
        self._terms = array("Q")
        self._last_read: tuple[tuple[int, int], Entry] | None = None
        version = _SIZE.unpack_from(self._map, _END_FIELD - 4)[0]
        if version != JOURNAL_FORMAT_VERSION:
            raise ValueError(f"{path}: journal format {version}, not {JOURNAL_FORMAT_VERSION}")
        self._end: int = self._read_records(_SIZE.unpack_from(self._map, _END_FIELD)[0])
        self._meta_storer = DurableMeta(path + ".meta")
        self._meta: dict[str, Any] = self._meta_storer.getMeta()
        self._meta_saved = True

    def _read_records(self, end: int) -> int:
        """Index the records up to ``end``; returns where the last whole one ends.

        A record that does not hold together (its two size fields differ, it runs
        past the end or the file, its index does not follow the previous one, its term
        goes back) and everything after it are dropped, with a warning: the disk
        wrote back the end offset before the record's pages when the power was cut.
        Such records were never fsynced, so no acknowledgement depended on them."""
        offset = _FIRST
        limit = min(end, len(self._map))
        previous: tuple[int, int] | None = None
        while offset < limit:
            size = _SIZE.unpack_from(self._map, offset)[0]
            stop = offset + 4 + size
            if size < _INDEX_TERM.size or stop + 4 > limit:
                break
            index, term = _INDEX_TERM.unpack_from(self._map, offset + 4)
            if _SIZE.unpack_from(self._map, stop)[0] != size:
                break
            if previous is not None and (index != previous[0] + 1 or term < previous[1]):
                break
            previous = (index, term)
            self._starts.append(offset)
            self._indexes.append(index)
            self._terms.append(term)
            offset = stop + 4
        if offset != end:
            logger.warning(
                "%s: the journal's end offset is %d but its records hold together only "
                "to %d: dropped the torn tail (never fsynced, so never acknowledged)",
                self._path,
                end,
                offset,
            )
            self._set_end(offset)
            self._map.flush(0, mmap.PAGESIZE)
        return offset

    # -- what pysyncobj reads ------------------------------------------------------

    def __len__(self) -> int:
        return len(self._starts)

    @overload
    def __getitem__(self, item: int) -> Entry: ...

    @overload
    def __getitem__(self, item: slice) -> EntryView: ...

    def __getitem__(self, item: int | slice) -> Entry | EntryView:
        if isinstance(item, slice):
            start, stop, step = item.indices(len(self._starts))
            if step != 1:
                raise ValueError("journal slices have no step")
            return EntryView(self, start, stop)
        if item < 0:
            item += len(self._starts)
        if not 0 <= item < len(self._starts):
            raise IndexError("journal index out of range")
        return self.read_entry(item)

    def read_entry(self, position: int) -> Entry:
        """Entry ``position`` (0 is the oldest kept) as (command, index, term).

        The last entry read is kept (one entry: bounded by the entry size): pysyncobj
        asks for the newest entry's index again for every chunk it sends of a large
        entry, and each read copies the whole command out of the map."""
        identity = (self._indexes[position], self._terms[position])
        last = self._last_read
        if last is not None and last[0] == identity:
            return last[1]
        start = self._starts[position]
        size = _SIZE.unpack_from(self._map, start)[0]
        command = self._map[start + 4 + _INDEX_TERM.size : start + 4 + size]
        entry = (command, identity[0], identity[1])
        self._last_read = (identity, entry)
        return entry

    @property
    def size_bytes(self) -> int:
        """The bytes of the records the journal holds."""
        return self._end - _FIRST

    # -- what pysyncobj writes -----------------------------------------------------

    def add(self, command: bytes | str, idx: int, term: int) -> None:
        data = command.encode() if isinstance(command, str) else bytes(command)
        size = _INDEX_TERM.size + len(data)
        start = self._end
        self._reserve(start + size + 8)
        _SIZE.pack_into(self._map, start, size)
        _INDEX_TERM.pack_into(self._map, start + 4, idx, term)
        self._map[start + 4 + _INDEX_TERM.size : start + 4 + size] = data
        _SIZE.pack_into(self._map, start + 4 + size, size)
        self._starts.append(start)
        self._indexes.append(idx)
        self._terms.append(term)
        self._set_end(start + size + 8)

    def clear(self) -> None:
        """Drop every entry (pysyncobj installs a raft marker): the marker's rename is
        made durable first, so a power cut never leaves an empty journal beside the
        previous marker."""
        fsync_directory(self._directory)
        self._last_read = None
        del self._starts[:], self._indexes[:], self._terms[:]
        self._set_end(_FIRST)

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        if entryFrom >= len(self._starts):
            return
        end = self._starts[entryFrom] if entryFrom > 0 else _FIRST
        self._last_read = None  # a later add may reuse an index and term
        del self._starts[entryFrom:], self._indexes[entryFrom:], self._terms[entryFrom:]
        self._set_end(end)

    def deleteEntriesTo(self, entryTo: int) -> None:
        """Drop the first ``entryTo`` entries (a raft marker now covers them): the rest
        move to the file's start (a memmove inside the mapping, never a copy through
        Python objects).

        Safe against a power cut at any point, in this order: the marker's rename is
        made durable first (pysyncobj renames it into place without a directory
        fsync); then an empty journal (end offset at the first record) reaches the
        disk before any byte moves; then the moved records; then the new end offset.
        The disk writes dirty pages back in any order, so without the syncs a cut
        could leave the old end offset over moved bytes (a torn journal). A cut
        before the last step leaves an empty journal, which pysyncobj refills from
        the marker and the leader."""
        if entryTo <= 0:
            return
        if entryTo >= len(self._starts):
            self.clear()
            return
        first = self._starts[entryTo]
        shift = first - _FIRST
        kept = self._end - first
        fsync_directory(self._directory)
        self._set_end(_FIRST)
        self._map.flush(0, mmap.PAGESIZE)
        self._map.move(_FIRST, first, kept)
        self._map.flush()
        del self._starts[:entryTo], self._indexes[:entryTo], self._terms[:entryTo]
        self._starts = array("Q", (start - shift for start in self._starts))
        self._set_end(_FIRST + kept)
        self._map.flush(0, mmap.PAGESIZE)

    def flush(self) -> None:
        self._map.flush()

    def fileno(self) -> int:
        return self._file.fileno()

    def _destroy(self) -> None:
        self._map.flush()
        self._map.close()
        self._file.close()

    # -- raft's persistent state (pysyncobj's meta file, unchanged) --------------

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        self._meta["raftCommitIndex"] = raftCommitIndex
        self._meta_saved = False

    def getRaftCommitIndex(self) -> int:
        return int(self._meta.get("raftCommitIndex", 1))

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        self._meta["currentTerm"] = term
        self._meta["votedForNodeId"] = votedForNodeId
        self._meta_storer.storeMeta(self._meta)
        self._meta_saved = True

    def getCurrentTerm(self) -> int:
        return int(self._meta.get("currentTerm", 0))

    def getVotedForNodeId(self) -> Any:
        return self._meta.get("votedForNodeId")

    def onOneSecondTimer(self) -> None:
        if not self._meta_saved:
            self._meta_storer.storeMeta(self._meta)
            self._meta_saved = True

    # -- the file ------------------------------------------------------------------

    def _set_end(self, end: int) -> None:
        _SIZE.pack_into(self._map, _END_FIELD, end)
        self._end = end

    def _reserve(self, needed: int) -> None:
        if needed > _MAX_FILE_BYTES:
            raise JournalFullError(
                f"{self._path}: the raft journal would pass 4 GiB; lower --raft-compaction-bytes"
            )
        size = len(self._map)
        if needed <= size:
            return
        new_size = min(max(needed, size * 2), _MAX_FILE_BYTES)
        self._map.flush()
        try:
            _allocate(self._file.fileno(), size, new_size)
        except OSError:
            # Doubling does not fit (a nearly full disk): grow by what is needed only,
            # so the journal can go on once a little space is freed.
            new_size = min(-(-needed // _GROWTH_STEP) * _GROWTH_STEP, _MAX_FILE_BYTES)
            _allocate(self._file.fileno(), size, new_size)
        self._map.resize(new_size)
