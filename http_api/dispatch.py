"""The node's public port with HTTP workers (--http-workers): main accepts every
connection and decides who serves it.

Main alone owns the listening socket, so no worker can accept a connection on
its own (a worker left behind by a dead node has nothing to accept from). For
each new connection:

- over either connection cap (http_api/connections.py) it is refused by main,
  exactly as without workers;
- plain HTTP: main peeks at the first request line (``MSG_PEEK``: the bytes
  stay for whoever serves it), waiting at most :data:`PEEK_SECONDS`. A request
  a worker serves (:func:`is_worker_line`: ``GET /v1/kv/{key}``, ``GET
  /v1/kv``, ``PUT``/``POST``/``DELETE /v1/kv/{key}`` and ``POST /v1/txn``; not
  a PUT with ``lease=`` or ``ttl=``, which main serves) goes to the least
  loaded worker, its socket passed over the worker's link; anything
  else, a connection that sends nothing in time, or no worker ready, main
  serves itself with the handler it uses without workers;
- HTTPS: nothing can be read before the handshake, so connections go round
  robin over main and the ready workers, and whoever gets one does the
  handshake (same certificate, same timeout).

A handed connection counts towards the node's caps in main until its worker
reports it closed. A worker serves later requests of a connection that it does
not serve itself by passing them to main (http_api/forwarding.py).
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import ssl
from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web

from http_api.connections import ConnectionCounts, GuardedHandler

logger = logging.getLogger(__name__)

PEEK_SECONDS = 1.0
"""How long main waits for a new plain-HTTP connection's first request line before
serving it itself (its read and idle timeouts then apply as without workers)."""
PEEK_BYTES = 16 * 1024
"""A first request line longer than this (a very long key) is served by main."""
_PARTIAL_PAUSE = 0.005

_READ_LINE = re.compile(rb"GET /v1/kv(?:[/?][^ ]*)? HTTP/1\.[01]")
_WRITE_LINE = re.compile(
    rb"(?:(?:PUT|POST|DELETE) /v1/kv/[^ ?]+|POST /v1/txn)(?P<query>\?[^ ]*)? HTTP/1\.[01]"
)
_LEASE_PARAM = re.compile(rb"[?&](?:lease|ttl)(?:[=&]|$)")


def is_read_line(line: bytes) -> bool:
    """Whether an HTTP request line (without its CRLF) is a key-value read a worker
    serves: GET /v1/kv/{key} or GET /v1/kv, with any query."""
    return _READ_LINE.fullmatch(line.rstrip(b"\r")) is not None


def is_worker_line(line: bytes) -> bool:
    """Whether an HTTP request line (without its CRLF) is one a worker serves: a
    key-value read (:func:`is_read_line`) or write, but a PUT on a lease (main's)."""
    line = line.rstrip(b"\r")
    if _READ_LINE.fullmatch(line) is not None:
        return True
    write = _WRITE_LINE.fullmatch(line)
    if write is None:
        return False
    query = write.group("query")
    return query is None or _LEASE_PARAM.search(query) is None


def first_line(peeked: bytes) -> bytes | None:
    """The first request line in the bytes peeked so far; None while incomplete."""
    end = peeked.find(b"\n")
    return None if end < 0 else peeked[:end]


class Handoff(Protocol):
    """The worker processes, as the dispatcher sees them (node/cli/http_workers.py)."""

    def ready_count(self) -> int: ...

    def hand(self, conn: socket.socket, address: str) -> bool:
        """Pass ``conn`` to the least loaded ready worker (and close it here): False
        when no worker is ready (``conn`` untouched)."""
        ...


def _address_of(peer: Any) -> str:
    return str(peer[0]) if isinstance(peer, tuple) and peer else "?"


class DispatchingSite(web.BaseSite):
    """Main's listening socket, handing connections to workers (module docstring)."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        counts: ConnectionCounts,
        handler_args: dict[str, Any],
        *,
        workers: Handoff,
        ssl_context: ssl.SSLContext | None = None,
        handshake_timeout: float | None = None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host = host
        self._port = port
        self._counts = counts
        self._handler_args = handler_args
        self._workers = workers
        self._handshake_timeout = handshake_timeout
        self._listeners: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._turn = 0

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(
            self._host or None, self._port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        for family, kind, proto, _name, address in dict.fromkeys(
            (i[0], i[1], i[2], i[3], i[4]) for i in infos
        ):
            listener = socket.socket(family, kind, proto)
            self._listeners.append(listener)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            listener.bind(address)
            listener.listen(self._backlog)
            listener.setblocking(False)
        for listener in self._listeners:
            self._spawn(self._accept(listener))

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()
        self._runner._unreg_site(self)

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, peer = await loop.sock_accept(listener)
            except OSError as exc:  # EMFILE and the like: wait and go on, as asyncio does
                logger.warning("accepting a connection failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            conn.setblocking(False)
            self._spawn(self._route(conn, _address_of(peer)))

    async def _route(self, conn: socket.socket, address: str) -> None:
        try:
            if self._counts.refusal(address) is not None:
                await self._serve_here(conn)  # the handler answers the refusal
                return
            self._counts.opened(address)  # held while peeking, and while a worker serves it
            handed = False
            try:
                if self._wants_worker(await self._peeked_line(conn)):
                    handed = self._workers.hand(conn, address)
            finally:
                if not handed:
                    self._counts.closed(address)
            if not handed:
                await self._serve_here(conn)
        except asyncio.CancelledError:
            conn.close()
            raise
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            logger.debug("dropped a connection from %s: %s", address, exc)
            conn.close()

    def _wants_worker(self, line: bytes | None) -> bool:
        if self._ssl_context is not None:
            share = self._workers.ready_count() + 1
            self._turn = (self._turn + 1) % share
            return self._turn != 0
        return line is not None and is_worker_line(line)

    async def _peeked_line(self, conn: socket.socket) -> bytes | None:
        """The first request line, or None (TLS, nothing in time, closed, too long)."""
        if self._ssl_context is not None or self._workers.ready_count() == 0:
            return None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PEEK_SECONDS
        while True:
            try:
                peeked = conn.recv(PEEK_BYTES, socket.MSG_PEEK)
            except BlockingIOError:
                peeked = None
            if peeked == b"":
                return None
            if peeked is not None:
                line = first_line(peeked)
                if line is not None or len(peeked) >= PEEK_BYTES:
                    return line
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            if peeked:  # part of a line: readable already, so wait a moment instead
                await asyncio.sleep(min(_PARTIAL_PAUSE, remaining))
            elif not await _readable(loop, conn, remaining):
                return None

    async def _serve_here(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        factory: Callable[[], GuardedHandler] = lambda: GuardedHandler(  # noqa: E731
            self._counts, server, loop=loop, **self._handler_args
        )
        if self._ssl_context is None:
            await loop.connect_accepted_socket(factory, conn)
        else:
            await loop.connect_accepted_socket(
                factory,
                conn,
                ssl=self._ssl_context,
                ssl_handshake_timeout=self._handshake_timeout,
            )


async def _readable(loop: asyncio.AbstractEventLoop, conn: socket.socket, timeout: float) -> bool:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    fd = conn.fileno()
    loop.add_reader(fd, wake)
    try:
        await asyncio.wait_for(ready, timeout)
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)
    return True
