"""POST /v1/kv:load: a bulk load, streamed in and answered with progress.

The body is JSON Lines of ``{"key": K, "value": V}`` (http_api/load_lines.py),
read as it arrives. Each line is checked as a PUT would be (key rules, value
size, ``write`` permission on the key when auth is on); the pairs are grouped
into chunks of at most ``--load-chunk-keys`` pairs and ``--max-entry-bytes``
bytes, each proposed as one command (node/state/load_command.py), with up to
``--load-chunks-in-flight`` chunks proposed at once. A chunk is all or nothing.

The answer is NDJSON (``application/x-ndjson``): after each committed chunk
``{"loaded": N, "lines": L, "version": V}`` (pairs and body lines committed so
far, every line before line L+1 included; V the offset of the last put, for
``min_version`` reads), and at the end ``{"done": true, ...}`` with the same
fields. A bad line stops the load: the lines before it are committed first.
If no progress line was sent yet, the answer is the error's own status
(400, 403, 413, 503...) with a JSON body ``{"code", "message", "line",
"loaded", "lines", "version"}``; after one, the answer is 200 and its last
line is ``{"error": {"code", "message", "line"}, "loaded", "lines",
"version"}``. Either way ``lines`` is exactly how many lines to skip when the
load is sent again; a put of the same value again is harmless.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from http_api.authn import principal_of
from http_api.body_budget import STREAMED_BODY_SHARE
from http_api.connections import LIMITS
from http_api.encoding import encoding_param, raw_query
from http_api.errors import error_body
from http_api.kv_api import KvApi
from http_api.load_lines import LineError, body_lines, line_parser
from http_api.permissions import require_write
from http_api.streaming import write_or_give_up
from node.errors import InvalidRequest, RequestError
from node.keyspace import MAX_KEY_BYTES, RESERVED_PREFIX
from node.service.load_limits import max_line_bytes
from node.state.results import CommandResult

logger = logging.getLogger(__name__)

LOAD_PATH = "/v1/kv:load"
NDJSON = "application/x-ndjson"


@dataclass
class _Chunk:
    task: asyncio.Task[CommandResult]
    pairs: int
    end_line: int  # the body's lines up to and including this one are in it


@dataclass
class _Totals:
    loaded: int = 0
    lines: int = 0
    version: int = 0

    def fields(self) -> dict[str, int]:
        return {"loaded": self.loaded, "lines": self.lines, "version": self.version}


class _Load:
    """One load request: its chunks in flight, what is committed, the answer."""

    def __init__(self, request: web.Request, kv: KvApi) -> None:
        self.request = request
        self.kv = kv
        self.limits = kv.load_limits
        self.totals = _Totals()
        self.in_flight: deque[_Chunk] = deque()
        self.response: web.StreamResponse | None = None
        self.failed: LineError | None = None
        self.stall_timeout = kv.stall_timeout

    async def run(self) -> web.StreamResponse:
        request, kv = self.request, self.kv
        parse = line_parser(encoding_param(raw_query(request)))
        principal = principal_of(request)
        check_key, max_value = kv.check_key, kv.max_value_bytes
        chunk_keys, chunk_bytes = self.limits.chunk_keys, self.limits.chunk_bytes
        read_timeout = request.app[LIMITS].read_timeout if LIMITS in request.app else 30.0
        keys: list[bytes] = []
        values: list[bytes] = []
        size = 0
        number = 0  # the line being read
        bad: LineError | None = None
        try:
            async for lines in body_lines(request.content, max_line_bytes(max_value), read_timeout):
                for line in lines:
                    number += 1
                    if not line.strip():
                        continue
                    try:
                        key, value = parse(line)
                        # The common case costs two comparisons; the service says why not.
                        if not 0 < len(key) <= MAX_KEY_BYTES or key.startswith(RESERVED_PREFIX):
                            check_key(key)
                        if len(value) > max_value:
                            kv.check_value(value)
                        if principal is not None:
                            require_write(principal, key)
                    except RequestError as error:
                        raise LineError(number, error) from None
                    pair = len(key) + len(value) + 8
                    if keys and (size + pair > chunk_bytes or len(keys) >= chunk_keys):
                        await self._propose(keys, values, number - 1)
                        keys, values, size = [], [], 0
                    keys.append(key)
                    values.append(value)
                    size += pair
                if self.failed is not None:
                    break  # a chunk was not committed: the rest would not count
        except LineError as error:
            bad, number = error, error.line - 1
        except RequestError as error:  # the body stopped arriving or cannot be read
            bad = LineError(number + 1, error)
        if number == 0 and bad is None:
            raise InvalidRequest("the body is empty: a load needs JSON Lines of key and value")
        if keys and self.failed is None:
            # With a bad line, the lines before it are committed before it is answered.
            await self._propose(keys, values, number)
        return await self._answer(number, bad)

    async def _propose(self, keys: list[bytes], values: list[bytes], end_line: int) -> None:
        task = asyncio.ensure_future(self.kv.load(keys, values))
        task.add_done_callback(_retrieve)  # a chunk left behind (the client went away)
        self.in_flight.append(_Chunk(task, len(keys), end_line))
        while len(self.in_flight) >= self.limits.chunks_in_flight:
            await self._settle_oldest()

    async def _settle_oldest(self, report: bool = True) -> None:
        """Wait for the oldest chunk; count it if every one before it was committed,
        and (``report``) send the progress line."""
        chunk = self.in_flight.popleft()
        try:
            result = await chunk.task
        except RequestError as error:
            if self.failed is None:
                self.failed = LineError(self.totals.lines + 1, error)
            return
        if self.failed is not None:
            return  # committed, but after a chunk that was not: not counted
        totals = self.totals
        totals.loaded += chunk.pairs
        totals.lines = chunk.end_line
        totals.version = result.version
        if report:
            await self._send(totals.fields())

    async def _answer(self, lines_read: int, bad: LineError | None) -> web.StreamResponse:
        """Once every chunk is settled: the end of the stream, or the first failure (a
        chunk's comes before a later bad line's)."""
        while self.in_flight:
            # With a bad line, what is committed goes in the error's answer, which is
            # then still the error's own status unless a progress line went already.
            await self._settle_oldest(report=bad is None)
        totals = self.totals
        failed = self.failed = self.failed or bad
        if failed is None:
            totals.lines = lines_read  # every line is committed, blank ones included
            await self._send({"done": True, **totals.fields()})
            assert self.response is not None
            await self.response.write_eof()
            return self.response
        status, body = error_body(failed.error)
        body.update(message=str(failed), line=failed.line)
        if self.response is None:
            body.update(totals.fields())
            response = web.Response(
                body=orjson.dumps(body), status=status, content_type="application/json"
            )
            if failed.error.close_connection or not self.request.content.at_eof():
                response.force_close()  # where the next request would start is unknown
            return response
        await self._send({"error": body, **totals.fields()})
        if not self.request.content.at_eof():
            self.response.force_close()
        await self.response.write_eof()
        return self.response

    async def _send(self, item: dict[str, Any]) -> None:
        if self.response is None:
            self.response = web.StreamResponse(headers={"Content-Type": NDJSON})
            await self.response.prepare(self.request)
        data = orjson.dumps(item) + b"\n"
        await write_or_give_up(self.request, self.response, data, self.stall_timeout)


def _retrieve(task: asyncio.Task[CommandResult]) -> None:
    """Mark a chunk's outcome as seen: nobody waits for it once a load has stopped."""
    if not task.cancelled():
        task.exception()


def add_routes(app: web.Application, service_key: web.AppKey[KvApi]) -> None:
    async def load(request: web.Request) -> web.StreamResponse:
        loading = _Load(request, request.app[service_key])
        try:
            return await loading.run()
        except ConnectionError:  # reset, or lost mid-write: the client went away
            logger.info(
                "a bulk load ended early: the client went away (%d lines committed)",
                loading.totals.lines,
            )
            if loading.response is not None:
                return loading.response
            raise

    def held(request: web.Request) -> int:
        """The most bytes of keys and values a load holds: its chunks."""
        limits = request.app[service_key].load_limits
        return (limits.chunks_in_flight + 1) * limits.chunk_bytes

    setattr(load, STREAMED_BODY_SHARE, held)
    app.router.add_route("POST", LOAD_PATH, load)
