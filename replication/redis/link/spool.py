"""A disk-backed byte queue between one writer thread and one reader thread.

The master link's socket reader appends whatever the master sends (the RDB
payload, then the command stream) to a :class:`Spool`, and the consumer reads it
back at its own pace. Memory stays bounded whatever the speed difference: the
bytes live in temporary files in a directory the caller chooses (they pass
through the page cache, never through Python objects that pile up).

Design:

- The data is a chain of *segments*, each an anonymous temporary file
  (:func:`tempfile.TemporaryFile`: unlinked at once, so nothing is left behind
  even if the process dies). The writer appends to the last segment and starts
  a new one once it holds ``segment_bytes``; the reader frees a segment (closes
  it, which releases its disk space) as soon as it has read all of it and a
  newer one exists. Disk use is therefore about the unread backlog plus one
  segment.
- Every file operation happens under the spool's lock (positional
  ``os.pwrite``/``os.pread``, so the reader and the writer never share a file
  position), which also makes :meth:`Spool.close` safe against a concurrent
  read or write. Those are page-cache copies: the lock is held briefly.
- :meth:`Spool.read` blocks until at least one byte is available, the writer
  has finished (``b""``, or the writer's error once all data before it has
  been read), the spool was closed (its error at once) or the timeout expires
  (:class:`TimeoutError`).
- ``max_unread_bytes`` optionally bounds the unread backlog, so the disk holds
  at most that plus one segment. A write beyond it either raises
  :class:`SpoolFull` (the command stream: the link then fails, and the
  replicator stops with the bound named) or, with ``wait_when_full``, waits
  until the reader has made room (the RDB payload: the transfer then goes at
  the pace of the load; a close or finish wakes it up).

Nothing is made durable (no fsync): the spool is a buffer, and after a crash
the replicator asks the master again from its durable checkpoint.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections import deque
from typing import BinaryIO

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024


class SpoolFull(Exception):
    """The unread backlog would exceed the spool's ``max_unread_bytes``."""


class _Segment:
    __slots__ = ("file", "size")

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.size = 0


class Spool:
    """An append-only byte queue in temporary files: one writer, one reader."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        max_unread_bytes: int | None = None,
        wait_when_full: bool = False,
        prefix: str = "rkv-spool-",
    ) -> None:
        if segment_bytes < 1:
            raise ValueError("segment_bytes must be positive")
        if max_unread_bytes is not None and max_unread_bytes < 1:
            raise ValueError("max_unread_bytes must be positive")
        self._directory = os.fspath(directory)
        self._segment_bytes = segment_bytes
        self._max_unread = max_unread_bytes
        self._wait_when_full = wait_when_full
        self._writer_waiting = False
        self._prefix = prefix
        self._cond = threading.Condition()
        self._segments: deque[_Segment] = deque()
        self._read_pos = 0  # in the first segment
        self._written = 0
        self._consumed = 0
        self._finished = False
        self._closed = False
        self._error: BaseException | None = None

    @property
    def written(self) -> int:
        """Bytes appended so far."""
        return self._written

    @property
    def consumed(self) -> int:
        """Bytes read so far."""
        return self._consumed

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Append ``data`` (writer thread only); see the module docstring for a full spool."""
        view = memoryview(data).cast("B")
        if not view.nbytes:
            return
        with self._cond:
            if self._closed or self._finished:
                raise ValueError("write to a finished or closed spool")
            limit = self._max_unread
            if limit is not None and self._written - self._consumed + view.nbytes > limit:
                if not self._wait_when_full:
                    raise SpoolFull(f"more than {limit} bytes received and not read yet")
                while view.nbytes:
                    room = self._wait_for_room(limit)
                    self._append(view[:room])
                    view = view[room:]
                return
            self._append(view)

    def _wait_for_room(self, limit: int) -> int:
        """Block until the backlog is below ``limit``; how many bytes fit now."""
        while True:
            if self._closed or self._finished:
                raise ValueError("write to a finished or closed spool")
            room = limit - (self._written - self._consumed)
            if room > 0:
                return room
            self._writer_waiting = True
            self._cond.wait()

    def _append(self, view: memoryview) -> None:
        while view.nbytes:
            segment = self._segments[-1] if self._segments else None
            if segment is None or segment.size >= self._segment_bytes:
                # Closed when the reader is done with it, or by close().
                file = tempfile.TemporaryFile(dir=self._directory, prefix=self._prefix)  # noqa: SIM115
                segment = _Segment(file)
                self._segments.append(segment)
            room = self._segment_bytes - segment.size
            chunk = view[:room] if view.nbytes > room else view
            done = os.pwrite(segment.file.fileno(), chunk, segment.size)
            segment.size += done
            self._written += done
            view = view[done:]
        self._cond.notify_all()

    def finish(self, error: BaseException | None = None) -> None:
        """No more writes; readers get ``b""`` (or ``error``) after the data. First call wins."""
        with self._cond:
            if self._finished or self._closed:
                return
            self._finished = True
            self._error = error
            self._cond.notify_all()

    def close(self, error: BaseException) -> None:
        """Drop the data and free the files; reads raise ``error`` from now on."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            if not self._finished or self._error is None:
                self._error = error
            self._finished = True
            while self._segments:
                self._segments.popleft().file.close()
            self._cond.notify_all()

    def read(self, size: int, timeout: float | None = None) -> bytes:
        """Up to ``size`` bytes (reader thread only); see the module docstring."""
        if size <= 0:
            return b""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._closed:
                    assert self._error is not None
                    raise self._error
                data = self._read_available(size)
                if data:
                    return data
                if self._finished:
                    if self._error is not None:
                        raise self._error
                    return b""
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError("no data in the spool")
                self._cond.wait(remaining)

    def _read_available(self, size: int) -> bytes:
        while self._segments:
            head = self._segments[0]
            available = head.size - self._read_pos
            if available > 0:
                data = os.pread(head.file.fileno(), min(size, available), self._read_pos)
                self._read_pos += len(data)
                self._consumed += len(data)
                if self._writer_waiting:
                    self._writer_waiting = False
                    self._cond.notify_all()
                return data
            if len(self._segments) == 1:
                return b""
            # Fully read and no longer written to: free its disk space.
            self._segments.popleft().file.close()
            self._read_pos = 0
        return b""
