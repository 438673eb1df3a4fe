"""The asyncio client: :class:`AsyncRkvClient` over aiohttp's client; and
:class:`AsyncProducer`, its idempotent producer.

It belongs to the event loop that first used it. Close it (or use
``async with``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping, Sequence
from types import SimpleNamespace, TracebackType
from typing import Any, TypeVar, cast

import aiohttp
from yarl import URL

from http_api.client.async_lease_methods import _AsyncLeaseMethods
from http_api.client.auth_methods import _AsyncAuthMethods
from http_api.client.bulk_load import (
    LOAD_PATH,
    LoadProgress,
    LoadSource,
    LoadTally,
    blocks,
    source_lines,
)
from http_api.client.credentials import Credentials
from http_api.client.errors import RkvClientError
from http_api.client.lease_model import FencingLike, HasLeaseId
from http_api.client.model import Alarm, BytesLike, Compare, Item, Op, ScanPage, TxnResult
from http_api.client.observing import MAX_LINE
from http_api.client.operations import _BaseClient, _Write
from http_api.client.producer import DEFAULT_DEADLINE, _ProducerCore, _ProducerView
from http_api.client.rules import IDLE_RECONNECT
from http_api.client.sync_load import MIN_READ_TIMEOUT
from http_api.client.wire import _Failure, _Outcome, _Plan, _Reply, _Send, _Sleep

T = TypeVar("T")


async def _headers_sent(
    session: aiohttp.ClientSession,
    context: SimpleNamespace,
    params: aiohttp.TraceRequestHeadersSentParams,
) -> None:
    marker = context.trace_request_ctx
    if isinstance(marker, SimpleNamespace):
        marker.sent = True


class _AsyncTransport:
    def __init__(self, credentials: Credentials) -> None:
        self._session: aiohttp.ClientSession | None = None
        # True: aiohttp's default verification (the system's CAs) for https URLs.
        self._ssl: ssl.SSLContext | bool = credentials.ssl_context() or True
        self._auth = credentials.headers()

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            trace = aiohttp.TraceConfig()
            trace.on_request_headers_sent.append(_headers_sent)
            session = aiohttp.ClientSession(
                trace_configs=[trace],
                connector=aiohttp.TCPConnector(keepalive_timeout=IDLE_RECONNECT, ssl=self._ssl),
                auto_decompress=False,
            )
            # aiohttp resends a PUT or DELETE once when the connection drops after
            # sending it; for rkv that could apply a write twice, so turn it off.
            if hasattr(session, "_retry_connection"):
                session._retry_connection = False
            self._session = session
        return self._session

    async def send(self, action: _Send) -> _Reply | _Failure:
        marker = SimpleNamespace(sent=False)
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=action.timeout, sock_read=action.timeout
        )
        try:
            async with self._get_session().request(
                action.method,
                URL(action.base + action.target, encoded=True),
                data=action.body,
                headers={**action.headers, **self._auth},
                timeout=timeout,
                allow_redirects=False,
                trace_request_ctx=marker,
            ) as response:
                body = await response.read()
                headers = {name.lower(): value for name, value in response.headers.items()}
                return _Reply(response.status, headers, body)
        except (aiohttp.ClientError, OSError) as exc:  # TimeoutError is an OSError
            return _Failure(exc, sent=bool(marker.sent))

    async def stream(self, action: _Send) -> tuple[_Reply | _Failure, AsyncGenerator[bytes, None]]:
        """A GET read line by line (NDJSON): the answer (a 200 with an empty body, or the
        whole refusal) and the lines (a read failure raises OSError from them;
        closing them releases the connection)."""
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=action.timeout, sock_read=action.timeout
        )
        marker = SimpleNamespace(sent=False)
        try:
            response = await self._get_session().request(
                action.method,
                URL(action.base + action.target, encoded=True),
                headers={**action.headers, **self._auth},
                timeout=timeout,
                allow_redirects=False,
                trace_request_ctx=marker,
            )
        except (aiohttp.ClientError, OSError) as exc:
            return _Failure(exc, sent=bool(marker.sent)), _no_lines()
        headers = {name.lower(): value for name, value in response.headers.items()}
        if response.status != 200:
            try:
                body = await response.content.read(MAX_LINE)
            except (aiohttp.ClientError, OSError) as exc:
                return _Failure(exc, sent=True), _no_lines()
            finally:
                response.close()
            return _Reply(response.status, headers, body), _no_lines()
        return _Reply(200, headers, b""), _lines(response)

    async def load(
        self,
        url: str,
        target: str,
        *,
        lines: Iterator[bytes],
        tally: LoadTally,
        progress: Callable[[LoadProgress], None] | None,
        timeout: float,
    ) -> LoadProgress:
        """A bulk load's request: the body streamed from ``lines`` while the progress
        lines are read (aiohttp writes the body in a task of its own)."""

        async def body() -> AsyncIterator[bytes]:
            for block in blocks(lines):
                yield block

        client_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=timeout, sock_read=max(timeout, MIN_READ_TIMEOUT)
        )
        try:
            async with self._get_session().post(
                URL(url + target, encoded=True),
                data=body(),
                headers={"Content-Type": "application/x-ndjson", **self._auth},
                timeout=client_timeout,
                allow_redirects=False,
            ) as response:
                if response.status != 200:
                    headers = {name.lower(): value for name, value in response.headers.items()}
                    answer = await response.content.read(MAX_LINE)
                    raise tally.refused(_Reply(response.status, headers, answer), url)
                while line := await response.content.readline():
                    counted = tally.feed(line, url)
                    if progress is not None:
                        progress(counted)
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise tally.broken(exc, url) from exc
        if not tally.done:
            raise tally.broken(EOFError("the answer ended before the load did"), url)
        return tally.progress

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


async def _no_lines() -> AsyncGenerator[bytes, None]:
    return
    yield b""  # an async generator that yields nothing


async def _lines(response: aiohttp.ClientResponse) -> AsyncGenerator[bytes, None]:
    try:
        while line := await response.content.readline():
            yield line
    except (aiohttp.ClientError, ValueError) as exc:  # ValueError: a line too long
        raise OSError(f"the stream broke: {exc!r}") from exc
    finally:
        response.close()


class AsyncRkvClient(_AsyncAuthMethods, _AsyncLeaseMethods, _BaseClient[_AsyncTransport]):
    """The asyncio twin of :class:`RkvClient`: the same methods, as coroutines
    (``scan`` and ``observe`` are async iterators: ``async for item in
    client.scan(...)``; leases, locks and elections:
    :mod:`http_api.client.async_lease_methods`)."""

    def _new_transport(self, credentials: Credentials) -> _AsyncTransport:
        return _AsyncTransport(credentials)

    async def _stream(self, action: _Send) -> tuple[_Reply | _Failure, AsyncGenerator[bytes, None]]:
        return await self._transport.stream(action)

    async def _run(self, plan: _Plan[T]) -> T:
        outcome: _Outcome = None
        try:
            while True:
                action = plan.send(outcome)
                if isinstance(action, _Sleep):
                    await asyncio.sleep(action.seconds)
                    outcome = None
                else:
                    outcome = await self._transport.send(action)
        except StopIteration as stop:
            return cast(T, stop.value)

    async def get(
        self,
        key: BytesLike,
        consistency: str = "linearizable",
        min_version: int | None = None,
    ) -> Item:
        return await self._run(self._core.get(key, consistency, min_version))

    async def put(
        self,
        key: BytesLike,
        value: BytesLike,
        *,
        if_version: int | None = None,
        create_only: bool = False,
        lease: int | HasLeaseId | None = None,
        ttl: int | None = None,
        fencing: FencingLike | None = None,
    ) -> int:
        return await self._run(
            self._core.put(
                key, value, if_version, create_only, lease=lease, ttl=ttl, fencing=fencing
            )
        )

    async def delete(
        self,
        key: BytesLike,
        *,
        if_version: int | None = None,
        fencing: FencingLike | None = None,
    ) -> int:
        return await self._run(self._core.delete(key, if_version, fencing))

    async def incr(self, key: BytesLike, by: int = 1, *, fencing: FencingLike | None = None) -> int:
        return await self._run(self._core.incr(key, by, fencing))

    async def append(
        self, key: BytesLike, value: BytesLike, *, fencing: FencingLike | None = None
    ) -> int:
        return await self._run(self._core.append(key, value, fencing))

    async def producer(
        self,
        transactional_id: str | None = None,
        *,
        reinit_on_fence: bool = False,
        deadline: float = DEFAULT_DEADLINE,
    ) -> AsyncProducer:
        """Register an idempotent producer: ``await client.producer(...)``."""
        state = _ProducerCore(
            self._core, transactional_id, reinit_on_fence=reinit_on_fence, deadline=deadline
        )
        await self._run(state.init())
        return AsyncProducer(self, state)

    def resume_producer(
        self,
        producer_id: int,
        epoch: int,
        next_sequence: int = 0,
        *,
        transactional_id: str | None = None,
        reinit_on_fence: bool = False,
        deadline: float = DEFAULT_DEADLINE,
    ) -> AsyncProducer:
        """A producer registered before, writing from ``next_sequence`` on (no I/O)."""
        state = _ProducerCore.resumed(
            self._core,
            producer_id,
            epoch,
            next_sequence,
            transactional_id=transactional_id,
            reinit_on_fence=reinit_on_fence,
            deadline=deadline,
        )
        return AsyncProducer(self, state)

    async def scan_page(
        self,
        prefix: BytesLike = b"",
        *,
        limit: int = 100,
        start_after: str | None = None,
        consistency: str = "linearizable",
        min_version: int | None = None,
    ) -> ScanPage:
        return await self._run(
            self._core.scan_page(prefix, limit, start_after, consistency, min_version)
        )

    async def scan(
        self,
        prefix: BytesLike = b"",
        *,
        limit: int = 100,
        consistency: str = "linearizable",
        min_version: int | None = None,
    ) -> AsyncIterator[Item]:
        pages = self._core.scan_pages(prefix, limit, consistency, min_version)
        while (plan := pages.next()) is not None:
            for item in (await self._run(plan)).items:
                yield item

    async def txn(
        self,
        compare: Sequence[Compare] = (),
        success: Sequence[Op] = (),
        failure: Sequence[Op] = (),
        *,
        fencing: FencingLike | None = None,
    ) -> TxnResult:
        return await self._run(self._core.txn(compare, success, failure, fencing))

    async def txn_raw(
        self,
        body: Mapping[str, Any],
        *,
        encoding: str = "base64",
        fencing: FencingLike | None = None,
    ) -> dict[str, Any]:
        return await self._run(self._core.txn_raw(body, encoding, fencing))

    async def alarms(self) -> list[Alarm]:
        """As :meth:`http_api.client.RkvClient.alarms`."""
        return await self._run(self._core.alarms())

    async def disarm_alarms(self, member: str | None = None, kind: str = "nospace") -> list[Alarm]:
        """As :meth:`http_api.client.RkvClient.disarm_alarms`."""
        return await self._run(self._core.disarm_alarms(member, kind))

    async def status(
        self, url: str | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        return await self._run(self._core.status(url, timeout))

    async def load(
        self,
        source: LoadSource,
        *,
        skip: int = 0,
        encoding: str = "base64",
        progress: Callable[[LoadProgress], None] | None = None,
    ) -> LoadProgress:
        """Bulk load, as :meth:`http_api.client.RkvClient.load` (a file source is read
        on the event loop's thread, a block at a time)."""
        if encoding not in ("base64", "utf-8"):
            raise ValueError(f"encoding must be base64 or utf-8, not {encoding!r}")
        target = LOAD_PATH + ("?encoding=utf-8" if encoding == "utf-8" else "")
        if self.leader_url is None:
            with contextlib.suppress(RkvClientError):
                await self.status()  # find the leader: a follower would forward each chunk
        url = self.leader_url or self.nodes[0]
        lines = source_lines(source, skip)
        if lines is None:
            return LoadProgress(0, skip, 0)
        return await self._transport.load(
            url,
            target,
            lines=lines,
            tally=LoadTally(skip),
            progress=progress,
            timeout=self._core.timeout,
        )

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> AsyncRkvClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class AsyncProducer(_ProducerView):
    """The asyncio twin of :class:`http_api.client.Producer` (``await
    client.producer()``): the same methods, as coroutines. Concurrent calls wait
    for each other (an asyncio lock): one write at a time per producer. A call
    cancelled half-way leaves its write pending, settled by the next call."""

    def __init__(self, client: AsyncRkvClient, state: _ProducerCore) -> None:
        self._client = client
        self._state = state
        self._lock = asyncio.Lock()

    async def _write(self, request: _Write[T]) -> T:
        async with self._lock:
            return await self._client._run(self._state.write(request))

    async def put(
        self,
        key: BytesLike,
        value: BytesLike,
        *,
        if_version: int | None = None,
        create_only: bool = False,
        lease: int | HasLeaseId | None = None,
        fencing: FencingLike | None = None,
    ) -> int:
        return await self._write(
            self._client._core.put_request(
                key, value, if_version, create_only, lease=lease, fencing=fencing
            )
        )

    async def delete(
        self,
        key: BytesLike,
        *,
        if_version: int | None = None,
        fencing: FencingLike | None = None,
    ) -> int:
        return await self._write(self._client._core.delete_request(key, if_version, fencing))

    async def incr(self, key: BytesLike, by: int = 1, *, fencing: FencingLike | None = None) -> int:
        return await self._write(self._client._core.incr_request(key, by, fencing))

    async def append(
        self, key: BytesLike, value: BytesLike, *, fencing: FencingLike | None = None
    ) -> int:
        return await self._write(self._client._core.append_request(key, value, fencing))

    async def txn(
        self,
        compare: Sequence[Compare] = (),
        success: Sequence[Op] = (),
        failure: Sequence[Op] = (),
        *,
        fencing: FencingLike | None = None,
    ) -> TxnResult:
        return await self._write(self._client._core.txn_request(compare, success, failure, fencing))

    async def txn_raw(
        self,
        body: Mapping[str, Any],
        *,
        encoding: str = "base64",
        fencing: FencingLike | None = None,
    ) -> dict[str, Any]:
        return await self._write(self._client._core.txn_raw_request(body, encoding, fencing))

    async def reinit(self) -> None:
        async with self._lock:
            await self._client._run(self._state.init())
