"""How many bytes of request bodies a node holds at once (``--max-body-bytes-in-flight``).

Each request with a body holds its bytes, its decoded JSON and its commands
until it is answered (about 4x the body); the connection caps alone would let
1024 connections each send a 16 MiB body at once. So a request with a body
first reserves its declared length (or the body limit, when it is chunked)
from one budget for the node and keeps it until its answer is written. A
request that cannot get its share within ``wait`` seconds (half of
``--http-read-timeout``, the time a body being read has to arrive) is answered
503 ``overloaded`` (Retry-After), before its body is read; GETs and empty
bodies reserve nothing. A bulk load (POST /v1/kv:load) reads its body a line at
a time, so its length is not refused: it reserves what its chunks may hold,
(--load-chunks-in-flight + 1) x --max-entry-bytes (:data:`STREAMED_BODY_SHARE`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from node.errors import Overloaded, PayloadTooLarge

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BodyBudget:
    """Bytes of request bodies being served, against a cap (the event loop's thread)."""

    def __init__(self, max_bytes: int, body_limit: int, wait: float) -> None:
        self.max_bytes = max_bytes
        self.body_limit = body_limit
        self.wait = wait
        self.held = 0
        self._freed = asyncio.Condition()

    def share(self, request: web.Request) -> int:
        """What ``request`` reserves: its declared length, the body limit if chunked."""
        if not request.body_exists:
            return 0
        return min(request.content_length or self.body_limit, self.body_limit)

    async def reserve(self, size: int) -> None:
        """Wait for ``size`` bytes of the budget; Overloaded after ``wait`` seconds."""
        size = min(size, self.max_bytes)  # one request always fits alone
        async with self._freed:
            try:
                async with asyncio.timeout(self.wait):
                    await self._freed.wait_for(lambda: self.held + size <= self.max_bytes)
            except TimeoutError:
                busy = Overloaded(
                    f"this node is reading {self.held} bytes of request bodies, its "
                    "--max-body-bytes-in-flight; retry"
                )
                busy.retry_after = 1.0
                busy.close_connection = True  # its body is left unread
                raise busy from None
            self.held += size

    async def release(self, size: int) -> None:
        size = min(size, self.max_bytes)
        async with self._freed:
            self.held -= size
            self._freed.notify_all()


BUDGET: web.AppKey[BodyBudget] = web.AppKey("body_budget", BodyBudget)
STREAMED_BODY_SHARE = "streamed_body_share"
"""A handler with this attribute reads its body as a stream: the attribute, called
with the request, says how many bytes it holds at most (reserved instead of the
body's length, which is then no limit)."""


@web.middleware
async def hold_body_bytes(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Reserve the request's body bytes for as long as it is being served."""
    budget = request.app.get(BUDGET)
    declared = request.content_length
    streamed: Callable[[web.Request], int] | None = getattr(
        request.match_info.handler, STREAMED_BODY_SHARE, None
    )
    if streamed is not None and request.body_exists:
        # A streamed body (a bulk load) is read a line at a time, whatever its length:
        # it holds what the handler says it may hold at most.
        if budget is None:
            return await handler(request)
        size = streamed(request)
    else:
        if budget is not None and declared is not None and declared > budget.body_limit:
            # Refused on its declared length, before a byte of it is read.
            too_large = PayloadTooLarge(
                f"the body is {declared} bytes; this node reads at most {budget.body_limit}"
            )
            too_large.close_connection = True  # its body is left unread
            raise too_large
        size = 0 if budget is None else budget.share(request)
    if budget is None or size == 0:
        return await handler(request)
    await budget.reserve(size)
    try:
        return await handler(request)
    finally:
        await budget.release(size)
