"""The long-lived streams a node serves, counted: watches (GET /v1/watch) and election
observers (GET /v1/elections/{name}?observe=true) share --max-watches (503
``too_many_watches``) and --max-watches-per-address (429
``too_many_watches_per_address``), both with Retry-After.

A server shutdown (aiohttp's on_shutdown) calls :meth:`StreamSlots.close`,
which every open stream's handler waits on along with its own work, so no stream
holds up stopping the node.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

from http_api.connections import HttpLimits
from node.errors import LimitReached, RequestError, Unavailable


class StreamSlots:
    def __init__(self) -> None:
        self.open = 0
        """Open streams (their handlers have not returned yet)."""
        self.by_address: Counter[str] = Counter()
        """Open streams by client address."""
        self._closing = asyncio.Event()

    def refusal(self, limits: HttpLimits, address: str) -> RequestError | None:
        """Why one more stream from ``address`` is refused, or None."""
        if self.open >= limits.max_watches:
            busy = Unavailable(
                f"this node serves {self.open} watches and observers, its --max-watches",
                code="too_many_watches",
            )
            busy.retry_after = 1.0
            return busy
        if self.by_address[address] >= limits.max_watches_per_address:
            crowded = LimitReached(
                f"{address} holds {self.by_address[address]} watches and observers on this "
                "node, its --max-watches-per-address",
                code="too_many_watches_per_address",
            )
            crowded.retry_after = 1.0
            return crowded
        return None

    @contextmanager
    def hold(self, limits: HttpLimits, address: str) -> Iterator[None]:
        """One stream from ``address`` for the block, or the refusal raised."""
        refusal = self.refusal(limits, address)
        if refusal is not None:
            raise refusal
        self.open += 1
        self.by_address[address] += 1
        try:
            yield
        finally:
            self.open -= 1
            self.by_address[address] -= 1
            if self.by_address[address] <= 0:
                del self.by_address[address]

    @property
    def closed(self) -> bool:
        return self._closing.is_set()

    def close(self) -> None:
        self._closing.set()

    async def wait_closed(self) -> None:
        await self._closing.wait()


STREAMS = web.AppKey("stream_slots", StreamSlots)
