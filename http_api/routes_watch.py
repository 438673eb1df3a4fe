"""GET /v1/watch: the public change feed, a long-lived NDJSON stream.

Parameters: ``prefix`` (percent-encoded bytes; default every user key),
``from`` (the first offset to send; default the offset after this node's
applied offset, i.e. only new changes; 0 or 1 replays the whole log) and
``encoding`` (base64, the default, or utf-8).

One JSON object per line (Content-Type application/x-ndjson)::

    {"offset": 7, "op": "put", "key": "...", "value": "...", "version": 7,
     "create_version": 3}
    {"offset": 8, "op": "delete", "key": "...", "version": 8}
    {"keepalive": true, "head": 8}

- Changes come in offset order; ``version`` is the key's version after the
  change, which is the record's offset.
- Keys and values are base64 unless ``encoding=utf-8``; then a line whose key
  or value is not UTF-8 carries both as base64 and says ``"encoding":
  "base64"`` (the stream goes on).
- Keys under the internal prefix ``\\x00rkv/`` never appear, whatever the prefix.
- After ``keepalive_seconds`` (``--watch-keepalive``, 10 s) without a line a
  keep-alive is sent. ``head``: every matching change up to that offset has
  been sent, so a client may resume from ``head + 1``.
- Any offset is a valid ``from``, including one compaction removed: the reader
  then gets what the log still holds (the latest record of each key and the
  tombstones in retention) and then the tail. There is no "compacted" error.
- The stream ends cleanly (end of the chunked body) when the node shuts down.
  If the node stops serving reads (stalled) or cannot read its log, a last line
  ``{"error": {"code", "message"}}`` comes first. Resume from the last offset
  (or keep-alive ``head``) + 1, on this node or another.

New records are found by polling the node's applied offset (one shared poll
for every open watch, :class:`HeadTicker`); segments are read off the event
loop. A server shutdown (aiohttp's on_shutdown) closes the ticker, which ends
every open watch at once, so a watch never holds up stopping the node.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from http_api.connections import HttpLimits
from http_api.encoding import encoding_param, int_param, raw_query
from http_api.fair_share import in_thread, pace
from http_api.kv_api import KvApi
from http_api.long_poll import client_gone
from http_api.stream_slots import STREAMS
from http_api.streaming import write_or_give_up
from http_api.watch_tail import ChangeTail
from node.errors import NodeNotReady
from node.service.types import Record, RecordOp

logger = logging.getLogger(__name__)

NDJSON = "application/x-ndjson"
POLL_SECONDS = 0.05
"""How often the shared ticker looks at the applied offset while watches wait."""
LIVENESS_SECONDS = 1.0
"""An idle watch looks at least this often whether its client went away."""
_BATCH_RECORDS = 1000
_BATCH_BYTES = 1024 * 1024


def change_line(record: Record, encoding: str) -> bytes:
    """One NDJSON line (newline included) for a commit-log record."""
    put = record.op is RecordOp.PUT
    line: dict[str, Any] = {"offset": record.offset, "op": "put" if put else "delete"}
    key: str | None = None
    value: str | None = None
    if encoding == "utf-8":
        try:
            key = record.key.decode("utf-8")
            value = record.value.decode("utf-8") if put else None
        except UnicodeDecodeError:
            key = value = None
    fallback = key is None
    if fallback:
        key = base64.b64encode(record.key).decode()
        value = base64.b64encode(record.value).decode() if put else None
    line["key"] = key
    if put:
        line["value"] = value
    line["version"] = record.offset
    if put:
        line["create_version"] = record.create_version
    if fallback and encoding == "utf-8":
        line["encoding"] = "base64"
    return _dump(line)


def keepalive_line(head: int) -> bytes:
    return _dump({"keepalive": True, "head": head})


def error_line(code: str, message: str) -> bytes:
    return _dump({"error": {"code": code, "message": message}})


def _dump(line: dict[str, Any]) -> bytes:
    return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


class HeadTicker:
    """One poll of the applied offset, every ``interval`` seconds, for every open watch.

    The poll runs only while some watch waits. :meth:`close` (server shutdown)
    wakes every waiter at once and makes every later wait return immediately.
    """

    def __init__(self, read_head: Callable[[], int], interval: float = POLL_SECONDS) -> None:
        self._read_head = read_head
        self._interval = interval
        self._changed = asyncio.Event()
        self._waiting = 0
        self._task: asyncio.Task[None] | None = None
        self.closed = False

    async def wait(self, beyond: int, timeout: float) -> None:
        """Return once the head is above ``beyond``, after ``timeout`` s, or on close."""
        self._waiting += 1
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    while not self.closed and self._read_head() <= beyond:
                        changed = self._changed
                        if self._task is None:
                            self._task = asyncio.create_task(self._poll())
                        await changed.wait()
        finally:
            self._waiting -= 1

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def polling(self) -> bool:
        return self._task is not None

    async def _poll(self) -> None:
        try:
            # No baseline yet: the first tick wakes everyone, so a change between a
            # waiter's own look at the head and this task's start is not missed.
            head = -1
            while self._waiting and not self.closed:
                await asyncio.sleep(self._interval)
                now = self._read_head()
                if now != head:
                    head = now
                    self._wake()
        finally:
            self._task = None

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def close(self) -> None:
        self.closed = True
        self._wake()
        if self._task is not None:
            self._task.cancel()


def _next_batch(
    kv: KvApi, prefix: bytes, position: int, head: int, encoding: str
) -> tuple[bytes, int]:
    records, position = kv.changes(
        prefix, position, head, max_records=_BATCH_RECORDS, max_bytes=_BATCH_BYTES
    )
    return b"".join(change_line(r, encoding) for r in records), position


async def _stream(
    request: web.Request,
    response: web.StreamResponse,
    kv: KvApi,
    *,
    ticker: HeadTicker,
    tail: ChangeTail,
    prefix: bytes,
    encoding: str,
    position: int,
) -> None:
    """Send changes from ``position`` on until shutdown, disconnection or a read problem."""
    loop = asyncio.get_running_loop()
    keepalive = kv.watch_keepalive
    last_sent = loop.time()
    while not ticker.closed and not client_gone(request):
        reason = kv.unreadable_reason()
        if reason is not None:
            await response.write(
                error_line("node_not_ready", f"this node serves no reads: {reason}")
            )
            return
        head = kv.applied_offset
        if head >= position:
            # Segment reads are blocking file I/O: keep them off the event loop.
            shared = await tail.batch(
                request,
                prefix,
                position,
                head,
                encoding=encoding,
                max_records=_BATCH_RECORDS,
                max_bytes=_BATCH_BYTES,
            )
            if shared is None:  # older than the shared tail: read the log itself
                chunk, position = await in_thread(
                    request, _next_batch, kv, prefix, position, head, encoding, shared_pool=True
                )
            else:
                chunk, position = shared
            if chunk:
                await write_or_give_up(request, response, chunk, kv.stall_timeout)
                last_sent = loop.time()
                await pace(request)  # a heavy watcher waits: its next batch is larger
        if loop.time() - last_sent >= keepalive:
            await write_or_give_up(
                request, response, keepalive_line(position - 1), kv.stall_timeout
            )
            last_sent = loop.time()
        if kv.applied_offset < position:  # caught up: wait for the next change
            idle = last_sent + keepalive - loop.time()
            await ticker.wait(position - 1, max(0.0, min(idle, LIVENESS_SECONDS)))


TICKER = web.AppKey("watch_ticker", HeadTicker)
TAIL = web.AppKey("watch_tail", ChangeTail)


def add_routes(
    app: web.Application, service_key: web.AppKey[KvApi], limits_key: web.AppKey[HttpLimits]
) -> None:
    async def start_ticker(app: web.Application) -> None:
        kv = app[service_key]
        app[TICKER] = HeadTicker(lambda: kv.applied_offset)
        app[TAIL] = ChangeTail(kv, change_line)

    async def end_watches(app: web.Application) -> None:
        if TICKER in app:
            app[TICKER].close()

    app.on_startup.append(start_ticker)
    app.on_shutdown.append(end_watches)

    async def watch(request: web.Request) -> web.StreamResponse:
        kv = request.app[service_key]
        params = raw_query(request)
        encoding = encoding_param(params)
        prefix = params.get("prefix", b"")
        from_offset = int_param(params, "from")
        reason = kv.unreadable_reason()
        if reason is not None:
            raise NodeNotReady(f"this node serves no reads: {reason}")
        ticker = request.app[TICKER]
        # Refused (too many watches) before anything is sent; counted until the end.
        with request.app[STREAMS].hold(request.app[limits_key], request.remote or "?"):
            head = kv.applied_offset
            position = head + 1 if from_offset is None else max(from_offset, 1)
            response = web.StreamResponse(
                headers={
                    "Content-Type": NDJSON,
                    "Cache-Control": "no-store",
                    "Rkv-Head-Offset": str(head),
                    "Rkv-Watch-From": str(position),
                }
            )
            try:
                await response.prepare(request)
                await _stream(
                    request,
                    response,
                    kv,
                    ticker=ticker,
                    tail=request.app[TAIL],
                    prefix=prefix,
                    encoding=encoding,
                    position=position,
                )
                await response.write_eof()
            except ConnectionError:
                pass  # the client went away: nothing to finish
            except Exception:
                logger.exception("the change feed from offset %d failed", position)
                with contextlib.suppress(ConnectionError):
                    await response.write(
                        error_line("internal_error", "the change feed failed; see the node's log")
                    )
                    await response.write_eof()
        return response

    app.router.add_route("GET", "/v1/watch", watch)
