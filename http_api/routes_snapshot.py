"""GET /v1/snapshot: this node's whole state as a snapshot, streamed as it is read.

Body: the snapshot format of node/snapshot/format.py (header, one commit-log
framed put per key, internal keys included, trailer with a SHA-256), content
type application/octet-stream, sent chunked (no Content-Length: the bytes leave
as LMDB is read, nothing is staged on the node's disk; the trailer's count and
SHA-256 tell a reader the body is whole). Headers: Rkv-Snapshot-Index and
Rkv-Snapshot-Offset, the applied raft index and offset the state reflects (a
follower may be behind the leader), and Rkv-Transfer-Id.

Resuming: when a transfer ends, whole or cut, the node holds its read view for
a while (node/snapshot/held.py): a reader cut before the end (even one the node
sent everything to: the socket buffers took it) asks
``GET /v1/snapshot?transfer=ID&after=K`` (K: the last key received, base64url)
and gets the rest from the same view: the same header, the records after K and
a trailer counting those (its SHA-256 covers that header and those records).
410 ``transfer_expired`` when the view is no longer held: start again. A reader
that has everything lets the view go: ``DELETE /v1/snapshot?transfer=ID``
(204; 404 when none was held).

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
import contextlib
import functools
import logging
import queue
import re
import threading
from collections.abc import Awaitable, Callable

from aiohttp import web

from http_api.encoding import decode_base64url, raw_query, text_param
from http_api.kv_api import KvApi, SnapshotSource
from http_api.streaming import write_or_give_up
from node.errors import InvalidRequest, KeyNotFound, Overloaded
from node.service.types import SNAPSHOT_CONTENT_TYPE as CONTENT_TYPE

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# The OpenAPI document states the same pattern (http_api/openapi_node.py).
TRANSFER_ID_PATTERN = "^[A-Za-z0-9]{1,64}$"
TRANSFER_ID_RE = re.compile(TRANSFER_ID_PATTERN)
_QUEUE_WAIT_SECONDS = 10.0
_POLL_SECONDS = 0.5


def _end_off_the_loop(kv: KvApi, stream: SnapshotSource, slot: asyncio.Lock) -> None:
    """End ``stream`` on a thread (it waits for the writing thread: not on the loop,
    and not delaying a shutdown); the slot is freed once the stream's view is held,
    so that the reader's resume, which waits for the slot, finds it."""
    loop = asyncio.get_running_loop()

    def end() -> None:
        try:
            kv.end_snapshot_stream(stream)
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the node stopped
                loop.call_soon_threadsafe(slot.release)

    threading.Thread(target=end, name="rkv-snapshot-end", daemon=True).start()


def _abandon(slot: asyncio.Lock, kv: KvApi, opening: asyncio.Future[SnapshotSource]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        stream = opening.result()
        stream.cancel()
        _end_off_the_loop(kv, stream, slot)
    else:
        slot.release()


def _resume_params(request: web.Request) -> tuple[str | None, bytes | None]:
    params = raw_query(request)
    transfer = text_param(params, "transfer")
    after = text_param(params, "after")
    if transfer is None:
        if after is not None:
            raise InvalidRequest("after= needs transfer=: a resume names its transfer")
        return None, None
    if not TRANSFER_ID_RE.fullmatch(transfer):
        raise InvalidRequest("transfer must be the Rkv-Transfer-Id of a cut transfer")
    key = decode_base64url(after.encode()) if after is not None else b""
    if key is None:
        raise InvalidRequest("after must be a key in unpadded base64url")
    return transfer, key


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
        try:
            transfer_id, after = _resume_params(request)
        except BaseException:
            slot.release()
            raise
        opening = asyncio.ensure_future(
            asyncio.to_thread(kv.open_snapshot_stream, transfer_id, after)
        )
        try:
            stream = await asyncio.shield(opening)
        except asyncio.CancelledError:
            # The client left while the view was being opened: end the stream once it
            # exists, and only then take the next request.
            opening.add_done_callback(functools.partial(_abandon, slot, kv))
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
                    "Rkv-Transfer-Id": stream.transfer_id,
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
                await write_or_give_up(request, response, chunk, kv.stall_timeout)
            await response.write_eof()
            return response
        except ConnectionError:  # reset, or lost mid-write ("Connection lost")
            logger.info("a snapshot download ended early: the client went away")
            return response  # its connection is gone: nothing more to send
        except asyncio.CancelledError:
            logger.info("a snapshot download ended early: the client went away")
            raise
        finally:
            stream.cancel()
            _end_off_the_loop(kv, stream, slot)

    app.router.add_route("GET", "/v1/snapshot", read_snapshot)
    app.router.add_route("DELETE", "/v1/snapshot", _release_handler(service_key))


def _release_handler(service_key: web.AppKey[KvApi]) -> Handler:
    async def release_snapshot(request: web.Request) -> web.Response:
        transfer_id, _ = _resume_params(request)
        if transfer_id is None:
            raise InvalidRequest("transfer= names the transfer whose view to let go")
        if not request.app[service_key].release_snapshot(transfer_id):
            raise KeyNotFound(f"no view of transfer {transfer_id} is held")
        return web.Response(status=204)

    return release_snapshot
