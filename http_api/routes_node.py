"""Node endpoints: /v1/status, /healthz, /readyz, /v1/openapi.json, /v1/admin/compact."""

from __future__ import annotations

from dataclasses import asdict

from aiohttp import web

from http_api.errors import json_response
from http_api.kv_api import KvApi
from http_api.openapi import openapi_document


def add_routes(app: web.Application, service_key: web.AppKey[KvApi]) -> None:
    async def status(request: web.Request) -> web.Response:
        return json_response(request.app[service_key].status())

    async def healthz(request: web.Request) -> web.Response:
        return json_response({"status": "alive"})

    async def readyz(request: web.Request) -> web.Response:
        ready, reason = request.app[service_key].ready()
        return json_response({"ready": ready, "reason": reason}, 200 if ready else 503)

    async def compact(request: web.Request) -> web.Response:
        result = await request.app[service_key].compact(force=True)
        return json_response({**asdict(result), "records_dropped": result.records_dropped})

    async def openapi(request: web.Request) -> web.Response:
        return json_response(openapi_document())

    app.router.add_route("GET", "/v1/status", status)
    app.router.add_route("GET", "/healthz", healthz)
    app.router.add_route("GET", "/readyz", readyz)
    app.router.add_route("GET", "/v1/openapi.json", openapi)
    app.router.add_route("POST", "/v1/admin/compact", compact)
