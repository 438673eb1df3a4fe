"""Leases: /v1/leases (docs/LEASES.md).

- ``POST /v1/leases`` ``{"ttl": S}``: ``{"id", "ttl"}``.
- ``GET /v1/leases?after=ID&limit=N``: the caller's leases (every one for an
  admin) in id order, ``{"leases": [{"id", "ttl", "remaining", "owner"}],
  "next_after": ID or null}``.
- ``GET /v1/leases/{id}`` (``?encoding=utf-8`` for the keys): one lease with its
  keys (at most 1000, ``truncated``) and locks; ``DELETE`` revokes it:
  ``{"id", "revoked": true, "deleted_keys": N}``.
- ``POST /v1/leases/{id}/keepalive``: ``{"id", "ttl"}``, or 404
  ``lease_expired``/``lease_not_found``, 403 ``lease_not_owned``.
- ``POST /v1/leases/keepalive`` ``{"ids": [...]}``: one outcome per id, in
  order, with 200: ``{"leases": [{"id", "ttl"} | {"id", "code"}]}``.
- ``GET /v1/leases/keepalive``: the same as a WebSocket stream
  (http_api/routes_lease_stream.py).

A node built without a lease service answers 503 ``leases_unavailable``.
"""

from __future__ import annotations

from aiohttp import web

from http_api import lease_input, routes_lease_stream
from http_api.bodies import read_json
from http_api.encoding import encoding_param, int_param, raw_query
from http_api.errors import json_response
from http_api.fair_share import in_thread
from http_api.kv_api import KvApi
from http_api.lease_context import caller_of, leases_of
from http_api.lease_json import lease_detail_json, lease_json, renewal_json
from node.errors import Forbidden, InvalidRequest, KeyNotFound, RequestError
from node.service.lease_types import Renewal


def renewal_error(renewal: Renewal) -> RequestError:
    """A lease's failed keepalive as the error a single keepalive answers."""
    lease = renewal.lease_id
    if renewal.code == "lease_not_owned":
        return Forbidden(f"lease {lease} belongs to another user", code="lease_not_owned")
    if renewal.code == "lease_expired":
        return KeyNotFound(f"lease {lease} expired or was revoked", code="lease_expired")
    return KeyNotFound(f"no lease {lease}", code=renewal.code or "lease_not_found")


LEASE_PATH = "/v1/leases/{id:(?!keepalive/?$)[^/]+}"
"""Any id but "keepalive" (/v1/leases/keepalive's own routes): another method on that
path is a 405, not a bad lease id."""


def _path_id(request: web.Request) -> int:
    return lease_input.lease_id_text(request.match_info["id"], "the lease id")


def add_routes(app: web.Application, service_key: web.AppKey[KvApi]) -> None:
    async def grant(request: web.Request) -> web.Response:
        leases = leases_of(request)
        body = lease_input.json_object(await read_json(request), {"ttl"}, set(), '{"ttl": S}')
        ttl = lease_input.ttl(body["ttl"], leases.max_lease_ttl)
        lease_id, granted = await leases.grant(ttl, caller_of(request))
        return json_response({"id": lease_id, "ttl": granted})

    async def list_leases(request: web.Request) -> web.Response:
        leases = leases_of(request)
        params = raw_query(request)
        after = int_param(params, "after")
        limit = int_param(params, "limit", 1)
        if limit is not None and limit > lease_input.MAX_PAGE:
            raise InvalidRequest(
                f"parameter limit must be 1 to {lease_input.MAX_PAGE}, not {limit}"
            )
        found, next_after = await in_thread(
            request,
            leases.leases,
            after,
            limit or lease_input.DEFAULT_PAGE,
            caller_of(request),
            shared_pool=True,
        )
        return json_response({"leases": [lease_json(i) for i in found], "next_after": next_after})

    async def show(request: web.Request) -> web.Response:
        leases = leases_of(request)
        lease_id = _path_id(request)
        encoding = encoding_param(raw_query(request))
        info = await in_thread(
            request, leases.lease, lease_id, caller_of(request), shared_pool=True
        )
        return json_response(lease_detail_json(info, encoding))

    async def revoke(request: web.Request) -> web.Response:
        leases = leases_of(request)
        lease_id = _path_id(request)
        deleted = await leases.revoke(lease_id, caller_of(request))
        return json_response({"id": lease_id, "revoked": True, "deleted_keys": deleted})

    async def keepalive(request: web.Request) -> web.Response:
        leases = leases_of(request)
        lease_id = _path_id(request)
        [renewal] = await leases.keepalive([lease_id], caller_of(request))
        if renewal.code is not None:
            raise renewal_error(renewal)
        return json_response(renewal_json(renewal))

    async def keepalive_batch(request: web.Request) -> web.Response:
        leases = leases_of(request)
        ids = lease_input.lease_ids(await read_json(request, '{"ids": [lease ids]}'))
        renewals = await leases.keepalive(ids, caller_of(request))
        return json_response({"leases": [renewal_json(r) for r in renewals]})

    app.router.add_route("POST", "/v1/leases", grant)
    app.router.add_route("GET", "/v1/leases", list_leases)
    # The static keepalive paths before /v1/leases/{id}, which would match them.
    app.router.add_route("POST", "/v1/leases/keepalive", keepalive_batch)
    routes_lease_stream.add_routes(app, service_key)  # GET /v1/leases/keepalive
    app.router.add_route("GET", LEASE_PATH, show)
    app.router.add_route("DELETE", LEASE_PATH, revoke)
    app.router.add_route("POST", LEASE_PATH + "/keepalive", keepalive)
