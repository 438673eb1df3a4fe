"""The raft port's listening socket, which an error in accept() no longer closes.

pysyncobj's :class:`~pysyncobj.tcp_server.TcpServer` unbinds its socket on any
error from ``accept()`` other than EAGAIN, and nothing binds it again: one
EMFILE (a flood of connections using up the file descriptors) left the node
unreachable to its peers until restarted. :class:`GuardedListener` instead:

- on EMFILE, ENFILE, ENOBUFS or ENOMEM stops polling the socket (it stays
  readable, so polling it would spin) and tries again after
  :data:`ACCEPT_RETRY_SECONDS`; connections wait in the kernel's backlog
  meanwhile;
- on any other error of one connection (ECONNABORTED, EPERM from a firewall...)
  logs it and goes on; only an error of the socket itself (EBADF, EINVAL, an
  error event) closes it, and the transport binds it again;
- binds the address it is given (``--raft-listen``), never the wildcard
  pysyncobj falls back to, with a backlog of :data:`BACKLOG`;
- hands each accepted socket to ``make_connection`` (a
  :class:`~raft.wire.GuardedConnection`).
"""

from __future__ import annotations

import errno
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

from pysyncobj.poller import POLL_EVENT_TYPE

from raft.log_throttle import ThrottledLog

logger = logging.getLogger(__name__)

ACCEPT_RETRY_SECONDS = 0.25
BACKLOG = 128
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_SOCKET_BROKEN = frozenset({errno.EBADF, errno.EINVAL, errno.ENOTSOCK})

ConnectionFactory = Callable[[socket.socket, str], Any]
"""(accepted socket, "host:port" of the peer) -> the connection object."""


class GuardedListener:
    """Used by the transport in place of pysyncobj's TcpServer (bind, unbind)."""

    def __init__(
        self,
        poller: Any,
        host: str,
        port: int,
        *,
        on_new_connection: Callable[[Any], None],
        make_connection: ConnectionFactory,
        on_lost: Callable[[], None],
        log: ThrottledLog,
        send_buffer_bytes: int,
        recv_buffer_bytes: int,
    ) -> None:
        self.address = f"{host}:{port}"
        self._poller = poller
        self._host, self._port = host, int(port)
        self._on_new_connection = on_new_connection
        self._make_connection = make_connection
        self._on_lost = on_lost
        self._log = log
        self._buffers = (send_buffer_bytes, recv_buffer_bytes)
        self._socket: socket.socket | None = None
        self._paused_until: float | None = None

    def bind(self) -> None:
        """Bind and listen; raises OSError (logged) for pysyncobj to try again later."""
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock: socket.socket | None = None
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
            self._set_options(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self._host, self._port))
            sock.listen(BACKLOG)
        except OSError as exc:
            if sock is not None:
                sock.close()
            self._log.report(
                "bind-failed", self.address, "cannot bind the raft port %s: %s", self.address, exc
            )
            raise
        self._socket = sock
        self._paused_until = None
        self._subscribe()

    def _set_options(self, sock: socket.socket) -> None:
        """pysyncobj's socket options (its buffer sizes, no Nagle), non-blocking."""
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._buffers[0])
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._buffers[1])
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)

    def unbind(self) -> None:
        sock, self._socket = self._socket, None
        self._paused_until = None
        if sock is not None:
            self._poller.unsubscribe(sock.fileno())
            sock.close()

    def _subscribe(self) -> None:
        assert self._socket is not None
        self._poller.subscribe(
            self._socket.fileno(), self._on_event, POLL_EVENT_TYPE.READ | POLL_EVENT_TYPE.ERROR
        )

    def resume_if_due(self) -> None:
        """Called every tick: poll the socket again once a pause has passed."""
        if self._paused_until is not None and time.monotonic() >= self._paused_until:
            self._paused_until = None
            if self._socket is not None:
                self._subscribe()

    @property
    def paused(self) -> bool:
        return self._paused_until is not None

    def _on_event(self, descr: int, event: int) -> None:
        if self._socket is None or descr != self._socket.fileno():
            return
        if event & POLL_EVENT_TYPE.ERROR:
            logger.error("the raft port %s reported an error: binding it again", self.address)
            self.unbind()
            self._on_lost()
            return
        if event & POLL_EVENT_TYPE.READ:
            self._accept_one()

    def _accept_one(self) -> None:
        assert self._socket is not None
        try:
            sock, address = self._socket.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._accept_failed(exc)
            return
        peer = f"{address[0]}:{address[1]}"
        try:
            self._set_options(sock)
            connection = self._make_connection(sock, peer)
        except OSError as exc:
            sock.close()
            self._log.report(
                "accept-failed", peer, "cannot set up a raft connection from %s: %s", peer, exc
            )
            return
        self._on_new_connection(connection)

    def _accept_failed(self, exc: OSError) -> None:
        if exc.errno in OUT_OF_RESOURCES:
            # The pending connection stays in the backlog and the socket readable:
            # stop polling it for a while rather than spin.
            assert self._socket is not None
            self._poller.unsubscribe(self._socket.fileno())
            self._paused_until = time.monotonic() + ACCEPT_RETRY_SECONDS
            self._log.report(
                "accept-paused",
                self.address,
                "the raft port %s cannot accept a connection (%s): retrying every %.2f s",
                self.address,
                exc,
                ACCEPT_RETRY_SECONDS,
            )
        elif exc.errno in _SOCKET_BROKEN:
            logger.error("the raft port %s failed (%s): binding it again", self.address, exc)
            self.unbind()
            self._on_lost()
        else:
            self._log.report(
                "accept-failed",
                self.address,
                "the raft port %s: accept failed: %s",
                self.address,
                exc,
            )
