"""Requests that wait (a lock, a campaign): the wait ends when the client goes away.

aiohttp does not cancel a handler whose client disconnected; a lock request
that waited on would keep its place in the lock's queue for nobody. While a
long-polled request waits, :func:`while_client_waits` looks at its connection
every ``GONE_CHECK_SECONDS`` and cancels the wait (which leaves the queue) once
the connection is closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from aiohttp import web

from node.errors import RequestError

GONE_CHECK_SECONDS = 1.0
T = TypeVar("T")


def client_gone(request: web.Request) -> bool:
    """Whether the request's connection is closed or closing (its client went away)."""
    transport = request.transport
    return transport is None or transport.is_closing()


async def while_client_waits(request: web.Request, work: Coroutine[Any, Any, T]) -> T:
    """``work``'s result; cancelled (and RequestError ``client_gone`` raised, an answer
    nobody reads) when the client goes away first, or when this handler is cancelled."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=GONE_CHECK_SECONDS)
            if done:
                return task.result()
            if client_gone(request):
                gone = RequestError("the client went away while waiting", code="client_gone")
                gone.close_connection = True
                raise gone
    finally:
        if not task.done():
            task.cancel()
            # Let the cancelled wait finish its cleanup (leaving the queue) first.
            await asyncio.gather(task, return_exceptions=True)
