"""POST /v1/producers: initialise an idempotent producer.

Body (optional): ``{"transactional_id": "..."}``. Answer: ``{"producer_id",
"epoch"}``. The allocation is a raft entry; with a transactional id already
known, the answer keeps its producer id with the next epoch, which fences
every write of the older epochs from that entry on.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from http_api.bodies import read_body, read_json
from http_api.errors import json_response
from http_api.kv_api import KvApi
from node.errors import InvalidRequest


def add_routes(app: web.Application, service_key: web.AppKey[KvApi]) -> None:
    async def init_producer(request: web.Request) -> web.Response:
        body: Any = {}
        if await read_body(request):
            body = await read_json(request)
        if not isinstance(body, dict):
            raise InvalidRequest("the body must be a JSON object")
        unknown = set(body) - {"transactional_id"}
        if unknown:
            raise InvalidRequest(f"unknown fields: {', '.join(sorted(unknown))}")
        tid = body.get("transactional_id")
        if "transactional_id" in body and not isinstance(tid, str):
            raise InvalidRequest("transactional_id must be a string (or absent)")
        result = await request.app[service_key].init_producer(tid)
        return json_response({"producer_id": result.producer_id, "epoch": result.epoch})

    app.router.add_route("POST", "/v1/producers", init_producer)
