"""Key-value writes: PUT, POST and DELETE /v1/kv/{key}, and POST /v1/txn.

Each accepts an idempotent producer's headers (http_api/encoding.py:
producer_from_headers); the answer to a retried sequence is the original one
with ``Rkv-Duplicate: true``. POST /v1/kv/{key}?op=incr&by=N and ?op=append
are the read-modify-write operations (keys contain "/", so the operation is a
parameter, never a path suffix).

Leases (docs/LEASES.md): PUT takes ``?lease=ID`` (attach the key to that lease,
once the caller may use it) or ``?ttl=S`` (a new lease for this key alone; the
answer adds ``"lease": ID``), not both. Every write takes ``Rkv-Fencing:
NAME=TOKEN``: applied only while lock NAME is held with that token, else 409
``fenced`` with the holder's token.
"""

from __future__ import annotations

from typing import Any, TypeVar

from aiohttp import web

from http_api.authn import principal_of
from http_api.bodies import read_body, read_json
from http_api.encoding import (
    encode_bytes,
    encoding_param,
    expected_version_from_headers,
    key_from_path,
    producer_from_headers,
    raw_query,
    signed_int_param,
    text_param,
)
from http_api.errors import json_response
from http_api.kv_api import KvWriteApi
from http_api.lease_context import caller_of, leases_of
from http_api.lease_input import FENCING_HEADER, fence, lease_id_text, ttl_text
from http_api.permissions import authorize_txn
from http_api.routes_kv import KEY_PATH
from http_api.txn_json import parse_txn, render_txn_result, txn_leases
from node.errors import InvalidRequest, PayloadTooLarge
from node.service.lease_types import Fence
from node.state.results import CommandResult


def written(body: dict[str, Any], result: CommandResult) -> web.Response:
    """A write's answer; a producer's retried sequence says it is a duplicate."""
    if result.duplicate:
        return json_response(body, 200, **{"Rkv-Duplicate": "true"})
    return json_response(body)


def _number(result: CommandResult) -> int | None:
    """An incr's new value or an append's new size. None only when a producer reused
    the sequence of another kind of write: the answer is that write's result."""
    try:
        return int(result.value)
    except ValueError:
        return None


async def _read_value(request: web.Request, kv: KvWriteApi) -> bytes:
    if request.content_length is not None and request.content_length > kv.max_value_bytes:
        raise PayloadTooLarge(
            f"value is {request.content_length} bytes; the limit is {kv.max_value_bytes}"
        )
    return await read_body(request)


def _fence(request: web.Request) -> Fence | None:
    return fence(request.headers.get(FENCING_HEADER))


def _lease_or_ttl(request: web.Request, params: dict[str, bytes]) -> tuple[int | None, int | None]:
    """A PUT's ``?lease=ID`` (a lease the caller may use) or ``?ttl=S`` (both: 400)."""
    lease_text, ttl_param = text_param(params, "lease"), text_param(params, "ttl")
    if lease_text is None and ttl_param is None:
        return None, None
    if lease_text is not None and ttl_param is not None:
        raise InvalidRequest("use lease (an existing lease) or ttl (a new one), not both")
    if ttl_param is not None:
        return None, ttl_text(ttl_param, leases_of(request).max_lease_ttl)
    lease = lease_id_text(lease_text, "parameter lease")
    leases_of(request).check_use(lease, caller_of(request))
    return lease, None


async def _put(request: web.Request, kv: KvWriteApi) -> web.Response:
    key = key_from_path(request)
    params = raw_query(request)
    kv.check_key(key)
    # Everything the answer needs is checked before the write, never after it.
    encoding = encoding_param(params)
    rendered_key = encode_bytes(key, encoding, "key")
    expected_version = expected_version_from_headers(request)
    producer = producer_from_headers(request)
    fenced = _fence(request)
    lease, ttl = _lease_or_ttl(request, params)
    value = await _read_value(request, kv)
    result = await kv.put(
        key, value, expected_version, producer, lease=lease, ttl=ttl, fence=fenced
    )
    body: dict[str, Any] = {"key": rendered_key, "version": result.version}
    if ttl is not None:
        body["lease"] = _number(result)
    return written(body, result)


Writes = TypeVar("Writes", bound=KvWriteApi)


def add_routes(app: web.Application, service_key: web.AppKey[Writes]) -> None:
    def service(request: web.Request) -> KvWriteApi:
        return request.app[service_key]

    async def put_key(request: web.Request) -> web.Response:
        return await _put(request, service(request))

    async def modify_key(request: web.Request) -> web.Response:
        key = key_from_path(request)
        params = raw_query(request)
        kv = service(request)
        kv.check_key(key)
        rendered_key = encode_bytes(key, encoding_param(params), "key")
        producer = producer_from_headers(request)
        fenced = _fence(request)
        op = text_param(params, "op")
        by = signed_int_param(params, "by", 1)  # checked whatever the op: a bad one is a 400
        if op == "incr":
            result = await kv.incr(key, by, producer, fence=fenced)
            body = {"key": rendered_key, "value": _number(result), "version": result.version}
        elif op == "append":
            value = await _read_value(request, kv)
            result = await kv.append(key, value, producer, fence=fenced)
            body = {"key": rendered_key, "size": _number(result), "version": result.version}
        else:
            raise InvalidRequest(f"parameter op must be incr or append, not {op!r:.40}")
        return written(body, result)

    async def delete_key(request: web.Request) -> web.Response:
        key = key_from_path(request)
        expected_version = expected_version_from_headers(request)
        producer = producer_from_headers(request)
        fenced = _fence(request)
        result = await service(request).delete(key, expected_version, producer, fence=fenced)
        return written({"version": result.version}, result)

    async def txn(request: web.Request) -> web.Response:
        params = raw_query(request)
        encoding = encoding_param(params)
        body: Any = await read_json(request)
        kv = service(request)
        command = parse_txn(body, encoding, kv)
        authorize_txn(principal_of(request), command)  # every key either branch may touch
        producer = producer_from_headers(request)
        fenced = _fence(request)
        for lease in sorted(txn_leases(command)):  # the caller may use each
            leases_of(request).check_use(lease, caller_of(request))
        result = await kv.txn(command, producer, fence=fenced)
        return written(render_txn_result(result, encoding, command), result)

    app.router.add_route("PUT", KEY_PATH, put_key)
    app.router.add_route("POST", KEY_PATH, modify_key)
    app.router.add_route("DELETE", KEY_PATH, delete_key)
    app.router.add_route("POST", "/v1/txn", txn)
