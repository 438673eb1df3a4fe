"""A snapshot streamed as it is read: the first bytes leave at once, nothing is staged.

:class:`SnapshotStream` writes the snapshot format (node/snapshot/format.py)
of one detached LMDB read view (node/storage/lmdb_store.py) on its own
thread into a queue of at most ``buffer_chunks`` chunks of ``chunk_bytes``;
the consumer (the HTTP route) takes them with :meth:`SnapshotStream.next_chunk`.
Memory is therefore bounded by the queue, the disk holds nothing, and a slow
reader slows the export instead of piling it up. ``rate_bytes`` throttles it
(bytes per second, 0: unlimited), so that a rebuild does not take the
source's disk and CPU from its clients.

The view stays open for the whole transfer, so LMDB keeps the pages it sees
until the stream ends; a map resize does not wait for it but interrupts it
(the stream then fails, and the reader retries). :meth:`cancel` (a client
that went away, a node shutting down) stops the thread at its next chunk.

A stream can hand its view on when it ends (:meth:`SnapshotStream.end`)
instead of closing it: the node holds it a while (node/snapshot/held.py), so
that a reader that was cut resumes after the last key it received, from the
same read view, with ``header`` and ``after`` (a part: node/snapshot/export.py),
and one that got everything lets it go.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import Any

from node.errors import ExportInterrupted
from node.snapshot.export import snapshot_header, write_snapshot
from node.snapshot.format import SnapshotHeader
from node.storage.lmdb_store import DetachedView

DEFAULT_CHUNK_BYTES = 1024 * 1024
DEFAULT_BUFFER_CHUNKS = 8
_PUT_POLL_SECONDS = 0.2
_END = b""


class StreamCancelled(Exception):
    """The stream was cancelled: the writing thread stops."""


class _Sink:
    """The file the snapshot writer writes to: fills chunks, hands them to the queue."""

    def __init__(self, stream: SnapshotStream) -> None:
        self._stream = stream
        self._buffer = bytearray()

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self._buffer += data
        size = self._stream.chunk_bytes
        start = 0
        with memoryview(self._buffer) as whole:
            while len(whole) - start >= size:
                self._stream._put(bytes(whole[start : start + size]))
                start += size
        del self._buffer[:start]
        return len(data)

    def flush(self) -> None:
        if self._buffer:
            chunk, self._buffer = bytes(self._buffer), bytearray()
            self._stream._put(chunk)


class SnapshotStream:
    def __init__(
        self,
        view: DetachedView,
        *,
        rate_bytes: int = 0,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        buffer_chunks: int = DEFAULT_BUFFER_CHUNKS,
        transfer_id: str = "",
        header: SnapshotHeader | None = None,
        after: bytes | None = None,
    ) -> None:
        self._view = view
        self.transfer_id = transfer_id
        self.after = after
        self._stopped = threading.Event()
        self._ending = threading.Lock()
        self._close_on_stop = False
        self._failed = False
        self.rate_bytes = rate_bytes
        self.chunk_bytes = chunk_bytes
        self._queue: queue.Queue[bytes | BaseException] = queue.Queue(buffer_chunks)
        self._cancelled = threading.Event()
        self._sent = 0
        self._started = time.monotonic()
        self.header = header or snapshot_header(view)
        self.applied_index = self.header.applied_index
        self.applied_offset = self.header.applied_offset
        self._thread = threading.Thread(target=self._write, name="rkv-snapshot", daemon=True)
        self._thread.start()

    # -- the consumer --------------------------------------------------------------

    def next_chunk(self, timeout: float | None = None) -> bytes:
        """The next chunk; b"" at the end. Raises what stopped the export
        (ExportInterrupted, an OSError...) and queue.Empty after ``timeout``."""
        item = self._queue.get(timeout=timeout)
        if isinstance(item, BaseException):
            raise item
        return item

    def cancel(self) -> None:
        """Stop the export (from any thread) without waiting; :meth:`end` then settles
        what becomes of the view."""
        self._cancelled.set()

    @property
    def sent_bytes(self) -> int:
        return self._sent

    # -- the writing thread --------------------------------------------------------

    def end(self, *, keep: bool, timeout: float = 2.0) -> DetachedView | None:
        """Stop the stream. With ``keep``, its view, still open, goes to the caller (who
        then owns it): even a stream sent whole may not have been received whole (the
        socket buffers took the last bytes), and its reader may come back for the
        rest. Otherwise, or when the view is no longer usable (the export failed, a
        resize asked for it), it is closed (by the writing thread if that has not
        stopped within ``timeout``) and None is returned."""
        self._cancelled.set()
        self._stopped.wait(timeout)
        with self._ending:
            if not self._stopped.is_set():
                self._close_on_stop = True  # the thread closes it when it stops
                return None
        if keep and not self._failed and not self._view.interrupted.is_set():
            return self._view
        self._view.close()
        return None

    def _write(self) -> None:
        sink = _Sink(self)
        try:
            write_snapshot(
                self._view,
                sink,  # type: ignore[arg-type]
                header=self.header,
                after=self.after,
            )
            sink.flush()
            self._put(_END)
        except StreamCancelled:
            pass  # the view stays open: end() decides
        except BaseException as exc:  # handed to the consumer, which reports it
            self._failed = True
            with contextlib.suppress(StreamCancelled):
                self._put_any(exc)
        finally:
            # Written whole or cut, the view stays open: end() decides.
            with self._ending:
                if self._failed or self._close_on_stop:
                    self._view.close()
                self._stopped.set()

    def _put(self, chunk: bytes) -> None:
        if self._view.interrupted.is_set():
            raise ExportInterrupted("the state changed size under the stream (LMDB map resize)")
        self._throttle(len(chunk))
        while True:
            if self._cancelled.is_set():
                raise StreamCancelled
            try:
                self._queue.put(chunk, timeout=_PUT_POLL_SECONDS)
                break
            except queue.Full:
                continue
        self._sent += len(chunk)

    def _put_any(self, item: Any) -> None:
        while not self._cancelled.is_set():
            try:
                self._queue.put(item, timeout=_PUT_POLL_SECONDS)
                return
            except queue.Full:
                continue
        raise StreamCancelled

    def _throttle(self, size: int) -> None:
        if self.rate_bytes <= 0:
            return
        due = self._started + (self._sent + size) / self.rate_bytes
        while (pause := due - time.monotonic()) > 0:
            if self._cancelled.wait(min(pause, _PUT_POLL_SECONDS)):
                raise StreamCancelled
