"""Serving the app on a socket (so the composition root never imports aiohttp.web)."""

from __future__ import annotations

from aiohttp import web

from http_api.app import build_app
from http_api.kv_api import KvApi


class HttpServer:
    def __init__(self, service: KvApi, host: str, port: int) -> None:
        self._runner = web.AppRunner(build_app(service), access_log=None, handle_signals=False)
        self._host = host
        self._port = port

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port, reuse_address=True)
        await site.start()

    async def stop(self) -> None:
        await self._runner.cleanup()
