"""An HTTP worker's app and server: the key-value reads and the common key-value
writes served here, with main's middlewares and main's route code, and every
other request forwarded to main (http_api/forwarding.py).

Writes main alone can serve go to main as they came: a PUT with ``?lease=`` or
``?ttl=`` (the lease service lives in main) before its body is read, and a txn
that puts a key on a lease once its body shows it (the route raises
:class:`http_api.errors.ServedByMain`; the body already read goes along).

The worker accepts nothing itself: main passes it connections
(http_api/dispatch.py) and :meth:`WorkerHttp.serve` serves each with the
same counted handler main uses, reporting its end so that main's connection
counts stay exact.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from typing import Any

from aiohttp import web

from http_api import routes_kv, routes_writes
from http_api.auth_api import AuthApi
from http_api.authn import AUTH
from http_api.body_budget import BUDGET, BodyBudget
from http_api.connections import (
    LIMITS,
    MAX_LINE_BYTES,
    ConnectionCounts,
    GuardedHandler,
    HttpLimits,
)
from http_api.errors import ServedByMain
from http_api.fair_share import SHARES, FairShare
from http_api.forwarding import MainForwarder
from http_api.kv_api import KvWorkerApi
from http_api.lease_context import LEASES_IN_MAIN
from http_api.middlewares import common_middlewares
from http_api.request_id import add_request_id_header
from http_api.request_size import body_limit
from http_api.server import SHUTDOWN_SECONDS

WORKER_SERVICE: web.AppKey[KvWorkerApi] = web.AppKey("worker_service", KvWorkerApi)
WORKER_ROUTES = frozenset(
    {
        ("GET", "/v1/kv/{key}"),
        ("GET", "/v1/kv"),
        ("PUT", "/v1/kv/{key}"),
        ("POST", "/v1/kv/{key}"),
        ("DELETE", "/v1/kv/{key}"),
        ("POST", "/v1/txn"),
    }
)
"""(method, route template) a worker serves itself; every other request goes to main."""
_LEASE_PARAMS = ("lease", "ttl")


def build_worker_app(
    service: KvWorkerApi,
    forwarder: MainForwarder,
    limits: HttpLimits,
    auth: AuthApi | None,
    *,
    metrics: bool = True,
) -> web.Application:
    @web.middleware
    async def forward_the_rest(request: web.Request, handler: Any) -> web.StreamResponse:
        resource = request.match_info.route.resource
        if (
            resource is None
            or (request.method, resource.canonical) not in WORKER_ROUTES
            or (request.method == "PUT" and any(p in request.query for p in _LEASE_PARAMS))
        ):
            return await forwarder.forward(request)
        try:
            response: web.StreamResponse = await handler(request)
        except ServedByMain:
            return await forwarder.forward(request, body=await request.read())
        return response

    app = web.Application(
        middlewares=common_middlewares(forward_the_rest, metrics=metrics),
        client_max_size=body_limit(service.max_value_bytes),
    )
    app[WORKER_SERVICE] = service
    app.on_response_prepare.append(add_request_id_header)
    if auth is not None:
        app[AUTH] = auth
    app[LIMITS] = limits
    app[SHARES] = FairShare(limits.fair_share_busy)
    app[BUDGET] = BodyBudget(
        limits.max_body_bytes_in_flight,
        body_limit(service.max_value_bytes),
        wait=limits.read_timeout / 2,
    )
    app[LEASES_IN_MAIN] = True

    async def close_forwarder(app: web.Application) -> None:
        await forwarder.close()

    app.on_cleanup.append(close_forwarder)
    routes_kv.add_routes(app, WORKER_SERVICE)
    routes_writes.add_routes(app, WORKER_SERVICE)
    return app


class _WorkerHandler(GuardedHandler):
    """Main's handler, telling main when its connection ends."""

    __slots__ = ("_on_end",)

    def __init__(self, on_end: Callable[[str], None], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_end = on_end

    def connection_lost(self, exc: BaseException | None) -> None:
        try:
            super().connection_lost(exc)
        finally:
            self._on_end(self._address)


class WorkerHttp:
    """Serves the connections main hands over; ``on_end(address)`` when one ends."""

    def __init__(
        self,
        app: web.Application,
        limits: HttpLimits,
        on_end: Callable[[str], None],
        *,
        ssl_context: ssl.SSLContext | None = None,
        handshake_timeout: float | None = None,
    ) -> None:
        self.counts = ConnectionCounts(limits)
        self._handler_args: dict[str, Any] = {
            "access_log": None,
            "max_line_size": MAX_LINE_BYTES,
            "max_field_size": MAX_LINE_BYTES,
            "keepalive_timeout": limits.idle_timeout,
        }
        self._runner = web.AppRunner(
            app, handle_signals=False, shutdown_timeout=SHUTDOWN_SECONDS, **self._handler_args
        )
        self.counts.shares = app[SHARES]
        self._on_end = on_end
        self._ssl_context = ssl_context
        self._handshake_timeout = handshake_timeout

    async def start(self) -> None:
        await self._runner.setup()

    async def serve(self, conn: socket.socket, address: str) -> None:
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None

        def handler() -> GuardedHandler:
            return _WorkerHandler(
                self._on_end, self.counts, server, loop=loop, **self._handler_args
            )

        try:
            if self._ssl_context is None:
                await loop.connect_accepted_socket(handler, conn)
            else:
                await loop.connect_accepted_socket(
                    handler,
                    conn,
                    ssl=self._ssl_context,
                    ssl_handshake_timeout=self._handshake_timeout,
                )
        except (OSError, ssl.SSLError, TimeoutError):
            # The handshake failed or timed out: no handler saw the connection.
            conn.close()
            self._on_end(address)

    async def stop(self) -> None:
        await self._runner.cleanup()
