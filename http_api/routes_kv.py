"""Key-value endpoints: /v1/kv/{key}, /v1/kv (scan) and /v1/txn."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from http_api.encoding import (
    consistency_param,
    decode_cursor,
    encode_bytes,
    encode_cursor,
    encoding_param,
    expected_version_from_headers,
    int_param,
    key_from_path,
    raw_query,
)
from http_api.errors import json_response
from http_api.kv_api import KvApi
from http_api.txn_json import parse_txn, render_txn_result
from node.errors import InvalidRequest, PayloadTooLarge
from node.kv_service import DEFAULT_SCAN_LIMIT

ServiceKey = web.AppKey[KvApi]


def add_routes(app: web.Application, service_key: ServiceKey) -> None:
    def service(request: web.Request) -> KvApi:
        return request.app[service_key]

    async def put_key(request: web.Request) -> web.Response:
        key = key_from_path(request)
        params = raw_query(request)
        kv = service(request)
        kv.check_key(key)
        # Everything the answer needs is checked before the write, never after it.
        encoding = encoding_param(params)
        rendered_key = encode_bytes(key, encoding, "key")
        expected_version = expected_version_from_headers(request)
        if request.content_length is not None and request.content_length > kv.max_value_bytes:
            raise PayloadTooLarge(
                f"value is {request.content_length} bytes; the limit is {kv.max_value_bytes}"
            )
        value = await request.read()
        version = await kv.put(key, value, expected_version)
        return json_response({"key": rendered_key, "version": version})

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

    async def delete_key(request: web.Request) -> web.Response:
        key = key_from_path(request)
        version = await service(request).delete(key, expected_version_from_headers(request))
        return json_response({"version": version})

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
        items = [
            {
                "key": encode_bytes(key, encoding, "key"),
                "value": encode_bytes(stored.value, encoding, "value"),
                "version": stored.version,
                "create_version": stored.create_version,
            }
            for key, stored in page.items
        ]
        next_cursor = None if page.next_after is None else encode_cursor(page.next_after)
        return json_response({"items": items, "next": next_cursor})

    async def txn(request: web.Request) -> web.Response:
        params = raw_query(request)
        encoding = encoding_param(params)
        try:
            body: Any = await request.json()
        except (ValueError, RecursionError):
            raise InvalidRequest("the body must be a JSON object") from None
        kv = service(request)
        command = parse_txn(body, encoding, kv)
        result = await kv.execute(command)
        return json_response(render_txn_result(result, encoding))

    # Any bytes, newlines too ("." would not match them), and none: an empty key is
    # then refused as invalid_key (400) rather than as an unknown endpoint.
    key_path = r"/v1/kv/{key:[\s\S]*}"
    app.router.add_route("PUT", key_path, put_key)
    app.router.add_route("GET", key_path, get_key)
    app.router.add_route("DELETE", key_path, delete_key)
    app.router.add_route("GET", "/v1/kv", scan)
    app.router.add_route("POST", "/v1/txn", txn)
