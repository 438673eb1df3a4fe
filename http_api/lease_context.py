"""What a lease, lock or election route needs from its request: the node's
:class:`LeaseApi` (a node built without one answers 503 ``leases_unavailable``)
and the caller, for lease ownership."""

from __future__ import annotations

from aiohttp import web

from http_api.authn import principal_of
from http_api.lease_api import LeaseApi
from node.errors import Unavailable
from node.service.lease_types import ANYONE, Caller

LEASES: web.AppKey[LeaseApi] = web.AppKey("leases", LeaseApi)


def leases_of(request: web.Request) -> LeaseApi:
    leases = request.app.get(LEASES)
    if leases is None:
        raise Unavailable(
            "this node serves no leases, locks or elections", code="leases_unavailable"
        )
    return leases


def caller_of(request: web.Request) -> Caller:
    """Who asks: ANYONE while authentication is off, else the authenticated user."""
    principal = principal_of(request)
    return ANYONE if principal is None else Caller(principal.name, principal.admin)
