"""Requests a worker does not serve itself, passed to the node's main process.

A client connection handed to a worker (http_api/dispatch.py) may go on with
writes, watches, anything: the worker forwards every request that is not a
key-value read to main's private listener, a unix socket in a directory only
the node's user can open, and streams the body both ways. Main then serves it
exactly as if it came directly: its middlewares authenticate it, limit it and
count it. The client's address (and its verified certificate's user, with
mutual TLS) travel in headers that main trusts only on that listener and only
with the worker key main gave its workers (:func:`trust_forwarded`).

A WebSocket upgrade (GET /v1/leases/keepalive) is forwarded too: the worker
opens the same WebSocket to main and copies messages both ways.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from http_api.errors import json_response
from http_api.tls import FORWARDED_CERT_USER, client_certificate_user

logger = logging.getLogger(__name__)

WORKER_KEY_HEADER = "Rkv-Worker-Key"
CLIENT_HEADER = "Rkv-Forwarded-For"
CERT_USER_HEADER = "Rkv-Forwarded-Cert-User"
_TRUSTED = (WORKER_KEY_HEADER, CLIENT_HEADER, CERT_USER_HEADER)
_HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Expect",  # aiohttp answered 100-continue here already
        *_TRUSTED,
    )
)


def _unavailable() -> web.Response:
    return json_response(
        {
            "code": "node_unavailable",
            "message": "this node's main process does not answer; retry in a moment",
        },
        503,
        **{"Retry-After": "1"},
    )


class MainForwarder:
    """A worker's client of main's private listener."""

    def __init__(self, socket_path: str, worker_key: str) -> None:
        self._path = socket_path
        self._key = worker_key
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(path=self._path, limit=0),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _headers(self, request: web.Request) -> CIMultiDict[str]:
        headers = CIMultiDict(
            (name, value)
            for name, value in request.headers.items()
            if name.lower() not in _HOP_BY_HOP
        )
        headers[WORKER_KEY_HEADER] = self._key
        headers[CLIENT_HEADER] = request.remote or "?"
        user = client_certificate_user(request)
        if user is not None:
            headers[CERT_USER_HEADER] = user
        return headers

    async def forward(self, request: web.Request, body: bytes | None = None) -> web.StreamResponse:
        """Main's answer to ``request``; ``body``: the body, already read here (and
        decoded: it goes without its Content-Encoding)."""
        url = URL("http://rkv-main" + request.raw_path, encoded=True)
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await self._forward_websocket(request, url)
        headers = self._headers(request)
        data: Any = request.content if request.body_exists else None
        if body is not None:
            data = body
        if data is not None and (body is not None or "Content-Encoding" in headers):
            # aiohttp decoded the body here: it goes to main decoded, with its new length.
            headers.popall("Content-Encoding", None)
            headers.popall("Content-Length", None)
        try:
            upstream = await self._client().request(
                request.method, url, headers=headers, data=data, allow_redirects=False
            )
        except (aiohttp.ClientError, OSError) as exc:
            logger.warning("forwarding %s to main failed: %s", request.method, exc)
            return _unavailable()
        async with upstream:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in upstream.headers.items():
                if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                    response.headers.add(name, value)
            if upstream.content_length is not None:
                response.content_length = upstream.content_length
            if upstream.headers.get("Connection", "").lower() == "close":
                response.force_close()
            await response.prepare(request)
            if request.method != "HEAD":
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            await response.write_eof()
        return response

    async def _forward_websocket(self, request: web.Request, url: URL) -> web.StreamResponse:
        headers = self._headers(request)
        for name in ("Sec-WebSocket-Key", "Sec-WebSocket-Version", "Sec-WebSocket-Extensions"):
            headers.popall(name, None)
        try:
            upstream = await self._client().ws_connect(url, headers=headers, autoping=True)
        except aiohttp.WSServerHandshakeError as exc:  # main refused it: its answer, as JSON
            return json_response(
                {"code": "websocket_refused", "message": exc.message}, exc.status or 400
            )
        except (aiohttp.ClientError, OSError):
            return _unavailable()
        client = web.WebSocketResponse(autoping=True)
        await client.prepare(request)

        async def pump(source: Any, sink: Any) -> None:
            async for message in source:
                if message.type == aiohttp.WSMsgType.TEXT:
                    await sink.send_str(message.data)
                elif message.type == aiohttp.WSMsgType.BINARY:
                    await sink.send_bytes(message.data)
                else:
                    break

        tasks = [
            asyncio.create_task(pump(client, upstream)),
            asyncio.create_task(pump(upstream, client)),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await upstream.close()
            await client.close()
        return client


def trust_forwarded(socket_path: str, worker_key: str) -> Any:
    """Main's first middleware: a request a worker forwarded over main's private
    listener carries the client's address and certificate user; anywhere else those
    headers are dropped unread."""
    key = worker_key.encode()

    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        given = request.headers.get(WORKER_KEY_HEADER)
        if given is None and CLIENT_HEADER not in request.headers:
            response: web.StreamResponse = await handler(request)
            return response
        transport = request.transport
        on_listener = transport is not None and transport.get_extra_info("sockname") == socket_path
        trusted = on_listener and given is not None and hmac.compare_digest(given.encode(), key)
        headers = CIMultiDict(
            (n, v) for n, v in request.headers.items() if n.lower() not in _TRUSTED_LOWER
        )
        if not trusted:
            response = await handler(request.clone(headers=headers))
            return response
        forwarded = request.clone(headers=headers, remote=request.headers.get(CLIENT_HEADER, "?"))
        user = request.headers.get(CERT_USER_HEADER)
        if user:
            forwarded[FORWARDED_CERT_USER] = user
        response = await handler(forwarded)
        return response

    return middleware


_TRUSTED_LOWER = frozenset(h.lower() for h in _TRUSTED)
