"""GET /v1/snapshot: this node's whole state as a snapshot file.

Body: the snapshot format of node/snapshot/file.py (header, one commit-log
framed put per key, internal keys included, trailer with a SHA-256),
content type application/octet-stream, with a Content-Length. Headers:
Rkv-Snapshot-Index and Rkv-Snapshot-Offset, the applied raft index and offset
the state reflects (a follower may be behind the leader).

The export is first written to a temporary file in the data directory
(LMDB and file work run in a worker thread, never on the event loop), then
streamed from it, so a slow download does not hold LMDB's read transaction
open. One export at a time per node: another request waits up to
``_QUEUE_WAIT_SECONDS`` for the running one to finish, then gets 503
``overloaded`` with Retry-After.
"""

from __future__ import annotations

import asyncio
from typing import BinaryIO

from aiohttp import web

from http_api.kv_api import KvApi
from node.errors import Overloaded
from node.service.types import SNAPSHOT_CONTENT_TYPE as CONTENT_TYPE
from node.service.types import SnapshotHeader

_CHUNK_BYTES = 1024 * 1024
_QUEUE_WAIT_SECONDS = 10.0


def add_routes(app: web.Application, service_key: web.AppKey[KvApi]) -> None:
    slot = asyncio.Lock()

    def finished(export: asyncio.Future[tuple[SnapshotHeader, BinaryIO]]) -> None:
        """An export whose request went away: close its file, allow the next one."""
        slot.release()
        if not export.cancelled() and export.exception() is None:
            export.result()[1].close()

    async def read_snapshot(request: web.Request) -> web.StreamResponse:
        try:
            await asyncio.wait_for(slot.acquire(), _QUEUE_WAIT_SECONDS)
        except TimeoutError:
            error = Overloaded("a snapshot export is already running on this node")
            error.retry_after = 5.0
            raise error from None
        kv = request.app[service_key]
        # LMDB and file work in a worker thread. If the client leaves meanwhile, the
        # thread still finishes: its file is closed (and the slot freed) only then.
        export = asyncio.ensure_future(asyncio.to_thread(kv.export_snapshot_file))
        try:
            header, spool = await asyncio.shield(export)
        except asyncio.CancelledError:
            export.add_done_callback(finished)
            raise
        except BaseException:
            slot.release()
            raise
        try:
            size = await asyncio.to_thread(spool.seek, 0, 2)
            await asyncio.to_thread(spool.seek, 0)
            response = web.StreamResponse(
                headers={
                    "Content-Type": CONTENT_TYPE,
                    "Content-Length": str(size),
                    "Content-Disposition": (
                        f'attachment; filename="rkv-{header.applied_index}.snapshot"'
                    ),
                    "Rkv-Snapshot-Index": str(header.applied_index),
                    "Rkv-Snapshot-Offset": str(header.applied_offset),
                }
            )
            await response.prepare(request)
            while chunk := await asyncio.to_thread(spool.read, _CHUNK_BYTES):
                await response.write(chunk)
            await response.write_eof()
            return response
        finally:
            spool.close()
            slot.release()

    app.router.add_route("GET", "/v1/snapshot", read_snapshot)
