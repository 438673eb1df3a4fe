"""How many connections a node's HTTP port holds, and for how long a request may arrive.

aiohttp accepts every connection and waits for a request's head as long as
bytes keep trickling in; these are the node's bounds on both (issue 15):

- At most ``max_connections`` open connections in all and
  ``max_per_address`` from one client address. A connection over either is
  answered at once with a JSON 503 ``too_many_connections`` or 429
  ``too_many_connections_per_address`` (with Retry-After) and closed, so a
  flood from one address leaves room for everyone else.
- ``read_timeout``: once a request's first bytes arrive, its head must be
  complete within this many seconds (a slow sender of headers is cut); the
  body's read has the same deadline (http_api/bodies.py).
- Errors aiohttp answers before the app sees a request (a malformed request
  line, a line above ``MAX_LINE_BYTES``) are JSON like every other error, and
  logged at debug level only: a stranger sending garbage must not fill the log.

:class:`GuardedHandler` is aiohttp's request handler with those checks;
:class:`GuardedSite` serves it on a TCP port, over TLS when given a context
(http_api/tls.py): a connection is then counted once its handshake is done,
and the event loop closes one whose handshake takes longer than the timeout.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_protocol import RequestHandler

from http_api.fair_share import SHARES, FairShare, metered

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024
"""aiohttp's limit on the request line and on each header line (a 4096-byte key
percent-encodes to ~12 KB of request line)."""


@dataclass(frozen=True, slots=True)
class HttpLimits:
    max_connections: int = 1024
    max_per_address: int = 256
    read_timeout: float = 30.0
    idle_timeout: float = 60.0
    max_watches: int = 512
    max_watches_per_address: int = 128
    max_body_bytes_in_flight: int = 256 * 1024 * 1024
    fair_share_busy: float = 0.2  # node/cli/settings.py DEFAULT_FAIR_SHARE_BUSY


LINGER_SECONDS = 1.0
"""How long a refused connection stays half-closed, reading, before it is closed."""
MAX_LINGERING = 256
"""Refused connections left to linger at once; beyond it they are closed at once."""

LIMITS: web.AppKey[HttpLimits] = web.AppKey("limits", HttpLimits)


@dataclass
class ConnectionCounts:
    """Open connections, in all and by client address (the event loop's thread only)."""

    limits: HttpLimits
    shares: FairShare | None = None
    """The loop's time by client address (http_api/fair_share.py), if shared."""
    total: int = 0
    by_address: Counter[str] = field(default_factory=Counter)
    lingering: int = 0
    """Refused connections still open (answered, waiting to close)."""

    def refusal(self, address: str) -> tuple[int, str, str] | None:
        """(status, code, message) when a new connection from ``address`` is one too many."""
        if self.total >= self.limits.max_connections:
            return (
                503,
                "too_many_connections",
                f"this node holds {self.total} connections, its --max-connections",
            )
        if self.by_address[address] >= self.limits.max_per_address:
            return (
                429,
                "too_many_connections_per_address",
                f"{address} holds {self.by_address[address]} connections to this node, its "
                "--max-connections-per-address",
            )
        return None

    def opened(self, address: str) -> None:
        self.total += 1
        self.by_address[address] += 1

    def closed(self, address: str) -> None:
        self.total -= 1
        self.by_address[address] -= 1
        if self.by_address[address] <= 0:
            del self.by_address[address]


def _canned(status: int, code: str, message: str) -> bytes:
    body = json.dumps({"code": code, "message": message}).encode()
    reason = {429: "Too Many Requests", 503: "Service Unavailable"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class GuardedHandler(RequestHandler):
    """aiohttp's handler, counted, with a deadline on each request's head."""

    __slots__ = (
        "_address",
        "_counts",
        "_head_timer",
        "_in_request",
        "_lingers",
        "_refused",
        "_resume_timer",
        "_timeout",
    )

    def __init__(self, counts: ConnectionCounts, server: Any, **kwargs: Any) -> None:
        super().__init__(server, **kwargs)
        self._counts = counts
        self._address = ""
        self._refused = False
        self._lingers = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._in_request = False
        self._timeout = counts.limits.read_timeout
        self._resume_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        start = time.perf_counter()
        try:
            self._connection_made(transport)
        finally:
            self._charge(start)

    def _charge(self, start: float) -> None:
        shares = self._counts.shares
        if shares is not None and self._address:
            shares.charge(self._address, time.perf_counter() - start)

    async def start(self) -> None:
        """aiohttp's per-connection task (parsing, answering), its time metered."""
        shares = self._counts.shares
        if shares is None:
            await super().start()
        else:
            await metered(super().start(), shares, self._address)

    def _connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self._address = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        refusal = self._counts.refusal(self._address)
        if refusal is not None:
            self._refused = True
            logger.debug("refused a connection from %s: %s", self._address, refusal[1])
            transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
            transport.write(_canned(*refusal))
            # Half-close and read on a moment before closing: closing a socket with
            # unread input resets it, and the client would lose the answer.
            if self._counts.lingering >= MAX_LINGERING or not transport.can_write_eof():
                transport.close()
                return
            transport.write_eof()
            self._lingers = True
            self._counts.lingering += 1
            self._loop.call_later(LINGER_SECONDS, transport.close)
            return
        self._counts.opened(self._address)
        if self._counts.shares is not None:
            self._counts.shares.connected(self._address)
        super().connection_made(transport)
        self._hold_if_over_share()

    def _hold_if_over_share(self) -> None:
        """A new connection from an address over its share of the loop is not read
        until the share has decayed (a flood of new connections costs nothing)."""
        shares = self._counts.shares
        transport = self.transport
        if shares is None or transport is None or transport.is_closing():
            return
        wait = shares.wait_seconds(self._address)
        if wait <= 0:
            return
        if self._resume_timer is None:
            shares.waits += 1
            transport.pause_reading()
        self._resume_timer = self._loop.call_later(wait, self._resume_when_under_share)

    def _resume_when_under_share(self) -> None:
        self._resume_timer = None
        shares = self._counts.shares
        transport = self.transport
        if shares is None or transport is None or transport.is_closing():
            return
        wait = shares.wait_seconds(self._address)
        if wait > 0:
            self._resume_timer = self._loop.call_later(wait, self._resume_when_under_share)
            return
        transport.resume_reading()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._refused:
            if self._lingers:
                self._counts.lingering -= 1
            return
        start = time.perf_counter()
        self._cancel_head_timer()
        if self._resume_timer is not None:
            self._resume_timer.cancel()
            self._resume_timer = None
        self._counts.closed(self._address)
        super().connection_lost(exc)
        self._charge(start)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        start = time.perf_counter()
        if not self._in_request and self._head_timer is None and data:
            self._head_timer = self._loop.call_later(self._timeout, self._head_timed_out)
        super().data_received(data)
        self._charge(start)

    def request_started(self) -> None:
        """The app has a request: its head arrived in time."""
        self._in_request = True
        self._cancel_head_timer()

    def request_ended(self) -> None:
        self._in_request = False

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_request:
            return
        logger.debug("closed a connection from %s: no request head in time", self._address)
        self.force_close()
        if self.transport is not None:
            self.transport.close()

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """An error aiohttp answers itself (a request it cannot parse), as JSON."""
        if isinstance(exc, LineTooLong):
            code = "line_too_long"
            text = (
                f"a request or header line is longer than {MAX_LINE_BYTES} bytes (a key is at "
                "most 4096 bytes)"
            )
        elif status >= 500:
            logger.error("error serving a request from %s", self._address, exc_info=exc)
            code, text = "internal_error", "unexpected error; see the node's log"
        else:
            code, text = "invalid_request", f"malformed HTTP request: {message or exc}"
        logger.debug("answered %d %s to %s: %s", status, code, self._address, text)
        response = web.Response(
            body=json.dumps({"code": code, "message": text}).encode(),
            status=status,
            content_type="application/json",
        )
        response.force_close()
        return response


@web.middleware
async def share_the_loop(request: web.Request, handler: Any) -> web.StreamResponse:
    """Serves a request once its address is within its share of the loop
    (http_api/fair_share.py), and charges the handler's time to the address."""
    shares = request.app.get(SHARES)
    if shares is None:
        response: web.StreamResponse = await handler(request)
        return response
    address = request.remote or "?"
    shares.started(address)
    # Charged in advance (and given back after): the address's typical request, so
    # that its other requests waiting at this moment see the cost of this one.
    advance = 0.0
    try:
        await shares.wait_turn(address)
        advance = shares.typical_cost(address)
        shares.charge(address, advance)
        response = await metered(handler(request), shares, address)
        return response
    finally:
        shares.charge(address, -advance)
        shares.ended(address)


@web.middleware
async def request_bounds(request: web.Request, handler: Any) -> web.StreamResponse:
    """Tells the connection's handler when a request is being served (its head came)."""
    protocol = request.protocol
    if not isinstance(protocol, GuardedHandler):
        response: web.StreamResponse = await handler(request)
        return response
    protocol.request_started()
    try:
        response = await handler(request)
        return response
    finally:
        protocol.request_ended()


class GuardedSite(web.TCPSite):
    """A TCP site whose connections are :class:`GuardedHandler`s."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        counts: ConnectionCounts,
        handler_args: dict[str, Any],
        *,
        ssl_context: ssl.SSLContext | None = None,
        handshake_timeout: float | None = None,
    ) -> None:
        super().__init__(runner, host, port, reuse_address=True, ssl_context=ssl_context)
        self._counts = counts
        self._handler_args = handler_args
        self._handshake_timeout = handshake_timeout

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None

        def handler() -> GuardedHandler:
            return GuardedHandler(self._counts, server, loop=loop, **self._handler_args)

        # With TLS a connection reaches the handler (and its counts) once its
        # handshake is done; one that does not finish in time is closed by the loop.
        tls: dict[str, Any] = {}
        if self._ssl_context is not None:
            tls = {"ssl": self._ssl_context, "ssl_handshake_timeout": self._handshake_timeout}
        self._server = await loop.create_server(
            handler, self._host, self._port, backlog=self._backlog, reuse_address=True, **tls
        )
