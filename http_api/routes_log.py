"""GET /v1/log: this node's commit log from an offset, for pull replication.

Body: records in their commit-log framing (node/storage/log_feed.py documents it;
every record carries its CRC-32), content type application/x-rkv-log.
Headers: Rkv-Head-Offset, this node's last offset when the answer started.
Parameters: from (default 1), to (inclusive, optional), limit (optional),
complete=1: answer 409 ``range_compacted`` unless every record from ``from``
on is still in the log, and keep compaction off while it is streamed (a
lagging replica's catch-up; it installs the whole state otherwise).
Internal records (the reserved prefix) travel too: they are state.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from http_api.encoding import int_param, raw_query, text_param
from http_api.kv_api import KvApi
from http_api.streaming import write_or_give_up
from node.errors import InvalidRequest
from node.service.types import LOG_CONTENT_TYPE

COMPLETE_VALUES = ("1", "true")
_CHUNK_BYTES = 256 * 1024

logger = logging.getLogger(__name__)


def add_routes(app: web.Application, service_key: web.AppKey[KvApi]) -> None:
    async def read_log(request: web.Request) -> web.StreamResponse:
        kv = request.app[service_key]
        params = raw_query(request)
        from_offset = int_param(params, "from") or 1
        to_offset = int_param(params, "to")
        limit = int_param(params, "limit", minimum=1)
        complete = text_param(params, "complete")
        if complete not in (None, *COMPLETE_VALUES):
            raise InvalidRequest(f"complete must be 1 or true (or absent), not {complete!r:.40}")
        if complete is not None:
            with kv.complete_log_range(from_offset):
                return await _stream(request, kv, from_offset, to_offset, limit)
        return await _stream(request, kv, from_offset, to_offset, limit)

    async def _stream(
        request: web.Request, kv: KvApi, from_offset: int, to_offset: int | None, limit: int | None
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": LOG_CONTENT_TYPE, "Rkv-Head-Offset": str(kv.log_head)}
        )
        await response.prepare(request)
        chunks = kv.log_chunks(from_offset, to_offset, limit, _CHUNK_BYTES)
        try:
            while True:
                # Segment reads are blocking file I/O: keep them off the event loop.
                chunk = await asyncio.to_thread(next, chunks, None)
                if chunk is None:
                    break
                await write_or_give_up(request, response, chunk, kv.stall_timeout)
            await response.write_eof()
        except ConnectionError:  # reset, or lost mid-write ("Connection lost")
            logger.info("a log range download ended early: the client went away")
        return response

    app.router.add_route("GET", "/v1/log", read_log)
