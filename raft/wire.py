"""One raft connection: pysyncobj's framing, with bounds a stranger cannot push past.

pysyncobj frames each message as a 4-byte length (native signed int) and the
message: ``zlib(pickle(message))``, Fernet-encrypted under the cluster secret.
Its :class:`~pysyncobj.tcp_connection.TcpConnection` believes any length a peer
announces and grows an immutable ``bytes`` buffer by concatenation until the
frame is complete: a stranger announcing 2 GiB kept the raft thread copying
(64 MiB took 19 s of CPU: no heartbeats, then elections), and nothing bounded
the memory. :class:`GuardedConnection` speaks the same protocol and:

- checks each frame's announced length as soon as its 4 bytes are in, and
  closes the connection (logging it) when it is above the limit: before
  authentication :data:`HANDSHAKE_FRAME_BYTES` (the handshake's frames are a few
  hundred bytes), after it ``--max-raft-frame-bytes``;
- stops reading once a whole frame is buffered, so a connection never holds
  more than one frame and one read past it;
- keeps the buffer in a ``bytearray`` (appends and trims in place: linear);
- counts as authenticated once a frame has decoded, i.e. decrypted under the
  cluster secret; a first frame that does not is logged on either side as a
  likely wrong secret (:mod:`raft.log_throttle` bounds those lines);
- sends large incompressible messages stored rather than compressed
  (:func:`deflate`): zlib costs 60 ms per MiB of random bytes, paid on the raft
  thread once per follower, so one 11 MiB write of random values held the
  leader's raft thread past the election timeout (a large message that does
  compress goes at level 1). The receiver cannot tell the difference (a stored
  block is valid zlib), so pysyncobj peers read it;
- makes pysyncobj pickle what it proposes and sends with protocol 4, as
  :class:`GuardedConnection` does its messages.
"""

from __future__ import annotations

import errno
import pickle
import socket
import struct
import time
import zlib
from typing import Any

import pysyncobj.pickle as pysyncobj_pickle
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.tcp_connection import TcpConnection

from raft.log_throttle import ThrottledLog

_PICKLE_PROTOCOL = 4
"""pysyncobj pickles with protocol 2, which stores bytes as latin-1 text (two bytes for
each byte above 127, and again for a chunk of an entry pickled inside a message);
protocol 4 stores bytes as they are. Any receiver's pickle.loads reads either."""
# pysyncobj also pickles with its own module's protocol (2) each command it proposes
# and each entry it sends a follower (once per follower): 2.3 ms for a 2.4 MB bulk-load
# entry against 0.4 ms with protocol 4, and a follower reassembling a chunked entry
# (raft/transmission.py) tried to unpickle it at each premature "finish" chunk that
# protocol 2's longer pickle causes. pickle.loads reads both, so every peer reads it.
setattr(pysyncobj_pickle, "__protocol", _PICKLE_PROTOCOL)
_SAMPLE_BYTES = 4096
"""Messages up to this size are compressed as pysyncobj does; above it a sample of
this size decides (a large entry travels in 64 KiB chunks, each one message)."""
_WORTH_COMPRESSING = 0.5
"""A sample that compresses to more than this share of its size is sent stored. Random
bytes in an entry compress to ~0.6 of pysyncobj's pickle (protocol 2 turns bytes into
latin-1 text, two bytes for each byte above 127), at ~45 ms per MiB: not worth it."""


def deflate(data: bytes) -> bytes:
    """zlib data for a message: compressed (level 3, pysyncobj's) unless a sample of
    a large message shows it does not compress, then stored (level 0). A large message
    that compresses goes at level 1: a bulk load's 2.4 MB entry took 9 ms per follower
    at level 3 (14% of the leader's CPU during the load), 5 ms at level 1, for the
    same size."""
    if len(data) > _SAMPLE_BYTES:
        sample = data[len(data) // 2 : len(data) // 2 + _SAMPLE_BYTES]
        if len(zlib.compress(sample, 1)) > _WORTH_COMPRESSING * len(sample):
            return zlib.compress(data, 0)
        return zlib.compress(data, 1)
    return zlib.compress(data, 3)


HANDSHAKE_FRAME_BYTES = 64 * 1024
"""The largest frame accepted before the peer has authenticated (fixed: pysyncobj's
handshake sends a 32-byte random key, about 200 bytes once framed and encrypted)."""

_LENGTH = struct.Struct("i")  # pysyncobj's length prefix: native byte order, signed
_WOULD_BLOCK = (errno.EAGAIN, errno.EWOULDBLOCK)


class GuardedConnection(TcpConnection):  # type: ignore[misc]
    """pysyncobj's TcpConnection with bounded frames and an authentication state.

    ``max_frame_bytes`` bounds an authenticated peer's frames; ``peer`` names the
    other end in log lines (host:port); ``dialed`` is True for a connection this
    node opens to a member, False for one it accepted."""

    # pysyncobj's attributes this class reads and writes.
    _TcpConnection__socket: Any
    _TcpConnection__readBuffer: Any
    _TcpConnection__writeBuffer: Any
    sendRandKey: Any
    _TcpConnection__recvBufferSize: int
    recvLastTimestamp: Any
    recvRandKey: Any
    encryptor: Any

    def __init__(
        self,
        poller: Any,
        *,
        max_frame_bytes: int,
        log: ThrottledLog,
        peer: str,
        dialed: bool,
        **kwargs: Any,
    ) -> None:
        # Set before TcpConnection.__init__, which subscribes an accepted socket.
        self.max_frame_bytes = max_frame_bytes
        self.peer = peer
        self.dialed = dialed
        self._log = log
        self.opened_at = time.monotonic()
        self.authenticated = False
        self.handshake_started: float | None = None if dialed else self.opened_at
        self.closed_reason: str | None = None
        self.closed_by_peer = False
        super().__init__(poller, **kwargs)

    # -- dialing ---------------------------------------------------------------------

    def connect(self, host: str, port: int) -> bool:
        self.peer = f"{host}:{port}"
        self.opened_at = time.monotonic()
        self.authenticated = False
        self.handshake_started = None
        self.closed_reason = None
        self.closed_by_peer = False
        try:
            connecting: bool = super().connect(host, port)
        except OSError as exc:  # no file descriptor left (EMFILE), no memory...
            sock = self._TcpConnection__socket
            if sock is not None:
                sock.close()
                self._TcpConnection__socket = None
            self._log.report(
                "dial-failed", self.peer, "cannot open a raft connection to %s: %s", self.peer, exc
            )
            return False
        return connecting

    # -- sending ---------------------------------------------------------------------

    def send(self, message: Any) -> None:
        """pysyncobj's send, with :func:`deflate` choosing the compression."""
        if self.sendRandKey:
            message = (self.sendRandKey, message)
        data = deflate(pickle.dumps(message, protocol=_PICKLE_PROTOCOL))
        if self.encryptor:
            data = self.encryptor.encrypt_at_time(data, int(monotonic_time()))
        outbox = self._outbox()
        outbox += _LENGTH.pack(len(data))
        outbox += data
        self._TcpConnection__trySendBuffer()

    def _outbox(self) -> bytearray:
        """The write buffer, as a bytearray: pysyncobj's ``bytes +=`` copied the whole
        backlog for every chunk of a large entry (quadratic on the raft thread)."""
        buffer = self._TcpConnection__writeBuffer
        if not isinstance(buffer, bytearray):
            buffer = bytearray(buffer)
            self._TcpConnection__writeBuffer = buffer
        return buffer

    def _TcpConnection__processSend(self) -> bool:
        """Send what the socket takes; True if it took some (pysyncobj then tries again)."""
        outbox = self._outbox()
        if not outbox:
            return False
        try:
            sent: int = self._TcpConnection__socket.send(outbox)
        except OSError as exc:
            if exc.errno not in _WOULD_BLOCK:
                self.disconnect()
            return False
        if sent <= 0:
            if sent < 0:
                self.disconnect()
            return False
        del outbox[:sent]  # bytearray: trimming the front is cheap
        return True

    # -- reading ---------------------------------------------------------------------

    def _inbox(self) -> bytearray:
        """The read buffer, as a bytearray (pysyncobj resets it to ``bytes()``)."""
        buffer = self._TcpConnection__readBuffer
        if not isinstance(buffer, bytearray):
            buffer = bytearray(buffer)
            self._TcpConnection__readBuffer = buffer
        return buffer

    def _TcpConnection__processRead(self) -> bool:
        """Read once; True if pysyncobj should read again before parsing."""
        sock: socket.socket = self._TcpConnection__socket
        try:
            incoming = sock.recv(self._TcpConnection__recvBufferSize)
        except OSError as exc:
            if exc.errno not in _WOULD_BLOCK:
                self.disconnect()
            return False
        if not incoming or sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            # An orderly close (FIN), as a peer that read our frame and refused it
            # closes; a peer whose process died resets the connection instead.
            self.closed_by_peer = not incoming
            self.disconnect()
            return False
        buffer = self._inbox()
        buffer += incoming
        if len(buffer) < _LENGTH.size:
            return True
        length: int = _LENGTH.unpack_from(buffer)[0]
        if not self._frame_allowed(length):
            return False
        return len(buffer) < _LENGTH.size + length  # a whole frame: parse it first

    def _frame_allowed(self, length: int) -> bool:
        """Whether a frame of ``length`` announced bytes may be received; if not,
        log it and close the connection."""
        if self.authenticated:
            limit, which = self.max_frame_bytes, "--max-raft-frame-bytes"
        else:
            limit, which = HANDSHAKE_FRAME_BYTES, "the limit before authentication"
        if 0 <= length <= limit:
            return True
        self._refuse(
            "frame-too-large" if self.authenticated else "handshake-frame-too-large",
            f"announced a frame of {length} bytes, above {which} ({limit} bytes)",
        )
        return False

    def _TcpConnection__processParseMessage(self) -> Any:
        """The next whole message in the buffer, or None (then the connection may
        be closed: a frame over the limit, or one that does not decode)."""
        buffer = self._inbox()
        if len(buffer) < _LENGTH.size:
            return None
        (length,) = _LENGTH.unpack_from(buffer)
        if not self._frame_allowed(length):
            return None
        end = _LENGTH.size + length
        if len(buffer) < end:
            return None
        with memoryview(buffer) as view:
            frame = bytes(view[_LENGTH.size : end])
        del buffer[:end]
        try:
            message = self._decode(frame)
        except Exception:  # a wrong key, a replay, garbage
            self._undecodable()
            return None
        self.authenticated = True
        return message

    def _decode(self, frame: bytes) -> Any:
        """pysyncobj's message format: decrypt (if there is a secret), then
        decompress and unpickle; past the handshake, the message comes paired with
        the random key this side sent."""
        if self.encryptor:
            stamp = self.encryptor.extract_timestamp(frame)
            if stamp < self.recvLastTimestamp:
                raise ValueError("a frame older than the last one (a replay?)")
            self.recvLastTimestamp = stamp
            frame = self.encryptor.decrypt(frame)
        message = pysyncobj_pickle.loads(zlib.decompress(frame))
        if self.recvRandKey:
            key, message = message
            if key != self.recvRandKey:
                raise ValueError("a message for another connection")
        return message

    def _undecodable(self) -> None:
        if self.authenticated:
            self._refuse("undecodable", "sent a frame that does not decode")
        elif not self.encryptor:
            self._refuse("undecodable", "sent a first frame that does not decode")
        elif self.dialed:
            self._refuse(
                "dial-auth-failed",
                "failed authentication: its answer does not decrypt (wrong cluster secret?)",
            )
        else:
            self._refuse("auth-failed", "failed authentication: wrong cluster secret?")

    # -- closing ---------------------------------------------------------------------

    def _refuse(self, kind: str, reason: str) -> None:
        """Log why (throttled per peer) and close the connection."""
        self.closed_reason = reason
        self._log.report(kind, self.subject, "raft connection %s %s; closed", self.named, reason)
        self.disconnect()

    def close_quietly(self, reason: str) -> None:
        """Close without a log line of its own (the caller logs, or need not)."""
        self.closed_reason = reason
        self.disconnect()

    @property
    def named(self) -> str:
        """The peer with its direction ("to HOST:PORT", "from HOST:PORT"), for log lines."""
        return f"{'to' if self.dialed else 'from'} {self.peer}"

    @property
    def subject(self) -> str:
        """Whom log lines about this connection are throttled by: the member dialed, or
        the host of an accepted connection, whatever its port."""
        return self.peer if self.dialed else self.peer.rpartition(":")[0] or self.peer
