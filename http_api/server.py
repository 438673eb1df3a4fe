"""Serving the app on a socket (so the composition root never imports aiohttp.web)."""

from __future__ import annotations

from aiohttp import web

from http_api.app import build_app
from http_api.kv_api import KvApi
from http_api.routes_audit import AuditApi

MAX_LINE_BYTES = 64 * 1024
SHUTDOWN_SECONDS = 1.0


class HttpServer:
    def __init__(
        self,
        service: KvApi,
        host: str,
        port: int,
        audits: AuditApi | None = None,
        idle_timeout: float = 60.0,
    ) -> None:
        # A 4096-byte key percent-encodes to ~12 KB of request line: raise
        # aiohttp's 8 KB line and header limits so such requests reach the app
        # (and its JSON errors) instead of a plain-text 400.
        self._runner = web.AppRunner(
            build_app(service, audits),
            access_log=None,
            handle_signals=False,
            max_line_size=MAX_LINE_BYTES,
            max_field_size=MAX_LINE_BYTES,
            # On SIGTERM, open streams (snapshot downloads, watches) get this long to
            # end before their handlers are cancelled.
            shutdown_timeout=SHUTDOWN_SECONDS,
            # An idle keep-alive connection is closed after this (aiohttp's default is
            # an hour: a client could hold thousands of sockets for nothing).
            keepalive_timeout=idle_timeout,
        )
        self._host = host
        self._port = port

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port, reuse_address=True)
        await site.start()

    async def stop(self) -> None:
        await self._runner.cleanup()
