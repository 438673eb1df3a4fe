"""What a benchmark run sends (``Load``), what it measured (``Result``), and the Python side
of the load: preloading keys and the aiohttp closed-loop generator used when wrk is missing.

Two request shapes, kept identical to bench/wrk/kv.lua:

- ``rest`` (rkv, the trivial server): ``PUT {path}{key}`` with the value as body,
  ``GET {path}{key}{extra}`` where extra is the query string (``?consistency=stale``);
- ``etcd`` (the v3 JSON gateway): ``POST {path}`` with ``{"key": b64, "value": b64}`` for
  put, ``{"key": b64 ...extra}`` for range (extra: ``,"serializable":true``).

Every request, PUT or GET, names a random key among ``Load.keys`` (``prefix%06d``): the
GETs find the preloaded keys, the PUTs overwrite them. The ``grpc`` shape (etcd's native
client) is bench/etcd_native.py's.
"""

from __future__ import annotations

import asyncio
import base64
import random
import ssl
import time
from dataclasses import dataclass, field

import aiohttp

from bench.support import BenchError

VALUE = b"v" * 100  # every PUT writes 100 value bytes
PRELOAD_CONCURRENCY = 32


@dataclass(frozen=True)
class Api:
    kind: str  # "rest" | "etcd"
    put_path: str
    get_path: str
    linearizable: str  # the GET extra for a linearizable read
    stale: str  # the GET extra for a stale (etcd: serializable) read


REST = Api("rest", "/v1/kv/", "/v1/kv/", "?consistency=linearizable", "?consistency=stale")
GRPC = Api("grpc", "", "", "", "")  # etcd's native API: bench/etcd_native.py builds the requests


def etcd_api(prefix: str) -> Api:
    """etcd's gateway under ``prefix`` (/v3, /v3beta or /v3alpha)."""
    return Api("etcd", f"{prefix}/kv/put", f"{prefix}/kv/range", "", ',"serializable":true')


@dataclass(frozen=True)
class Load:
    system: str
    workload: str  # put | get_linearizable | get_stale
    op: str  # put | get
    api: str  # rest | etcd | grpc
    urls: tuple[str, ...]  # "http://127.0.0.1:port"; thread i loads urls[i % len(urls)]
    path: str
    extra: str
    key_prefix: str
    keys: int  # the key space: each request picks a random key prefix000000 .. among these
    connections: int
    threads: int
    duration: float
    headers: tuple[tuple[str, str], ...] = ()  # sent with every request (a bearer token)
    cafile: str | None = None  # the CA https:// URLs are verified against


@dataclass
class Result:
    load: Load
    generator: str  # "wrk" | "python" | "clientv3"
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: dict[str, int] = field(default_factory=dict)  # kind -> count, zeros left out
    raw: str = ""  # the generator's own output, kept for the JSON report
    elections: int | None = None  # leader changes seen during the run; None: not measured

    @property
    def ops(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())


def get_key(prefix: str, index: int) -> str:
    return f"{prefix}{index:06d}"


def request_parts(api: str, op: str, path: str, extra: str, key: str) -> tuple[str, str, bytes]:
    """(method, path, body) of one request, as kv.lua builds it."""
    if api == "etcd":
        b64 = base64.b64encode(key.encode()).decode()
        if op == "put":
            value = base64.b64encode(VALUE).decode()
            return "POST", path, f'{{"key":"{b64}","value":"{value}"}}'.encode()
        return "POST", path, f'{{"key":"{b64}"{extra}}}'.encode()
    if op == "put":
        return "PUT", path + key, VALUE
    return "GET", path + key + extra, b""


def answer_problem(api: str, op: str, status: int, body: bytes) -> str | None:
    """Why a response does not count as a success (kv.lua's response() check), or None."""
    if not 200 <= status < 300:
        return "non_2xx"
    if api == "etcd" and op == "get" and b'"kvs"' not in body:
        return "missing"
    return None


def session_for(cafile: str | None, timeout: float, limit: int = 100) -> aiohttp.ClientSession:
    """A session verifying https:// against ``cafile`` (the system's CAs without one)."""
    context = ssl.create_default_context(cafile=cafile) if cafile else None
    connector = aiohttp.TCPConnector(limit=limit, ssl=context if context else True)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout))


async def _send(
    session: aiohttp.ClientSession,
    base: str,
    parts: tuple[str, str, bytes],
    extra: tuple[tuple[str, str], ...] = (),
) -> tuple[int, bytes]:
    method, path, body = parts
    headers = {"Content-Type": "application/json"} if body.startswith(b"{") else {}
    headers.update(extra)
    async with session.request(method, base + path, data=body or None, headers=headers) as resp:
        return resp.status, await resp.read()


async def _preload(
    api: Api,
    url: str,
    prefix: str,
    count: int,
    headers: tuple[tuple[str, str], ...],
    cafile: str | None,
) -> None:
    keys = iter(range(count))
    failures: list[str] = []

    async def worker(session: aiohttp.ClientSession) -> None:
        for index in keys:
            parts = request_parts(api.kind, "put", api.put_path, "", get_key(prefix, index))
            status, body = await _send(session, url, parts, headers)
            if answer_problem(api.kind, "put", status, body):
                failures.append(f"{status} {body[:200]!r}")

    async with session_for(cafile, 30) as session:
        await asyncio.gather(*(worker(session) for _ in range(PRELOAD_CONCURRENCY)))
        check = request_parts(api.kind, "get", api.get_path, "", get_key(prefix, count - 1))
        status, body = await _send(session, url, check, headers)
        if answer_problem(api.kind, "get", status, body):
            failures.append(f"read-back {status} {body[:200]!r}")
    if failures:
        raise BenchError(f"preload of {count} keys to {url}: {len(failures)} failed: {failures[0]}")


def preload(
    api: Api,
    url: str,
    prefix: str,
    count: int,
    headers: tuple[tuple[str, str], ...] = (),
    cafile: str | None = None,
) -> None:
    """PUT keys prefix000000 .. through ``url`` (the leader) and read the last one back."""
    asyncio.run(_preload(api, url, prefix, count, headers, cafile))


async def _closed_loop(load: Load) -> Result:
    latencies: list[float] = []
    errors: dict[str, int] = {}
    deadline = time.monotonic() + load.duration
    pick = random.Random()

    def next_parts() -> tuple[str, str, bytes]:
        key = get_key(load.key_prefix, pick.randrange(load.keys))
        return request_parts(load.api, load.op, load.path, load.extra, key)

    async def worker(session: aiohttp.ClientSession, index: int) -> None:
        base = load.urls[index % len(load.urls)]
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                status, body = await _send(session, base, next_parts(), load.headers)
            except (aiohttp.ClientError, TimeoutError):
                errors["socket"] = errors.get("socket", 0) + 1
                continue
            latencies.append(time.perf_counter() - started)
            problem = answer_problem(load.api, load.op, status, body)
            if problem:
                errors[problem] = errors.get(problem, 0) + 1

    started = time.monotonic()
    async with session_for(load.cafile, 5, limit=load.connections) as session:
        await asyncio.gather(*(worker(session, i) for i in range(load.connections)))
    seconds = time.monotonic() - started
    return _result(load, latencies, errors, seconds)


def _result(load: Load, latencies: list[float], errors: dict[str, int], seconds: float) -> Result:
    latencies.sort()

    def percentile(p: float) -> float:
        if not latencies:
            return 0.0
        return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] * 1000

    requests = len(latencies)
    return Result(load, "python", requests, seconds, percentile(50), percentile(99), errors)


def run_python(load: Load) -> Result:
    """The fallback generator: ``load.connections`` aiohttp workers in a closed loop."""
    return asyncio.run(_closed_loop(load))
