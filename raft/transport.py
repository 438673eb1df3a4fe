"""pysyncobj's TCP transport, bounded against strangers on the raft port.

:class:`GuardedTransport` keeps pysyncobj's protocol and connection logic and
changes what a peer that does not hold the cluster secret can do to a node:

- every connection is a :class:`~raft.wire.GuardedConnection` (bounded frames,
  a linear read buffer, an authentication state);
- the listening socket is a :class:`~raft.listener.GuardedListener`: bound to
  ``--raft-listen`` exactly, kept open through EMFILE and other accept errors;
- a connection must complete the handshake within ``--raft-handshake-timeout``
  (pysyncobj only times out a connection on which something happens, so an idle
  one stayed forever); an accepted connection that has not, and a dialed one
  whose peer never answers, is closed;
- at most ``--max-raft-handshakes`` accepted connections may be in their
  handshake at once; a new one past it closes the oldest that has not
  authenticated. Closing the oldest rather than refusing the newest means a
  flood of idle connections cannot keep a member out: the member's handshake
  completes within a round trip, long before the flood has cycled through the
  cap (the listener accepts one connection per tick);
- a handshake that fails is logged on both sides as a likely wrong secret: the
  accepting node when the first frame does not decrypt (raft/wire.py), the
  dialing node when the peer closes the connection (an orderly close, not the
  reset of a dying process) before answering. All such lines go through one
  :class:`~raft.log_throttle.ThrottledLog`.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import time
from typing import Any

from pysyncobj.dns_resolver import globalDnsResolver
from pysyncobj.tcp_connection import CONNECTION_STATE
from pysyncobj.transport import TCPTransport

from node.errors import ConfigError
from raft.config import TransportLimits
from raft.listener import GuardedListener
from raft.log_throttle import ThrottledLog
from raft.wire import GuardedConnection

logger = logging.getLogger(__name__)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class GuardedTransport(TCPTransport):  # type: ignore[misc]
    def __init__(
        self,
        syncObj: Any,
        selfNode: Any,
        otherNodes: Any,
        *,
        limits: TransportLimits | None = None,
    ) -> None:
        # Set before TCPTransport.__init__: it adds the nodes and creates the server.
        self._rkv_limits = limits or TransportLimits()
        self._rkv_log = ThrottledLog(logger)
        super().__init__(syncObj, selfNode, otherNodes)

    # -- the listening socket ----------------------------------------------------------

    def _createServer(self) -> None:
        conf = self._syncObj.conf
        address = conf.bindAddress or self._selfNode.address
        host, _, port = address.rpartition(":")
        ip = host if _is_ip(host) else globalDnsResolver().resolve(host)
        if ip is None:
            raise ConfigError(f"cannot resolve the raft address {address}")
        self._server = GuardedListener(
            self._syncObj._poller,
            ip,
            int(port),
            on_new_connection=self._onNewIncomingConnection,
            make_connection=self._accepted_connection,
            on_lost=self._listener_lost,
            log=self._rkv_log,
            send_buffer_bytes=conf.sendBufferSize,
            recv_buffer_bytes=conf.recvBufferSize,
        )

    def _listener_lost(self) -> None:
        """The listening socket failed and was closed: bind it again (pysyncobj's
        tick does, on its next try, while the transport is not ready)."""
        self._ready = False

    def _connection(self, **kwargs: Any) -> GuardedConnection:
        conf = self._syncObj.conf
        return GuardedConnection(
            self._syncObj._poller,
            max_frame_bytes=self._rkv_limits.max_frame_bytes,
            log=self._rkv_log,
            timeout=conf.connectionTimeout,
            sendBufferSize=conf.sendBufferSize,
            recvBufferSize=conf.recvBufferSize,
            **kwargs,
        )

    def _accepted_connection(self, sock: Any, peer: str) -> GuardedConnection:
        return self._connection(socket=sock, peer=peer, dialed=False)

    # -- connections -------------------------------------------------------------------

    def addNode(self, node: Any) -> None:
        """pysyncobj's addNode, with a GuardedConnection for the nodes this one dials."""
        self._nodes.add(node)
        self._nodeAddrToNode[node.address] = node
        if not self._shouldConnect(node):
            return
        conn = self._connection(
            peer=node.address, dialed=True, keepalive=self._syncObj.conf.tcp_keepalive
        )
        conn.encryptor = self._syncObj.encryptor
        conn.setOnConnectedCallback(functools.partial(self._onOutgoingConnected, conn))
        conn.setOnMessageReceivedCallback(functools.partial(self._onMessageReceived, node))
        conn.setOnDisconnectedCallback(functools.partial(self._onDisconnected, conn))
        self._connections[node] = conn

    def _onNewIncomingConnection(self, conn: GuardedConnection) -> None:
        super()._onNewIncomingConnection(conn)
        cap = self._rkv_limits.max_handshakes
        if len(self._unknownConnections) <= cap:
            return
        waiting = sorted(self._unknownConnections, key=lambda c: (c.authenticated, c.opened_at))
        oldest = waiting[0]
        self._rkv_log.report(
            "handshakes-full",
            "",
            "more than %d raft connections in their handshake (--max-raft-handshakes): "
            "closed the oldest, from %s",
            cap,
            oldest.peer,
        )
        oldest.close_quietly("too many connections in their handshake")

    def _onOutgoingConnected(self, conn: GuardedConnection) -> None:
        if self._syncObj.encryptor:
            conn.handshake_started = time.monotonic()  # the peer's key must come back
        else:
            conn.authenticated = True  # no handshake: its first frame is any message
        super()._onOutgoingConnected(conn)

    def _onDisconnected(self, conn: GuardedConnection) -> None:
        if (
            conn.dialed
            and conn.handshake_started is not None
            and not conn.authenticated
            and conn.closed_by_peer
            and self._connToNode(conn) in self._nodes
        ):
            self._rkv_log.report(
                "dial-auth-failed",
                conn.subject,
                "raft connection to %s failed authentication: the peer closed it during the "
                "handshake (wrong cluster secret? see the peer's log)",
                conn.peer,
            )
        conn.handshake_started = None
        super()._onDisconnected(conn)

    # -- every tick --------------------------------------------------------------------

    def _onTick(self) -> None:
        super()._onTick()
        server = self._server
        if isinstance(server, GuardedListener):
            server.resume_if_due()
        self._expire_handshakes()

    def _expire_handshakes(self) -> None:
        timeout = self._rkv_limits.handshake_timeout
        now = time.monotonic()
        for conn in list(self._unknownConnections):
            if now - conn.opened_at > timeout:
                self._rkv_log.report(
                    "handshake-timeout",
                    conn.subject,
                    "raft connection from %s did not complete the handshake within %g s "
                    "(--raft-handshake-timeout); closed",
                    conn.peer,
                    timeout,
                )
                conn.close_quietly("no handshake in time")
        for conn in list(self._connections.values()):
            started = conn.handshake_started if conn.dialed else None
            if (
                started is not None
                and not conn.authenticated
                and now - started > timeout
                and conn.state != CONNECTION_STATE.DISCONNECTED
            ):
                self._rkv_log.report(
                    "handshake-timeout",
                    conn.subject,
                    "raft connection to %s: no answer to the handshake within %g s "
                    "(--raft-handshake-timeout); closed, will retry",
                    conn.peer,
                    timeout,
                )
                conn.close_quietly("no answer to the handshake in time")
