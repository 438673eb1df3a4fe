"""Consistency audit endpoints (node/service/audit.py, node/audit/export.py).

- ``POST /v1/audit`` ``{"audit_id"?: str, "buckets"?: int}`` (an empty body is
  ``{}``): on the leader (307 to it otherwise), picks split points and proposes
  the audit cut; ``{"audit_id", "raft_index", "split_points": [base64]}``.
- ``GET /v1/audit/{id}``: this node's export: 200 with the manifest when done,
  202 ``{"audit_id", "state": "running", "progress"}`` while it is written,
  404 ``audit_not_found`` when this node has none (yet), 500
  ``audit_export_failed`` when it failed.
- ``GET /v1/audit/{id}/files/{name}``: a file of a finished export: one its
  manifest lists, or ``manifest.json``; 404 otherwise (``audit_not_finished``,
  ``audit_file_not_found``). Names are matched against the manifest, never
  joined to a path as given. While it is sent (and for a grace period after),
  retention does not delete the export (node/audit/retention.py); a client
  that reads nothing for the node's --transfer-idle-timeout is cut off.
- ``POST /v1/audit`` while the leader still exports an earlier audit: 409
  ``audit_running``.

A node built without an audit service (tests) answers 503.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import BinaryIO, Protocol

from aiohttp import web

from http_api.bodies import json_integer, read_body, read_json
from http_api.errors import json_response
from http_api.streaming import write_or_give_up
from node.errors import AuditExportFailed, InvalidRequest, KeyNotFound, Unavailable
from node.service.audit import AuditStarted
from node.service.types import RUNNING, AuditStatus

_BODY = '{"audit_id"?: string, "buckets"?: integer}'
_CHUNK_BYTES = 1024 * 1024

logger = logging.getLogger(__name__)


class AuditApi(Protocol):
    async def start(
        self, audit_id: str | None = None, buckets: int | None = None
    ) -> AuditStarted: ...

    def status(self, audit_id: str) -> AuditStatus: ...

    def file(self, audit_id: str, name: str) -> Path: ...

    def hold(self, audit_id: str) -> AbstractContextManager[None]: ...

    @property
    def stall_timeout(self) -> float: ...


class _NoAudits:
    """What a node without an audit service answers."""

    def _refuse(self) -> Unavailable:
        return Unavailable("this node runs no audit exports", code="audits_unavailable")

    async def start(self, audit_id: str | None = None, buckets: int | None = None) -> AuditStarted:
        raise self._refuse()

    def status(self, audit_id: str) -> AuditStatus:
        raise self._refuse()

    def file(self, audit_id: str, name: str) -> Path:
        raise self._refuse()

    def hold(self, audit_id: str) -> AbstractContextManager[None]:
        return nullcontext()

    @property
    def stall_timeout(self) -> float:
        return 30.0


AUDITS: web.AppKey[AuditApi] = web.AppKey("audits", AuditApi)


async def _start_body(request: web.Request) -> tuple[str | None, int | None]:
    raw = await read_body(request)
    if not raw.strip(b" \t\r\n"):  # JSON's whitespace only: \x0c is not JSON
        return None, None
    body = await read_json(request, f"JSON: {_BODY}")
    if not isinstance(body, dict):
        raise InvalidRequest(f"the body must be a JSON object: {_BODY}")
    unknown = set(body) - {"audit_id", "buckets"}
    if unknown:
        raise InvalidRequest(f"unknown fields {sorted(unknown)}; the body is {_BODY}")
    # A field is given or absent: null is neither a string nor an integer.
    audit_id = body.get("audit_id")
    if "audit_id" in body and not isinstance(audit_id, str):
        raise InvalidRequest("audit_id must be a string", code="invalid_audit_id")
    buckets = json_integer(body["buckets"]) if "buckets" in body else None
    if "buckets" in body and buckets is None:
        raise InvalidRequest("buckets must be an integer", code="invalid_buckets")
    return audit_id, buckets


async def _send(
    request: web.Request, source: BinaryIO, path: Path, stall_timeout: float
) -> web.StreamResponse:
    """Stream an open export file (a deletion meanwhile does not cut it short)."""
    content_type = "application/json" if path.suffix == ".json" else "application/octet-stream"
    size = await asyncio.to_thread(lambda: os.fstat(source.fileno()).st_size)
    response = web.StreamResponse(
        headers={"Content-Type": content_type, "Content-Length": str(size)}
    )
    await response.prepare(request)
    try:
        while chunk := await asyncio.to_thread(source.read, _CHUNK_BYTES):
            await write_or_give_up(request, response, chunk, stall_timeout)
        await response.write_eof()
    except ConnectionError:  # reset, or lost mid-write ("Connection lost")
        logger.info("an audit file download ended early: the client went away")
    return response


def add_routes(app: web.Application, audits: AuditApi | None) -> None:
    app[AUDITS] = _NoAudits() if audits is None else audits

    async def start(request: web.Request) -> web.Response:
        audit_id, buckets = await _start_body(request)
        started = await request.app[AUDITS].start(audit_id, buckets)
        return json_response(
            {
                "audit_id": started.audit_id,
                "raft_index": started.raft_index,
                "split_points": [base64.b64encode(p).decode("ascii") for p in started.split_points],
            }
        )

    async def status(request: web.Request) -> web.Response:
        # Reads the manifest from disk: off the event loop.
        state = await asyncio.to_thread(request.app[AUDITS].status, request.match_info["id"])
        if state.state == RUNNING:
            body = {"audit_id": state.audit_id, "state": RUNNING, "progress": state.progress}
            return json_response(body, 202)
        if state.manifest is None:
            raise AuditExportFailed(f"audit {state.audit_id}: {state.error}")
        return json_response(state.manifest)

    async def download(request: web.Request) -> web.StreamResponse:
        audits = request.app[AUDITS]
        audit_id, name = request.match_info["id"], request.match_info["name"]
        path = await asyncio.to_thread(audits.file, audit_id, name)
        with audits.hold(audit_id):
            try:  # deleted between the check and the hold: gone, like any deleted export
                source = await asyncio.to_thread(open, path, "rb")
            except FileNotFoundError:
                raise KeyNotFound(
                    f"this node has no audit {audit_id}", code="audit_not_found"
                ) from None
            try:
                return await _send(request, source, path, audits.stall_timeout)
            finally:
                source.close()

    app.router.add_route("POST", "/v1/audit", start)
    app.router.add_route("GET", "/v1/audit/{id}", status)
    app.router.add_route("GET", "/v1/audit/{id}/files/{name}", download)
