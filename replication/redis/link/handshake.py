"""The socket to the master and the replica's handshake on it.

:class:`Connection` is a blocking TCP socket with a small input buffer (line
reads for replies and payload headers, chunk reads for the rest) and a lock
that keeps concurrent writers (the acknowledgement timer, the reader answering
GETACK) from interleaving their bytes.

:func:`handshake` speaks the replica's side up to the PSYNC reply:

1. ``AUTH [<user>] <password>`` if a password is configured; an error reply
   means the credentials are wrong (not retryable);
2. ``PING``; ``-NOAUTH`` means the master wants a password we do not have;
3. ``REPLCONF listening-port <port>``: informational for the master (shown
   in ``INFO replication``, where Sentinel reads it); the link announces 0, an
   address Sentinel cannot connect to, so it never counts as a replica it
   could promote; an ``-ERR`` is only logged, as Redis does;
4. ``REPLCONF capa eof capa psync2``: we accept the diskless ``$EOF:`` payload
   form and a ``+CONTINUE`` that switches to a new replication id;
5. ``PSYNC <replid> <next offset>`` or ``PSYNC ? -1``: the master may send
   bare ``\\n`` keep-alives before it answers (a diskless master can delay its
   ``+FULLRESYNC`` until the RDB child starts); they are skipped. The answer is
   ``+FULLRESYNC <replid> <offset>``, ``+CONTINUE [<replid>]`` or an error
   (``-NOMASTERLINK`` and ``-LOADING`` are worth retrying).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from typing import NamedTuple

from .resp import encode_command
from .types import REPLID, MasterAddress, RedisLinkError, reply_error

log = logging.getLogger(__name__)

_MAX_LINE = 64 * 1024


class MasterClosedConnection(Exception):
    """The master closed the connection (EOF)."""


class Connection:
    """A blocking socket to the master, with buffered reads and locked writes."""

    def __init__(self, sock: socket.socket, chunk_bytes: int) -> None:
        self.sock = sock
        self.local_port: int = sock.getsockname()[1]
        self._chunk_bytes = chunk_bytes
        self._inbuf = bytearray()
        self._send_lock = threading.Lock()

    @classmethod
    def open(
        cls, address: MasterAddress, connect_timeout: float, read_timeout: float, chunk_bytes: int
    ) -> Connection:
        """Connect; every later read or write times out after ``read_timeout`` seconds."""
        try:
            sock = socket.create_connection((address.host, address.port), timeout=connect_timeout)
        except OSError as exc:
            raise RedisLinkError(f"cannot connect to {address}: {exc}", retryable=True) from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            sock.settimeout(read_timeout)
            return cls(sock, chunk_bytes)
        except OSError as exc:
            sock.close()
            raise RedisLinkError(f"cannot connect to {address}: {exc}", retryable=True) from exc

    def send(self, data: bytes) -> None:
        with self._send_lock:
            self.sock.sendall(data)

    def recv(self) -> bytes:
        """The next bytes from the socket (never empty: EOF raises)."""
        data = self.sock.recv(self._chunk_bytes)
        if not data:
            raise MasterClosedConnection()
        return data

    def next_chunk(self) -> bytes:
        """The buffered bytes if any, else the next bytes from the socket."""
        if self._inbuf:
            data = bytes(self._inbuf)
            self._inbuf.clear()
            return data
        return self.recv()

    def unread(self, data: bytes) -> None:
        """Put ``data`` back in front of the buffer."""
        self._inbuf[:0] = data

    def read_line(self, what: str, skip_empty: bool = False) -> str:
        """The next line without its ``\\r\\n`` (skipping empty ones if asked)."""
        while True:
            end = self._inbuf.find(b"\n")
            if end < 0:
                if len(self._inbuf) > _MAX_LINE:
                    raise RedisLinkError(f"{what}: reply line too long", retryable=False)
                self._inbuf += self.recv()
                continue
            line = bytes(self._inbuf[:end]).rstrip(b"\r")
            del self._inbuf[: end + 1]
            if line or not skip_empty:
                return line.decode("utf-8", "replace")

    def shutdown(self) -> None:
        """Wake up any thread blocked on the socket (it then sees an error or EOF)."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.sock.close()


class PsyncReply(NamedTuple):
    full: bool
    replid: str
    offset: int
    """FULLRESYNC: the offset the RDB reflects; CONTINUE: the requested offset - 1."""


def handshake(
    conn: Connection,
    address: MasterAddress,
    replid: str | None,
    next_offset: int,
    listening_port: int,
) -> PsyncReply:
    """Log in, announce ourselves and send PSYNC (see the module docstring)."""
    if address.password is not None:
        login = [address.username] if address.username else []
        reply = _call(conn, "AUTH", *login, address.password)
        if reply.startswith("-"):
            raise RedisLinkError(f"authentication failed: {reply[1:]}", retryable=False)
    _check("PING", _call(conn, "PING"))
    _check("REPLCONF listening-port", _call(conn, "REPLCONF", "listening-port", listening_port))
    _check("REPLCONF capa", _call(conn, "REPLCONF", "capa", "eof", "capa", "psync2"))
    if replid is None:
        conn.send(encode_command("PSYNC", "?", -1))
    else:
        conn.send(encode_command("PSYNC", replid, next_offset))
    reply = conn.read_line("PSYNC", skip_empty=True)
    words = reply.split() or [""]
    if words[0] == "+FULLRESYNC" and len(words) == 3 and REPLID.fullmatch(words[1]):
        try:
            return PsyncReply(True, words[1], int(words[2]))
        except ValueError:
            pass
    elif words[0] == "+CONTINUE" and replid is not None and len(words) <= 2:
        new_replid = words[1] if len(words) == 2 else replid
        if REPLID.fullmatch(new_replid):
            return PsyncReply(False, new_replid, next_offset - 1)
    elif reply.startswith("-"):
        raise reply_error("PSYNC", reply[1:])
    raise RedisLinkError(f"unexpected reply to PSYNC: {reply[:200]!r}", retryable=False)


def _call(conn: Connection, *args: str | int) -> str:
    conn.send(encode_command(*args))
    reply = conn.read_line(str(args[0]))
    if not reply.startswith(("+", "-")):
        raise RedisLinkError(f"unexpected reply to {args[0]}: {reply[:200]!r}", retryable=False)
    return reply


def _check(what: str, reply: str) -> None:
    if not reply.startswith("-"):
        return
    text = reply[1:]
    code = text.split(maxsplit=1)[0] if text.strip() else ""
    if code == "NOAUTH":
        raise RedisLinkError(
            f"the master requires a password (put it in the URL): {text}", retryable=False
        )
    if what != "PING" and code == "ERR":
        # Like Redis's own replicas: a master that does not know a REPLCONF
        # option is no reason to give up.
        log.warning("the master refused %s: %s", what, text)
        return
    raise reply_error(what, text)
