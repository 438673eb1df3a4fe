"""The well-behaved client of bench/limits.py: CONNECTIONS asyncio workers on aiohttp
keep-alive connections from 127.0.0.1, each putting a 100-byte value to one of its own
keys and reading it back (GET, the node's default consistency), in a closed loop.

Its connections are open before an attack starts (the bench lets it run a moment
first), as a long-lived service's are; a connection the node closes is opened again.
What counts is what the requests that started or ended between ``start_counting`` and
``stop_counting`` got (leaving waits for those still in flight): a PUT or GET answered
200 (the GET with the value just written) is one op; a 429 or 503 is a documented
refusal, counted by code, and the worker then waits its Retry-After (at most 1 s) as
clients should; anything else (another status, a wrong value, a socket error, a
timeout) is an error, counted by what it was.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from types import TracebackType

import aiohttp

from bench.loadgen import session_for

CONNECTIONS = 16
KEYS_PER_WORKER = 100
VALUE_BYTES = 100
REQUEST_TIMEOUT_S = 10.0
DOCUMENTED_REFUSALS = (429, 503)


@dataclass
class Served:
    """What the client saw while counting."""

    ops: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else 0.0

    def percentile_ms(self, p: float) -> float:
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000


def _code(body: bytes) -> str:
    try:
        code = json.loads(body).get("code")
    except (ValueError, AttributeError):
        return "-"
    return code if isinstance(code, str) else "-"


class WellBehavedClient:
    """``async with WellBehavedClient(url, prefix) as client:`` runs the workers."""

    def __init__(
        self,
        url: str,
        prefix: str,
        connections: int = CONNECTIONS,
        *,
        headers: tuple[tuple[str, str], ...] = (),
        cafile: str | None = None,
    ) -> None:
        self.url = url
        self.headers = dict(headers)  # sent with every request (a bearer token)
        self.cafile = cafile  # the CA an https:// URL is verified against
        self.prefix = prefix
        self.connections = connections
        self.served = Served()
        self._counting = False
        self._started = 0.0
        self._stopping = False
        self._session: aiohttp.ClientSession | None = None
        self._workers: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> WellBehavedClient:
        self._session = session_for(self.cafile, REQUEST_TIMEOUT_S, limit=self.connections)
        self._workers = [
            asyncio.create_task(self._worker(self._session, i)) for i in range(self.connections)
        ]
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop_counting()
        self._stopping = True
        await asyncio.gather(*self._workers, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    def start_counting(self) -> None:
        self.served = Served()
        self._started = time.monotonic()
        self._counting = True

    def stop_counting(self) -> None:
        if self._counting:
            self._counting = False
            self.served.seconds = time.monotonic() - self._started

    async def _worker(self, session: aiohttp.ClientSession, index: int) -> None:
        for n in itertools.count():
            if self._stopping:
                return
            key = f"{self.url}/v1/kv/{self.prefix}{index}/{n % KEYS_PER_WORKER}"
            value = f"{index}-{n}".ljust(VALUE_BYTES, "v").encode()
            if await self._request(session, "PUT", key, value):
                await self._request(session, "GET", key, None, expect=value)

    async def _request(
        self,
        session: aiohttp.ClientSession,
        method: str,
        url: str,
        body: bytes | None,
        expect: bytes | None = None,
    ) -> bool:
        """True when answered 200 (with ``expect`` as the body, if given)."""
        counting = self._counting
        started = time.perf_counter()
        try:
            async with session.request(method, url, data=body, headers=self.headers) as response:
                status, data = response.status, await response.read()
                retry_after = response.headers.get("Retry-After", "1")
        except (aiohttp.ClientError, TimeoutError) as exc:
            if counting or self._counting:
                self.served.errors[f"{method} {type(exc).__name__}"] += 1
            await asyncio.sleep(0.05)
            return False
        ok = status == 200 and (expect is None or data == expect)
        if counting or self._counting:
            self._note(method, status, data, ok, time.perf_counter() - started)
        if status in DOCUMENTED_REFUSALS:
            await asyncio.sleep(min(1.0, float(retry_after) if retry_after.isdigit() else 1.0))
        return ok

    def _note(self, method: str, status: int, data: bytes, ok: bool, seconds: float) -> None:
        if ok:
            self.served.ops += 1
            self.served.latencies.append(seconds)
        elif status in DOCUMENTED_REFUSALS:
            self.served.refused[f"{status} {_code(data)}"] += 1
        elif status == 200:
            self.served.errors[f"{method} wrong value"] += 1
        else:
            self.served.errors[f"{method} {status} {_code(data)}"] += 1
