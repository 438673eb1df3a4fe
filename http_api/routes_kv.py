"""Key-value reads: GET /v1/kv/{key} and GET /v1/kv (prefix scan).

Writes on the same paths are in http_api/routes_writes.py.
"""

from __future__ import annotations

import json
from typing import TypeVar

from aiohttp import web

from http_api.encoding import (
    consistency_param,
    decode_cursor,
    encode_bytes,
    encode_cursor,
    encoding_param,
    int_param,
    key_from_path,
    raw_query,
)
from http_api.fair_share import in_thread
from http_api.kv_api import KvReads
from node.service.kv import DEFAULT_SCAN_LIMIT, ScanPage

KEY_PATH = r"/v1/kv/{key:[\s\S]*}"
"""Any bytes, newlines too ("." would not match them), and none: an empty key is
then refused as invalid_key (400) rather than as an unknown endpoint."""


Reads = TypeVar("Reads", bound=KvReads)

OFF_LOOP_BYTES = 256 * 1024
"""A scan page with more value bytes than this is encoded off the event loop."""


def _page_json(page: ScanPage, encoding: str) -> bytes:
    rendered = [
        {
            "key": encode_bytes(key, encoding, "key"),
            "value": encode_bytes(stored.value, encoding, "value"),
            "version": stored.version,
            "create_version": stored.create_version,
        }
        for key, stored in page.items
    ]
    next_cursor = None if page.next_after is None else encode_cursor(page.next_after)
    return json.dumps({"items": rendered, "next": next_cursor}).encode()


def add_routes(app: web.Application, service_key: web.AppKey[Reads]) -> None:
    def service(request: web.Request) -> KvReads:
        return request.app[service_key]

    async def get_key(request: web.Request) -> web.Response:
        key = key_from_path(request)
        params = raw_query(request)
        found = await service(request).get(
            key, consistency_param(params), int_param(params, "min_version")
        )
        return web.Response(
            body=found.value,
            content_type="application/octet-stream",
            headers={
                "ETag": f'"{found.version}"',
                "Rkv-Version": str(found.version),
                "Rkv-Create-Version": str(found.create_version),
            },
        )

    async def scan(request: web.Request) -> web.Response:
        params = raw_query(request)
        encoding = encoding_param(params)
        cursor = params.get("start_after")
        page = await service(request).scan(
            params.get("prefix", b""),
            decode_cursor(cursor) if cursor else None,
            int_param(params, "limit", minimum=1) or DEFAULT_SCAN_LIMIT,
            consistency_param(params),
            int_param(params, "min_version"),
        )
        if sum(len(stored.value) for _, stored in page.items) < OFF_LOOP_BYTES:
            body = _page_json(page, encoding)
        else:  # megabytes to encode: in a thread, so other requests get turns meanwhile
            body = await in_thread(request, _page_json, page, encoding)
        return web.Response(body=body, content_type="application/json")

    app.router.add_route("GET", KEY_PATH, get_key)
    app.router.add_route("GET", "/v1/kv", scan)
