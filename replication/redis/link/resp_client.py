"""A blocking request/reply RESP2 connection, for the few plain commands the
replicator sends besides the replication protocol: asking a Sentinel where the
master is (and listening to its ``+switch-master`` messages), asking a server
its ``ROLE``.

Replies are parsed by :class:`hiredis.Reader`: simple and bulk strings come
back as ``bytes``, integers as ``int``, arrays as ``list``, nil as ``None``;
an error reply raises :class:`ReplyError` (its text without the ``-``). Every
read and write times out after ``timeout`` seconds (:class:`TimeoutError`);
a closed connection raises :class:`ConnectionError`.
"""

from __future__ import annotations

import contextlib
import socket
from types import TracebackType

import hiredis

from .resp import encode_command


class ReplyError(Exception):
    """The server answered ``-<text>``; ``code`` is its first word (``WRONGPASS``)."""

    @property
    def code(self) -> str:
        text = str(self)
        return text.split(maxsplit=1)[0] if text.strip() else ""


class RespConnection:
    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.host = host
        self.port = port
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._reader = hiredis.Reader()

    def send(self, *args: str | bytes | int) -> None:
        self._sock.sendall(encode_command(*args))

    def call(self, *args: str | bytes | int) -> object:
        """Send one command and return its reply (see the module docstring)."""
        self.send(*args)
        return self.read()

    def read(self, timeout: float | None = None) -> object:
        """The next reply (:class:`TimeoutError` if none comes within ``timeout``,
        else the connection's timeout; a partial reply read so far is kept)."""
        if timeout is not None:
            self._sock.settimeout(timeout)
        while True:
            reply = self._reader.gets()
            if reply is not False:
                if isinstance(reply, hiredis.ReplyError):
                    raise ReplyError(str(reply))
                return reply
            data = self._sock.recv(64 * 1024)
            if not data:
                raise ConnectionError(f"{self.host}:{self.port} closed the connection")
            self._reader.feed(data)

    def settimeout(self, timeout: float) -> None:
        self._sock.settimeout(timeout)

    def shutdown(self) -> None:
        """Wake up a thread blocked reading (it then sees an error)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> RespConnection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
