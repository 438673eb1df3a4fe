"""Serving the app on a socket (so the composition root never imports aiohttp.web)."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from prometheus_client.registry import Collector

from http_api.app import build_app
from http_api.auth_api import AuthApi
from http_api.connections import (
    MAX_LINE_BYTES,
    ConnectionCounts,
    GuardedSite,
    HttpLimits,
)
from http_api.dispatch import DispatchingSite, Handoff
from http_api.fair_share import SHARES
from http_api.forwarding import trust_forwarded
from http_api.kv_api import KvApi
from http_api.lease_api import LeaseApi
from http_api.routes_audit import AuditApi
from http_api.tls import ServerTls, server_context

SHUTDOWN_SECONDS = 1.0


class HttpServer:
    def __init__(
        self,
        service: KvApi,
        host: str,
        port: int,
        audits: AuditApi | None = None,
        limits: HttpLimits | None = None,
        *,
        tls: ServerTls | None = None,
        auth: AuthApi | None = None,
        leases: LeaseApi | None = None,
        metrics: bool = True,
        collector: Collector | None = None,
        workers: Handoff | None = None,
        private_socket: str | None = None,
        worker_key: str = "",
    ) -> None:
        """``tls``: serve HTTPS only, with that certificate (its files are read now:
        a bad one raises OSError or ssl.SSLError before anything is served).
        ``metrics``: serve GET /metrics, with ``collector`` registered while serving.
        ``workers``: hand reads to HTTP worker processes (http_api/dispatch.py), which
        forward the rest to ``private_socket``, a unix socket path, with ``worker_key``."""
        self.limits = limits or HttpLimits()
        self.counts = ConnectionCounts(self.limits)
        self._handler_args: dict[str, Any] = {
            "access_log": None,
            # A 4096-byte key percent-encodes to ~12 KB of request line: raise
            # aiohttp's 8 KB line and header limits so such requests reach the app
            # (and its JSON errors); above them the handler answers JSON too.
            "max_line_size": MAX_LINE_BYTES,
            "max_field_size": MAX_LINE_BYTES,
            # An idle keep-alive connection is closed after this (aiohttp's default is
            # an hour: a client could hold thousands of sockets for nothing).
            "keepalive_timeout": self.limits.idle_timeout,
        }
        forwarded = None
        if workers is not None and private_socket is not None:
            forwarded = trust_forwarded(private_socket, worker_key)
        app = build_app(
            service,
            audits,
            self.limits,
            auth,
            leases,
            metrics=metrics,
            collector=collector,
            forwarded=forwarded,
        )
        self._workers = workers
        self._private_socket = private_socket
        self.counts.shares = app[SHARES]
        self._runner = web.AppRunner(
            app,
            handle_signals=False,
            # On SIGTERM, open streams (snapshot downloads, watches) get this long to
            # end before their handlers are cancelled.
            shutdown_timeout=SHUTDOWN_SECONDS,
            **self._handler_args,
        )
        self._host = host
        self._port = port
        self._tls = tls
        self._ssl_context = None if tls is None else server_context(tls)

    async def start(self) -> None:
        await self._runner.setup()
        handshake_timeout = None if self._tls is None else self._tls.handshake_timeout
        if self._workers is not None and self._private_socket is not None:
            # Only what workers forward arrives here (http_api/forwarding.py).
            await web.UnixSite(self._runner, self._private_socket).start()
            await DispatchingSite(
                self._runner,
                self._host,
                self._port,
                self.counts,
                self._handler_args,
                workers=self._workers,
                ssl_context=self._ssl_context,
                handshake_timeout=handshake_timeout,
            ).start()
            return
        site = GuardedSite(
            self._runner,
            self._host,
            self._port,
            self.counts,
            self._handler_args,
            ssl_context=self._ssl_context,
            handshake_timeout=handshake_timeout,
        )
        await site.start()

    async def stop(self) -> None:
        await self._runner.cleanup()
