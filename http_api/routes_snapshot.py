"""GET /v1/snapshot: this node's whole state as a snapshot, streamed as it is read.

Body: the snapshot format of node/snapshot/format.py (header, one commit-log
framed put per key, internal keys included, trailer with a SHA-256), content
type application/octet-stream, sent chunked (no Content-Length: the bytes leave
as LMDB is read, nothing is staged on the node's disk; the trailer's count and
SHA-256 tell a reader the body is whole). Headers: Rkv-Snapshot-Index and
Rkv-Snapshot-Offset, the applied raft index and offset the state reflects (a
follower may be behind the leader).

The export runs in a worker thread from one detached LMDB read view
(node/snapshot/stream.py) at the node's transfer rate; a client that reads
slowly slows it, one that leaves or a node that stops ends it at its next
chunk. One export at a time per node: another request waits up to
``_QUEUE_WAIT_SECONDS`` for the running one to finish, then gets 503
``overloaded`` with Retry-After. An export that fails after its first byte
(the map grew under it) ends the connection without the trailer, which
every reader notices.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue

from aiohttp import web

from http_api.kv_api import KvApi, SnapshotSource
from node.errors import Overloaded
from node.service.types import SNAPSHOT_CONTENT_TYPE as CONTENT_TYPE

logger = logging.getLogger(__name__)

_QUEUE_WAIT_SECONDS = 10.0
_POLL_SECONDS = 0.5


def _abandon(slot: asyncio.Lock, opening: asyncio.Future[SnapshotSource]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result().cancel()
    slot.release()


def add_routes(app: web.Application, service_key: web.AppKey[KvApi]) -> None:
    slot = asyncio.Lock()

    async def read_snapshot(request: web.Request) -> web.StreamResponse:
        try:
            await asyncio.wait_for(slot.acquire(), _QUEUE_WAIT_SECONDS)
        except TimeoutError:
            error = Overloaded("a snapshot export is already running on this node")
            error.retry_after = 5.0
            raise error from None
        kv = request.app[service_key]
        opening = asyncio.ensure_future(asyncio.to_thread(kv.open_snapshot_stream))
        try:
            stream = await asyncio.shield(opening)
        except asyncio.CancelledError:
            # The client left while the view was being opened: end the stream once it
            # exists, and only then take the next request.
            opening.add_done_callback(functools.partial(_abandon, slot))
            raise
        except BaseException:
            slot.release()
            raise
        try:
            response = web.StreamResponse(
                headers={
                    "Content-Type": CONTENT_TYPE,
                    "Content-Disposition": (
                        f'attachment; filename="rkv-{stream.applied_index}.snapshot"'
                    ),
                    "Rkv-Snapshot-Index": str(stream.applied_index),
                    "Rkv-Snapshot-Offset": str(stream.applied_offset),
                }
            )
            response.enable_chunked_encoding()
            await response.prepare(request)
            while True:
                try:
                    chunk = await asyncio.to_thread(stream.next_chunk, _POLL_SECONDS)
                except queue.Empty:
                    continue
                if not chunk:
                    break
                await response.write(chunk)
            await response.write_eof()
            return response
        except (ConnectionResetError, asyncio.CancelledError):
            logger.info("a snapshot download ended early: the client went away")
            raise
        finally:
            stream.cancel()
            slot.release()

    app.router.add_route("GET", "/v1/snapshot", read_snapshot)
