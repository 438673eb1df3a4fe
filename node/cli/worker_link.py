"""The link between a node's main process and one HTTP worker process.

A ``SOCK_SEQPACKET`` unix socket pair made by main before it starts the worker
(the worker's end is its inherited descriptor). Each datagram is one JSON
object, and may carry one passed file descriptor (SCM_RIGHTS): a client
connection main hands to the worker. Datagrams keep message boundaries and tie a
descriptor to its message, so there is no framing to get wrong.

Messages (``t`` names the kind):

main -> worker
  ``config``   the worker's settings, first and once (holds the cluster secret:
               the link is private to the two processes)
  ``conn``     a client connection to serve, its socket passed along
  ``stalled``  why the node serves no reads now, or null (sent on every change)
worker -> main
  ``ready``    serving
  ``closed``   a handed connection ended (``address``: its client address)
  ``read``     ``{"id", "consistency"}``: run the read check (linearizable: the
               read barrier) and answer
  ``login``    ``{"id", "user", "password", "address"}``: check a Basic login
  ``metrics``  HTTP request counter deltas since the last one
replies
  ``reply``    ``{"re": id, "ok": true}`` or ``{"re": id, "ok": false, "error":
               {"kind", "message", "code", "leader_url", "retry_after"}}``

Binary frames carry the key-value writes a worker serves (node/cli/write_link.py
holds their payloads): a datagram whose first byte is not ``{`` is a piece of a
frame. That byte is the frame's kind (1 writes, 2 results), with bit 0x80 set on
every piece but the last; the rest of the datagram is the next piece of the
frame's payload. A frame goes out in pieces of at most :data:`FRAME_PIECE_BYTES`
(a datagram must fit the socket's send buffer), queued together, so its pieces
arrive in order with nothing between them.

The end of the link is the end of the other process: a worker exits at once when
main's end closes (main died or stops it); main notes a worker gone.
"""

from __future__ import annotations

import array
import asyncio
import itertools
import json
import logging
import os
import socket
from collections import deque
from collections.abc import Callable
from typing import Any

from node import errors
from node.errors import Fenced, NotLeader, RequestError, Unavailable, VersionConflict

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 1024 * 1024
"""Larger than any message either side sends (a login holds a password of at most
a few KB; a metrics message a few hundred label sets)."""

Message = dict[str, Any]

FRAME_PIECE_BYTES = 64 * 1024
"""Most payload bytes one datagram of a binary frame holds (the default unix socket
send buffer holds about 200 KiB)."""
MAX_FRAME_BYTES = 1024**3
"""A frame larger than this ends the link (neither side sends one: a frame holds
commands or results of bodies the HTTP limits bound)."""
_MORE = 0x80
_FD_SPACE = socket.CMSG_SPACE(array.array("i").itemsize)
"""Ancillary space for the one descriptor a message may pass."""


def link_pair() -> tuple[socket.socket, socket.socket]:
    """(main's end, the worker's end)."""
    main_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    main_end.setblocking(False)
    return main_end, worker_end


def encode_error(error: BaseException) -> Message:
    if not isinstance(error, RequestError):
        return {"kind": "Unavailable", "message": f"the node failed the check: {error}"}
    return {
        "kind": type(error).__name__,
        "message": error.message,
        "code": error.code,
        "leader_url": getattr(error, "leader_url", None),
        "retry_after": getattr(error, "retry_after", None),
        "current_version": getattr(error, "current_version", None),
        "token": getattr(error, "token", None),
    }


def decode_error(body: Message) -> RequestError:
    """The RequestError main raised, rebuilt (same class, code and details)."""
    kind = getattr(errors, str(body.get("kind")), None)
    message = str(body.get("message", ""))
    error: RequestError
    if kind is NotLeader:
        error = NotLeader(message, body.get("leader_url"))
    elif kind is VersionConflict:
        error = VersionConflict(message, int(body.get("current_version") or 0))
    elif kind is Fenced:
        token = body.get("token")
        error = Fenced(message, None if token is None else int(token))
    elif isinstance(kind, type) and issubclass(kind, RequestError):
        try:
            error = kind(message, body.get("code"))
        except TypeError:  # a class with other arguments: never one a read check raises
            error = Unavailable(message, code=body.get("code"))
    else:
        error = Unavailable(message, code=body.get("code"))
    if body.get("retry_after") is not None:
        error.retry_after = float(body["retry_after"])  # type: ignore[attr-defined]
    return error


class Link:
    """One end of a link, on the running event loop."""

    def __init__(
        self,
        sock: socket.socket,
        on_message: Callable[[Message, socket.socket | None], None],
        on_end: Callable[[], None],
        on_frame: Callable[[int, bytes], None] | None = None,
    ) -> None:
        sock.setblocking(False)
        self._on_frame = on_frame
        self._frame = bytearray()
        self._buffer = memoryview(bytearray(MAX_MESSAGE_BYTES))
        self._sock = sock
        self._on_message = on_message
        self._on_end = on_end
        self._loop = asyncio.get_running_loop()
        self._outbox: deque[tuple[bytes, socket.socket | None]] = deque()
        self._ids = itertools.count(1)
        self._calls: dict[int, asyncio.Future[Message]] = {}
        self._ended = False
        self._writer_added = False
        self._loop.add_reader(sock.fileno(), self._readable)

    @property
    def ended(self) -> bool:
        return self._ended

    def send(self, message: Message, passed: socket.socket | None = None) -> None:
        """Queue ``message``; ``passed`` goes with it and is closed here once sent."""
        if self._ended:
            if passed is not None:
                passed.close()
            return
        self._outbox.append((json.dumps(message).encode(), passed))
        if not self._writer_added:
            self._flush()

    def send_frame(self, kind: int, payload: bytes) -> None:
        """Queue binary frame ``kind`` (1 to 127), in pieces (module docstring)."""
        if self._ended:
            return
        view = memoryview(payload)
        start = 0
        while True:
            piece = view[start : start + FRAME_PIECE_BYTES]
            start += FRAME_PIECE_BYTES
            more = start < len(payload)
            self._outbox.append((bytes((kind | (_MORE if more else 0),)) + piece, None))
            if not more:
                break
        if not self._writer_added:
            self._flush()

    async def call(self, message: Message) -> Message:
        """Send a request and wait for its reply; RequestError when it is an error."""
        if self._ended:
            raise Unavailable("the node's main process is gone", code="node_stopping")
        ident = next(self._ids)
        future: asyncio.Future[Message] = self._loop.create_future()
        self._calls[ident] = future
        self.send({**message, "id": ident})
        try:
            reply = await future
        finally:
            self._calls.pop(ident, None)
        if not reply.get("ok"):
            raise decode_error(reply.get("error") or {})
        return reply

    def reply(self, request: Message, error: BaseException | None = None) -> None:
        if error is None:
            self.send({"t": "reply", "re": request["id"], "ok": True})
        else:
            self.send(
                {"t": "reply", "re": request["id"], "ok": False, "error": encode_error(error)}
            )

    def _flush(self) -> None:
        while self._outbox:
            data, passed = self._outbox[0]
            try:
                if passed is None:
                    self._sock.send(data)
                else:
                    socket.send_fds(self._sock, [data], [passed.fileno()])
            except BlockingIOError:
                if not self._writer_added:
                    self._writer_added = True
                    self._loop.add_writer(self._sock.fileno(), self._writable)
                return
            except OSError as exc:
                logger.debug("link send failed: %s", exc)
                self._end()
                return
            self._outbox.popleft()
            if passed is not None:
                passed.close()

    def _writable(self) -> None:
        self._writer_added = False
        self._loop.remove_writer(self._sock.fileno())
        self._flush()

    def _receive(self) -> tuple[bytes, list[int]]:
        """One datagram and the descriptors it passed, read into a buffer kept for the
        link's life (socket.recv_fds would allocate MAX_MESSAGE_BYTES each time)."""
        size, ancillary, _flags, _addr = self._sock.recvmsg_into([self._buffer], _FD_SPACE)
        fds = array.array("i")
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
        return bytes(self._buffer[:size]), list(fds)

    def _readable(self) -> None:
        for _ in range(64):  # then let the loop run others
            try:
                data, fds = self._receive()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                logger.debug("link receive failed: %s", exc)
                self._end()
                return
            if not data:
                self._end()
                return
            if data[0] != 0x7B:  # not "{": a piece of a binary frame
                for fd in fds:
                    os.close(fd)
                self._piece(data)
                if self._ended:
                    return
                continue
            passed = socket.socket(fileno=fds[0]) if fds else None
            try:
                message = json.loads(data)
            except ValueError:
                logger.error("dropped a malformed link message (%d bytes)", len(data))
                if passed is not None:
                    passed.close()
                continue
            if message.get("t") == "reply":
                future = self._calls.get(message.get("re", -1))
                if future is not None and not future.done():
                    future.set_result(message)
                continue
            self._on_message(message, passed)

    def _piece(self, data: bytes) -> None:
        self._frame += memoryview(data)[1:]
        if len(self._frame) > MAX_FRAME_BYTES:
            logger.error("a link frame over %d bytes: link ended", MAX_FRAME_BYTES)
            self._end()
            return
        if data[0] & _MORE:
            return
        payload = bytes(self._frame)
        self._frame.clear()
        if self._on_frame is None:
            logger.error("dropped a binary link frame of kind %d", data[0])
            return
        self._on_frame(data[0], payload)

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        self._loop.remove_reader(self._sock.fileno())
        self._loop.remove_writer(self._sock.fileno())
        for _, passed in self._outbox:
            if passed is not None:
                passed.close()
        self._outbox.clear()
        for future in self._calls.values():
            if not future.done():
                future.set_exception(
                    Unavailable("the node's main process is gone", code="node_stopping")
                )
        self._sock.close()
        self._on_end()

    def close(self) -> None:
        self._end()
