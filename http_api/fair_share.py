"""Each client address's share of the event loop (issue 15: one client must not starve
the others).

A node serves every client on one event loop. The caps on connections, bodies
and results bound what one request may take, but not how many expensive
requests one client sends: a loop of refused 16 MiB bodies, of scans of large
values or of malformed requests on new connections would take the whole loop,
and every other client would wait behind it.

So the node meters the loop's time by client address: the time spent parsing
what a connection sends and running its requests' handlers (measured around
each step of the handler's coroutine, so time spent waiting is not counted),
with a memory of about a second (an exponential decay). While the loop is
busy (clients used more than ``busy`` of it over that second) and more than
one address has requests in flight, an address that used more than the mean
of those addresses waits before its next request is served, until its share
has decayed to the mean. A waiting request costs nothing: its body is not read
and the client gets no error, only a later answer. A lone client, or clients
on an idle loop, never wait. ``--fair-share-busy`` sets ``busy``; 1 turns the
sharing off.

Everything here runs on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from aiohttp import web

MEMORY_SECONDS = 1.0
"""The decay's time constant: a cost weighs 1/e of itself after this long."""
TICK_SECONDS = 0.1
"""How often the costs are decayed and the mean recomputed."""
FORGET_SECONDS = 0.0005
"""A decayed cost below this is dropped: the address has been quiet."""
MAX_WAIT_STEP = 0.25
"""The longest single wait; the share is looked at again after it."""
HEAVY_REQUEST_SECONDS = 0.005
"""Requests that take more of the loop than this on average are heavy: their
address's weight is HEAVY_REQUEST_SECONDS / its average (down to MIN_WEIGHT),
and its share is the mean scaled by its weight over the highest weight among
the addresses waiting; so cheap requests go first, as a scheduler favours
interactive work over batch work, and clients that are all heavy share alike."""
MIN_WEIGHT = 0.1
CONNECTION_SECONDS = 0.0005
"""Charged for each new connection on top of what is measured: accepting and
closing a socket happen in the event loop's C code, out of the meter's sight."""

T = TypeVar("T")


class FairShare:
    """Loop time used by client address, and how long an address should wait."""

    def __init__(self, busy: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.busy = busy
        self._clock = clock
        self._cost: dict[str, float] = {}
        self._requests: dict[str, float] = {}
        """Requests started by address, decayed as the costs are."""
        self._total = 0.0
        self._in_flight: Counter[str] = Counter()
        self._mean = math.inf
        self._top_weight = 1.0
        """The highest weight among the addresses with requests in flight: weights are
        relative to it, so clients that are all heavy share the loop equally."""
        self._ticked = clock()
        self.waits = 0
        """Requests, new connections and watch batches made to wait so far."""

    def charge(self, address: str, seconds: float) -> None:
        """``address`` used the loop for ``seconds``."""
        self._tick()
        before = self._cost.get(address, 0.0)
        after = max(0.0, before + seconds)  # an advance given back may have decayed
        self._cost[address] = after
        self._total = max(0.0, self._total + after - before)

    def cost(self, address: str) -> float:
        """The address's decayed loop time (about its seconds of the last second)."""
        return self._cost.get(address, 0.0)

    def summary(self) -> dict[str, float | int]:
        """For /v1/status: the setting, the loop time used lately, by how many
        addresses, and how many requests and connections were made to wait."""
        self._tick()
        return {
            "busy": self.busy,
            "loop_busy": round(self._total / MEMORY_SECONDS, 3),
            "clients": len(self._cost),
            "waits": self.waits,
        }

    def started(self, address: str) -> None:
        """A request from ``address`` is in flight (waiting or being served)."""
        self._in_flight[address] += 1
        self._requests[address] = self._requests.get(address, 0.0) + 1.0

    def typical_cost(self, address: str) -> float:
        """The address's average loop time per request (decayed), 0 if none yet."""
        requests = self._requests.get(address, 0.0)
        return self._cost.get(address, 0.0) / requests if requests > 0 else 0.0

    def connected(self, address: str) -> None:
        """A new connection from ``address``."""
        self.charge(address, CONNECTION_SECONDS)

    def ended(self, address: str) -> None:
        self._in_flight[address] -= 1
        if self._in_flight[address] <= 0:
            del self._in_flight[address]

    def wait_seconds(self, address: str) -> float:
        """How long ``address`` should wait before its next request is served: 0 unless
        the loop is busy, others want it too and ``address`` used more than the mean."""
        self._tick()
        if self.busy >= 1.0 or self._total < self.busy * MEMORY_SECONDS:
            return 0.0
        cost = self._cost.get(address, 0.0)
        if cost <= self._mean * MIN_WEIGHT:
            return 0.0
        allowed = self._mean * self.weight(address) / self._top_weight
        if cost <= allowed:
            return 0.0
        # cost * exp(-t / MEMORY) == allowed  <=>  t = MEMORY * ln(cost / allowed)
        return min(MAX_WAIT_STEP, MEMORY_SECONDS * math.log(cost / allowed))

    async def wait_turn(self, address: str) -> None:
        """Wait while ``address`` is over its share (counted once in ``waits``)."""
        wait = self.wait_seconds(address)
        if wait <= 0:
            return
        self.waits += 1
        while wait > 0:
            await asyncio.sleep(wait)
            wait = self.wait_seconds(address)

    def weight(self, address: str) -> float:
        """1 for an address of cheap requests, down to MIN_WEIGHT for heavy ones."""
        average = self.typical_cost(address)
        return max(MIN_WEIGHT, min(1.0, HEAVY_REQUEST_SECONDS / average)) if average else 1.0

    def _tick(self) -> None:
        now = self._clock()
        elapsed = now - self._ticked
        if elapsed < TICK_SECONDS:
            return
        self._ticked = now
        factor = math.exp(-elapsed / MEMORY_SECONDS)
        self._cost = {a: c * factor for a, c in self._cost.items() if c * factor >= FORGET_SECONDS}
        self._requests = {a: n * factor for a, n in self._requests.items() if a in self._cost}
        self._total = sum(self._cost.values())
        wanting = [a for a in self._in_flight if a in self._cost]
        if len(wanting) < 2:  # a lone client is nobody's rival
            self._mean = math.inf
            self._top_weight = 1.0
        else:
            self._mean = sum(self._cost[a] for a in wanting) / len(wanting)
            self._top_weight = max(self.weight(a) for a in wanting)


class _Metered(Generator[Any, Any, T]):
    """Drives ``inner`` step by step, charging each step's time to ``address``."""

    __slots__ = ("_address", "_inner", "_shares")

    def __init__(self, inner: Coroutine[Any, Any, T], shares: FairShare, address: str) -> None:
        self._inner = inner
        self._shares = shares
        self._address = address

    def send(self, value: Any) -> Any:
        start = time.perf_counter()
        try:
            return self._inner.send(value)
        finally:
            self._shares.charge(self._address, time.perf_counter() - start)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        start = time.perf_counter()
        try:
            if val is None and tb is None:
                return self._inner.throw(typ)
            return self._inner.throw(typ, val, tb)
        finally:
            self._shares.charge(self._address, time.perf_counter() - start)

    def close(self) -> None:
        self._inner.close()


class _Awaiting(Awaitable[T]):
    __slots__ = ("_metered",)

    def __init__(self, metered: _Metered[T]) -> None:
        self._metered = metered

    def __await__(self) -> Generator[Any, Any, T]:
        return self._metered


def metered(inner: Coroutine[Any, Any, T], shares: FairShare, address: str) -> Awaitable[T]:
    """``inner``, awaitable, its loop time charged to ``address``."""
    return _Awaiting(_Metered(inner, shares, address))


SHARES: web.AppKey[FairShare] = web.AppKey("fair_share", FairShare)


_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rkv-http-work")
"""One thread for the encoding of large answers: with more, busy threads would take
the interpreter lock in turns with the loop, and the loop would get a small share."""


async def in_thread(
    request: web.Request, work: Callable[..., T], *args: Any, shared_pool: bool = False
) -> T:
    """``work(*args)`` in a worker thread, its CPU time charged to the request's
    address: for work long enough to hold the loop (the interpreter switches threads
    every few milliseconds, so other requests are served meanwhile). By default the
    one worker thread of large answers; ``shared_pool``: the loop's default pool (for
    short, frequent blocking reads that must not queue behind a large answer)."""
    loop = asyncio.get_running_loop()
    executor = None if shared_pool else _WORKER
    shares = request.app.get(SHARES)
    if shares is None:
        return await loop.run_in_executor(executor, functools.partial(work, *args))

    def timed() -> tuple[T, float]:
        start = time.thread_time()
        result = work(*args)
        return result, time.thread_time() - start

    result, seconds = await loop.run_in_executor(executor, timed)
    shares.charge(request.remote or "?", seconds)
    return result


async def pace(request: web.Request) -> None:
    """In a long stream, between two sends: wait while the request's address is over
    its share, so a heavy reader gets larger, fewer batches instead of the loop."""
    shares = request.app.get(SHARES)
    if shares is not None:
        await shares.wait_turn(request.remote or "?")
