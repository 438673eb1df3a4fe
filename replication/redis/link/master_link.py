"""The replica side of the Redis replication protocol: one connection to a master.

:class:`MasterLink` connects to a Redis master as a replica would and turns the
connection into what the replicator needs: the RDB payload of a full sync as a
readable binary stream, then the replicated commands, each with the
replication offset reached after it.

Protocol (Redis 7; an offset counts bytes of the master's replication stream):

1. Handshake (:mod:`.handshake`): ``AUTH``, ``PING``, ``REPLCONF
   listening-port``, ``REPLCONF capa eof capa psync2``, then ``PSYNC <replid>
   <next offset>`` (next offset = last processed offset + 1) or ``PSYNC ? -1``.
2. ``+FULLRESYNC <replid> <offset>``: the RDB that follows holds the data up to
   ``<offset>``; the first byte of the command stream after it has offset
   ``<offset> + 1``. ``+CONTINUE [<new replid>]``: the stream resumes at the
   requested offset (under the new replid after a failover).
3. Full sync only: bare ``\\n`` keep-alives while the master prepares the RDB,
   then the payload, either ``$<length>\\r\\n`` and that many bytes (disk form)
   or ``$EOF:<40 byte mark>\\r\\n``, the data and the mark again (diskless
   form: the payload ends right before the final mark, which may arrive split
   across reads; the master sends nothing after it until it gets our first
   ACK, see 5, so the payload is complete exactly when the bytes received so
   far end with the mark).
4. The command stream: RESP arrays of bulk strings, forever. Every byte counts
   toward the offset, including the master's ``PING`` (every
   ``repl-ping-replica-period``), ``SELECT``, ``MULTI``/``EXEC`` and
   ``REPLCONF GETACK *``. The processed offset after a command is the stream's
   start offset plus the bytes of all commands so far; since the master's
   encoding is canonical, a command's bytes are those of its re-encoding
   (:func:`.resp.command_size`).
5. ``REPLCONF ACK <offset>`` (no reply) from the replica: right after the
   payload (in the diskless form the master starts the command stream only
   after this first ACK: without it, both sides would wait forever), every
   ``ack_interval`` seconds (the master drops replicas silent for
   ``repl-timeout``, 60 s), and at once when the stream contains ``REPLCONF
   GETACK`` (which ``WAIT`` sends). The offset is what the caller's
   ``durable_offset`` returns, the end of what is durably committed
   downstream, not what was received: ``WAIT n`` on the master then means
   "in rkv".

Threading model. :meth:`MasterLink.start` does the handshake on the calling
thread and then starts two daemon threads:

- the *reader* reads the socket continuously, whatever the consumer does,
  and appends the bytes to disk-backed spools (:mod:`.spool`: temporary files
  in the caller's directory, consumed parts freed as they are read): the
  payload to one, the command stream to another. It follows the stream's
  headers (:mod:`.framing`) to refuse a command larger than
  ``max_command_bytes`` before it is spooled and to answer GETACK at once.
  Because it never waits for the consumer, a slow consumer cannot make the
  master's output buffer for this replica grow until
  ``client-output-buffer-limit replica`` cuts the link: the backlog waits on
  local disk, with bounded memory;
- the *acker* sends the periodic ACK. Socket writes (acker, reader answering
  GETACK, :meth:`MasterLink.send_ack`) are serialized by a lock.

The consumer (one thread) reads the payload from :attr:`SyncResult.payload`, a
buffered binary stream: it may read while the transfer is still going on (a
read blocks until data arrives) or after; ``b""`` marks the end of a complete
payload. Then it reads the commands with :meth:`MasterLink.read_command` or
:meth:`MasterLink.commands`: every command the master sent, in order,
including PING, REPLCONF and SELECT (:attr:`ReplicatedCommand.is_control` flags
the first two), each with ``end_offset``, the offset after its last byte: the
offset to checkpoint once its effects are committed, to resume later with
``PSYNC <replid> <end_offset + 1>``. If the connection dies, every complete
command received before is still delivered, then :class:`RedisLinkError` is
raised (``retryable`` says whether reconnecting makes sense); a silent dead
connection is detected by the read timeout (default 60 s; the master pings
every 10 s by default). One link is one connection: to reconnect, make a new one.
"""

from __future__ import annotations

import contextlib
import io
import logging
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING

import hiredis

from .framing import DEFAULT_MAX_COMMAND_BYTES, CommandFramer
from .handshake import Connection, MasterClosedConnection, handshake
from .resp import RespProtocolError, as_command, command_size, encode_command
from .spool import DEFAULT_SEGMENT_BYTES, Spool, SpoolFull
from .types import (
    REPLID,
    LimitExceeded,
    LinkClosed,
    MasterAddress,
    RedisLinkError,
    ReplicatedCommand,
    SyncResult,
)

if TYPE_CHECKING:
    import os

    from _typeshed import WriteableBuffer

__all__ = [
    "DEFAULT_MAX_COMMAND_BYTES",
    "DEFAULT_MAX_SPOOL_BYTES",
    "LimitExceeded",
    "LinkClosed",
    "MasterAddress",
    "MasterLink",
    "ProgressCallback",
    "RedisLinkError",
    "ReplicatedCommand",
    "SyncResult",
]

log = logging.getLogger(__name__)

EOF_MARK_BYTES = 40
DEFAULT_MAX_SPOOL_BYTES = 4 * 1024 * 1024 * 1024
"""Bytes received and not yet processed that may wait on disk (each spool)."""

ProgressCallback = Callable[[int, int | None], None]
"""``progress(received_bytes, total_bytes_or_None)`` while the payload arrives."""


class MasterLink:
    """One replica connection to a Redis master (see the module docstring).

    ``durable_offset`` returns the offset of the last byte of this link's stream
    whose effects are durably committed downstream, or None while there is none
    (during a full sync, until the payload is loaded: the ACK then says 0). It
    is called from the link's threads, so it must be thread-safe and quick.
    The offset acknowledged is never above the last delivered ``end_offset``.
    Count PING and REPLCONF commands as done when they are reached: a ``WAIT``
    on the master waits for the offset it has when called, which includes the
    ``REPLCONF GETACK`` that earlier WAITs put into the stream.

    ``progress`` is called from the reader thread as the payload arrives
    (the total is None in the diskless form).

    ``listening_port`` is the port announced with ``REPLCONF listening-port``:
    0 by default, an address nobody can connect to, so that Redis Sentinel,
    which learns the replicas from the master's ``INFO``, lists the link as
    a replica that is down and never promotes it (docs/REDIS.md).

    Bounds on what the master sends (a master, or anyone in between, may send
    anything): a command of the stream larger than ``max_command_bytes`` (see
    :mod:`.framing`) fails the link with :class:`LimitExceeded`, before any of
    it is spooled. ``max_spool_bytes`` bounds each spool's unread bytes (so the
    disk holds at most about that, plus one segment): the payload's transfer
    waits for the consumer to read; a command backlog beyond it fails the link
    with :class:`LimitExceeded` (the consumer is too far behind).
    """

    def __init__(
        self,
        address: MasterAddress,
        spool_dir: str | os.PathLike[str],
        durable_offset: Callable[[], int | None],
        *,
        listening_port: int = 0,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
        ack_interval: float = 1.0,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        max_spool_bytes: int = DEFAULT_MAX_SPOOL_BYTES,
        max_command_bytes: int = DEFAULT_MAX_COMMAND_BYTES,
        chunk_bytes: int = 256 * 1024,
        progress: ProgressCallback | None = None,
    ) -> None:
        self.address = address
        self._durable_offset = durable_offset
        self._listening_port = listening_port
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._ack_interval = ack_interval
        self._chunk_bytes = chunk_bytes
        self._progress = progress
        self._max_spool_bytes = max_spool_bytes
        self._framer = CommandFramer(max_command_bytes)
        # Segments small next to the bound, so that it bounds the disk too.
        segment_bytes = min(segment_bytes, max(64 * 1024, max_spool_bytes // 8))
        self._payload_spool = Spool(
            spool_dir,
            segment_bytes=segment_bytes,
            max_unread_bytes=max_spool_bytes,
            wait_when_full=True,
            prefix="rkv-rdb-",
        )
        self._command_spool = Spool(
            spool_dir,
            segment_bytes=segment_bytes,
            max_unread_bytes=max_spool_bytes,
            prefix="rkv-stream-",
        )
        self._conn: Connection | None = None
        self._lock = threading.Lock()  # state changes, the thread list
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._state = "new"
        self._error: RedisLinkError | None = None
        self._closed = False
        self._acks_enabled = False
        self._replid = ""
        self._received_offset = 0
        self._delivered_offset = 0
        self._parser = hiredis.Reader()

    # -- public API ----------------------------------------------------------------

    @property
    def state(self) -> str:
        """new, handshake, transfer (full sync payload), streaming, failed or closed."""
        return self._state

    @property
    def error(self) -> RedisLinkError | None:
        """Why the link failed, or None."""
        return self._error

    @property
    def replid(self) -> str:
        """The replication id of the stream (after :meth:`start`)."""
        return self._replid

    @property
    def local_port(self) -> int:
        """The local TCP port of the connection (0 before :meth:`start`)."""
        return 0 if self._conn is None else self._conn.local_port

    @property
    def received_offset(self) -> int:
        """Offset of the last stream byte received (and spooled)."""
        return self._received_offset

    @property
    def delivered_offset(self) -> int:
        """``end_offset`` of the last command delivered to the consumer."""
        return self._delivered_offset

    def start(self, replid: str | None = None, next_offset: int = -1) -> SyncResult:
        """Connect, handshake and send ``PSYNC replid next_offset`` (or ``PSYNC ? -1``).

        Raises :class:`RedisLinkError` if the master cannot be reached or refuses.
        """
        if self._state != "new":
            raise RuntimeError("a MasterLink starts once; make a new one to reconnect")
        if replid is not None and (not REPLID.fullmatch(replid) or next_offset < 1):
            raise ValueError("PSYNC needs a 40-character replid and a next offset >= 1")
        self._state = "handshake"
        try:
            conn = Connection.open(
                self.address, self._connect_timeout, self._read_timeout, self._chunk_bytes
            )
        except RedisLinkError:
            self._state = "failed"
            raise
        self._conn = conn
        try:
            reply = handshake(conn, self.address, replid, next_offset, self._listening_port)
        except Exception as exc:
            self._state = "failed"
            conn.close()
            if isinstance(exc, RedisLinkError):
                raise
            raise self._translate(exc, "handshake") from exc
        kind = "full" if reply.full else "partial"
        log.info("%s sync from %s: replid %s offset %d", kind, self.address, *reply[1:])
        self._replid = reply.replid
        self._received_offset = self._delivered_offset = reply.offset
        self._state = "transfer" if reply.full else "streaming"
        payload = None
        if reply.full:
            payload = io.BufferedReader(_PayloadReader(self._payload_spool), 256 * 1024)
        self._spawn(self._run_reader, "reader", reply.full)
        return SyncResult(reply.full, reply.replid, reply.offset, payload)

    def read_command(self, timeout: float | None = None) -> ReplicatedCommand | None:
        """The next command, or None if none arrives within ``timeout`` seconds.

        Raises :class:`RedisLinkError` once the commands received before a
        failure have all been delivered, :class:`LinkClosed` after :meth:`close`.
        """
        if self._state == "new":
            raise RuntimeError("start the link first")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                item = self._parser.gets()
                if item is not False:
                    args = as_command(item)
                    self._delivered_offset += command_size(args)
                    return ReplicatedCommand(args, self._delivered_offset)
            except (hiredis.ProtocolError, RespProtocolError) as exc:
                raise RedisLinkError(f"bad replication stream: {exc}", retryable=False) from exc
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                data = self._command_spool.read(self._chunk_bytes, remaining)
            except TimeoutError:
                return None
            if not data:
                raise LinkClosed()
            self._parser.feed(data)

    def commands(self) -> Iterator[ReplicatedCommand]:
        """Every command, blocking for the next; ends when the link is closed."""
        while True:
            try:
                command = self.read_command()
            except LinkClosed:
                return
            if command is not None:
                yield command

    def send_ack(self) -> None:
        """Send ``REPLCONF ACK <durable offset>`` now (e.g. right after a commit).

        Does nothing before the stream starts; a failure shows up in :meth:`read_command`.
        """
        try:
            self._send_ack()
        except Exception as exc:
            self._fail(self._translate(exc, "sending REPLCONF ACK"))

    def abort(self, reason: str) -> None:
        """Drop the connection as if it were lost (retryable): the commands
        received before are still delivered, then :class:`RedisLinkError`."""
        self._fail(RedisLinkError(reason, retryable=True))

    def close(self) -> None:
        """Stop the threads, close the socket and delete the spooled data."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._state = "closed"
            threads = list(self._threads)
        self._stop.set()
        if self._conn is not None:
            self._conn.shutdown()
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5.0)
        closed = LinkClosed()
        self._payload_spool.close(closed)
        self._command_spool.close(closed)
        if self._conn is not None:
            self._conn.close()

    def __enter__(self) -> MasterLink:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- reader thread ---------------------------------------------------------------

    def _spawn(self, target: Callable[..., None], role: str, *args: object) -> None:
        with self._lock:
            if self._closed:
                return
            thread = threading.Thread(
                target=target,
                args=args,
                name=f"redis-link-{role}-{self.address.host}:{self.address.port}",
                daemon=True,
            )
            self._threads.append(thread)
        thread.start()

    def _run_reader(self, full: bool) -> None:
        what = "receiving the RDB payload" if full else "receiving the command stream"
        try:
            if full:
                self._receive_payload()
                self._payload_spool.finish()
                what = "receiving the command stream"
            self._begin_stream()
            self._receive_stream()
        except Exception as exc:
            if not self._stop.is_set():
                self._fail(self._translate(exc, what))

    def _receive_payload(self) -> None:
        assert self._conn is not None
        header = self._conn.read_line("full sync", skip_empty=True)  # skips keep-alives
        if header.startswith("-"):
            raise RedisLinkError(f"the master aborted the full sync: {header[1:]}", retryable=True)
        if header.startswith("$EOF:"):
            mark = header[5:].encode()
            if len(mark) != EOF_MARK_BYTES:
                raise RespProtocolError(f"bad diskless payload header {header[:100]!r}")
            self._receive_until_mark(mark)
            return
        try:
            total = int(header[1:]) if header.startswith("$") else -1
        except ValueError:
            total = -1
        if total < 0:
            raise RespProtocolError(f"bad payload header {header[:100]!r}")
        self._receive_sized(total)

    def _receive_sized(self, total: int) -> None:
        assert self._conn is not None
        received = 0
        self._report(0, total)
        while received < total:
            data = self._conn.next_chunk()
            if len(data) > total - received:
                self._conn.unread(data[total - received :])  # the stream already
                data = data[: total - received]
            self._spool(self._payload_spool, data)
            received += len(data)
            self._report(received, total)

    def _receive_until_mark(self, mark: bytes) -> None:
        # The last len(mark) bytes are held back until we know they are not the mark.
        assert self._conn is not None
        held = b""
        received = 0
        self._report(0, None)
        while True:
            data = held + self._conn.next_chunk()
            if data.endswith(mark):
                payload = data[: -len(mark)]
                self._spool(self._payload_spool, payload)
                self._report(received + len(payload), None)
                return
            cut = max(0, len(data) - len(mark))
            self._spool(self._payload_spool, data[:cut])
            received += cut
            held = data[cut:]
            self._report(received, None)

    def _begin_stream(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._acks_enabled = True
            self._state = "streaming"
        self._send_ack()  # the diskless master waits for it
        self._spawn(self._run_acks, "acker")

    def _receive_stream(self) -> None:
        assert self._conn is not None
        framer = self._framer
        data = self._conn.next_chunk()
        while True:
            try:
                getacks = framer.feed(data)
            except Exception:
                # The commands completed before the problem are still delivered.
                with contextlib.suppress(Exception):
                    self._spool(self._command_spool, data[: framer.complete_bytes])
                    self._received_offset += framer.complete_bytes
                raise
            self._spool(self._command_spool, data)
            self._received_offset += len(data)
            if getacks:
                self._send_ack()
            data = self._conn.recv()

    def _spool(self, spool: Spool, data: bytes) -> None:
        try:
            spool.write(data)
        except OSError as exc:
            raise RedisLinkError(f"cannot spool to disk: {exc}", retryable=True) from exc

    def _report(self, received: int, total: int | None) -> None:
        if self._progress is None:
            return
        try:
            self._progress(received, total)
        except Exception:
            log.exception("the progress callback failed")

    # -- acknowledgements ----------------------------------------------------------

    def _run_acks(self) -> None:
        while not self._stop.wait(self._ack_interval):
            try:
                self._send_ack()
            except Exception as exc:
                if not self._stop.is_set():
                    self._fail(self._translate(exc, "sending REPLCONF ACK"))
                return

    def _send_ack(self) -> None:
        if not self._acks_enabled or self._stop.is_set() or self._conn is None:
            return
        try:
            durable = self._durable_offset()
        except Exception:
            log.exception("durable_offset() failed; not acknowledging this time")
            return
        offset = 0 if durable is None else max(0, min(durable, self._delivered_offset))
        self._conn.send(encode_command("REPLCONF", "ACK", offset))

    # -- failure -------------------------------------------------------------------

    def _fail(self, error: RedisLinkError) -> None:
        with self._lock:
            if self._error is not None or self._closed:
                return
            self._error = error
            self._state = "failed"
        log.warning("link to %s failed: %s", self.address, error)
        self._stop.set()
        if self._conn is not None:
            self._conn.shutdown()
        self._payload_spool.finish(error)
        self._command_spool.finish(error)

    def _translate(self, exc: Exception, what: str) -> RedisLinkError:
        if isinstance(exc, RedisLinkError):
            return exc
        if isinstance(exc, TimeoutError):
            message = f"{what}: nothing from the master for {self._read_timeout:g} s"
            return RedisLinkError(message, retryable=True)
        if isinstance(exc, MasterClosedConnection):
            return RedisLinkError(f"{what}: the master closed the connection", retryable=True)
        if isinstance(exc, SpoolFull):
            return LimitExceeded(
                f"{what}: the replicator is too far behind the master: {exc} (the backlog "
                f"may hold {self._max_spool_bytes} bytes; raise --max-spool-bytes, or make "
                "rkv keep up)",
                setting="--max-spool-bytes",
            )
        if isinstance(exc, (RespProtocolError, hiredis.ProtocolError)):
            return RedisLinkError(f"{what}: protocol error: {exc}", retryable=False)
        if isinstance(exc, OSError):
            return RedisLinkError(f"{what}: connection to the master lost: {exc}", retryable=True)
        return RedisLinkError(f"{what}: {exc!r}", retryable=False)


class _PayloadReader(io.RawIOBase):
    """The payload spool as a raw stream (callers get it wrapped in a BufferedReader)."""

    def __init__(self, spool: Spool) -> None:
        super().__init__()
        self._spool = spool

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        data = self._spool.read(view.nbytes)
        view[: len(data)] = data
        return len(data)
