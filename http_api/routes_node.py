"""Node endpoints: /v1/status, /v1/checkpoints, /v1/openapi.json,
/v1/admin/compact, and membership: /v1/cluster/members (GET, POST) and
/v1/cluster/members/{id} (DELETE)."""

from __future__ import annotations

from dataclasses import asdict

from aiohttp import web

from http_api.bodies import read_json
from http_api.encoding import encode_bytes, encoding_param, raw_query
from http_api.errors import json_response
from http_api.fair_share import SHARES
from http_api.kv_api import KvApi
from http_api.openapi import openapi_document
from node.errors import InvalidRequest
from node.keyspace import member_id_problem


def add_routes(app: web.Application, service_key: web.AppKey[KvApi]) -> None:
    async def status(request: web.Request) -> web.Response:
        body = request.app[service_key].status()
        shares = request.app.get(SHARES)
        if shares is not None:
            body["fair_share"] = shares.summary()
        return json_response(body)

    async def compact(request: web.Request) -> web.Response:
        result = await request.app[service_key].compact(force=True)
        return json_response({**asdict(result), "records_dropped": result.records_dropped})

    async def openapi(request: web.Request) -> web.Response:
        return json_response(openapi_document())

    async def checkpoints(request: web.Request) -> web.Response:
        encoding = encoding_param(raw_query(request))
        items = request.app[service_key].checkpoints()
        return json_response(
            {
                "checkpoints": [
                    {"name": name, "value": encode_bytes(value, encoding, "value"), "version": v}
                    for name, value, v in items
                ]
            }
        )

    async def members(request: web.Request) -> web.Response:
        return json_response({"members": request.app[service_key].members()})

    async def add_member(request: web.Request) -> web.Response:
        body = await read_json(request, 'JSON: {"id", "raft_address", "url"}')
        if not isinstance(body, dict):
            raise InvalidRequest('the body must be a JSON object: {"id", "raft_address", "url"}')
        fields = [body.get(name) for name in ("id", "raft_address", "url")]
        if not all(isinstance(f, str) for f in fields):
            raise InvalidRequest('the body needs string fields "id", "raft_address" and "url"')
        if problem := member_id_problem(str(fields[0])):
            raise InvalidRequest(problem)
        result = await request.app[service_key].add_member(*map(str, fields))
        return json_response(result)

    async def set_member_url(request: web.Request) -> web.Response:
        body = await read_json(request, 'JSON: {"url"}')
        if not isinstance(body, dict) or not isinstance(body.get("url"), str):
            raise InvalidRequest('the body must be a JSON object with a string "url"')
        if set(body) - {"url"}:
            raise InvalidRequest("only a member's url can change; its raft address cannot")
        node_id = request.match_info["id"]
        result = await request.app[service_key].set_member_url(node_id, body["url"])
        return json_response(result)

    async def remove_member(request: web.Request) -> web.Response:
        result = await request.app[service_key].remove_member(request.match_info["id"])
        return json_response(result)

    app.router.add_route("GET", "/v1/status", status)
    app.router.add_route("GET", "/v1/checkpoints", checkpoints)
    app.router.add_route("GET", "/v1/cluster/members", members)
    app.router.add_route("POST", "/v1/cluster/members", add_member)
    app.router.add_route("DELETE", "/v1/cluster/members/{id}", remove_member)
    app.router.add_route("PUT", "/v1/cluster/members/{id}", set_member_url)
    app.router.add_route("GET", "/v1/openapi.json", openapi)
    app.router.add_route("POST", "/v1/admin/compact", compact)
