"""The authentication middleware: who a request comes from, and whether the route's
need (http_api/permissions.py) is met, before its handler runs or its body is read.

It runs inside the error middleware (so a refusal is one of the error table's
JSON answers: 401 with WWW-Authenticate, 403 naming the permission, 429 with
Retry-After) and outside the body budget. Routes aiohttp does not match (404,
405) pass through. While auth is disabled every request passes unchanged.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from http_api.auth_api import AuthApi
from http_api.permissions import Need, authorize, need_of
from http_api.tls import client_certificate_user
from node.service.auth import Principal

AUTH: web.AppKey[AuthApi] = web.AppKey("auth", AuthApi)
PRINCIPAL = "rkv.principal"
"""request[PRINCIPAL]: the authenticated caller, or None while auth is off."""


def principal_of(request: web.Request) -> Principal | None:
    principal: Principal | None = request.get(PRINCIPAL)
    return principal


@web.middleware
async def authenticate(request: web.Request, handler: Any) -> web.StreamResponse:
    auth = request.app.get(AUTH)
    match = request.match_info
    if auth is None or match.http_exception is not None:
        response: web.StreamResponse = await handler(request)
        return response
    route = match.route
    need = need_of(route.method, route.resource.canonical if route.resource else "")
    if need is not Need.OPEN:
        principal = await auth.authenticate(
            request.headers.get("Authorization"),
            client_certificate_user(request),
            request.remote or "?",
        )
        if principal is not None:
            authorize(need, principal, request)
        request[PRINCIPAL] = principal
    response = await handler(request)
    return response
