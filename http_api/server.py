"""Serving the app on a socket (so the composition root never imports aiohttp.web)."""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from http_api.app import build_app
from http_api.kv_api import KvApi
from http_api.routes_audit import AuditApi

MAX_LINE_BYTES = 64 * 1024
SHUTDOWN_SECONDS = 1.0


class MalformedRequestFilter(logging.Filter):
    """A request aiohttp's parser refuses (a NUL byte in a header, a line over the
    limit...) gets aiohttp's own 400 and is logged by it as an ERROR with a
    traceback. It is the client's mistake, not the node's: one line at INFO."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            remote = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            record.msg = "refused a malformed request from %s: %s"
            record.args = (remote, " ".join(str(error.message).split())[:300])
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


protocol_logger = logging.getLogger(__name__ + ".protocol")
protocol_logger.addFilter(MalformedRequestFilter())


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
            logger=protocol_logger,
        )
        self._host = host
        self._port = port

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port, reuse_address=True)
        await site.start()

    async def stop(self) -> None:
        await self._runner.cleanup()
