"""A tiny blocking RESP2 client for tests that drive a real redis-server.

No Redis client library is installed (and none is wanted): tests only need to
send commands and read the replies. Commands go out as RESP arrays of bulk
strings; replies come back as Python values:

=====================  ===============================================
``+OK``                ``str`` (simple string)
``-ERR ...``           :class:`RespError` raised by :meth:`RespClient.execute`
                       (returned, not raised, by :meth:`RespClient.read_reply`)
``:42``                ``int``
``$5 hello``           ``bytes``; ``$-1`` is ``None``
``*2 ...``             ``list`` of replies; ``*-1`` is ``None``
=====================  ===============================================

Use::

    with RespClient("127.0.0.1", port) as client:
        client.execute("SET", "k", b"v")
        replies = client.pipeline([("INCR", "n"), ("GET", "n")])

The socket is exposed as ``client.sock`` and the buffered reader as
``client.reader`` for tests that must speak the replication protocol (after
``PSYNC`` the master sends a raw RDB payload, not a RESP reply).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any

Arg = bytes | str | int | float
Reply = Any  # str | int | bytes | list[Reply] | RespError | None


class RespError(Exception):
    """An error reply (``-ERR ...``); the message is the reply's text."""


def encode_command(args: Sequence[Arg]) -> bytes:
    """A command as a RESP array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, float):
            data = repr(arg).encode()
        else:
            data = str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class RespClient:
    """One connection to a Redis server."""

    def __init__(self, host: str, port: int, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.reader = self.sock.makefile("rb")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()

    def __enter__(self) -> RespClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def send(self, *args: Arg) -> None:
        """Send one command without reading its reply."""
        self.sock.sendall(encode_command(args))

    def read_line(self) -> bytes:
        """One CRLF-terminated line, without the CRLF."""
        line = self.reader.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError(f"connection closed or bad line from server: {line!r}")
        return line[:-2]

    def read_exact(self, n: int) -> bytes:
        data = self.reader.read(n)
        if len(data) != n:
            raise ConnectionError(f"connection closed: {len(data)} of {n} bytes read")
        return data

    def read_reply(self) -> Reply:
        """Read one reply; error replies are returned as :class:`RespError`."""
        line = self.read_line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RespError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.read_exact(n + 2)
            return data[:-2]
        if kind == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self.read_reply() for _ in range(n)]
        raise ConnectionError(f"unexpected RESP reply line {line!r}")

    def execute(self, *args: Arg) -> Reply:
        """Send a command and return its reply; raise :class:`RespError` on an
        error reply."""
        self.send(*args)
        reply = self.read_reply()
        if isinstance(reply, RespError):
            raise reply
        return reply

    def pipeline(self, commands: Iterable[Sequence[Arg]], batch: int = 1000) -> list[Reply]:
        """Send commands in batches of ``batch`` and return all replies; raise
        the first error reply, if any (after reading every reply)."""
        replies: list[Reply] = []
        pending: list[bytes] = []

        def flush() -> None:
            self.sock.sendall(b"".join(pending))
            replies.extend(self.read_reply() for _ in pending)
            pending.clear()

        for command in commands:
            pending.append(encode_command(command))
            if len(pending) >= batch:
                flush()
        if pending:
            flush()
        for reply in replies:
            if isinstance(reply, RespError):
                raise reply
        return replies
