"""What a lease, lock or election route needs from its request: the node's
:class:`LeaseApi` (a node built without one answers 503 ``leases_unavailable``)
and the caller, for lease ownership."""

from __future__ import annotations

from aiohttp import web

from http_api.authn import principal_of
from http_api.errors import ServedByMain
from http_api.lease_api import LeaseApi
from node.errors import Unavailable
from node.service.lease_types import ANYONE, Caller

LEASES: web.AppKey[LeaseApi] = web.AppKey("leases", LeaseApi)
LEASES_IN_MAIN: web.AppKey[bool] = web.AppKey("leases_in_main", bool)
"""Set in an HTTP worker's app: the node's leases are its main process's."""


def leases_of(request: web.Request) -> LeaseApi:
    """The node's leases; in an HTTP worker, ServedByMain (main serves the request)."""
    leases = request.app.get(LEASES)
    if leases is None and request.app.get(LEASES_IN_MAIN):
        raise ServedByMain
    if leases is None:
        raise Unavailable(
            "this node serves no leases, locks or elections", code="leases_unavailable"
        )
    return leases


def caller_of(request: web.Request) -> Caller:
    """Who asks: ANYONE while authentication is off, else the authenticated user."""
    principal = principal_of(request)
    return ANYONE if principal is None else Caller(principal.name, principal.admin)
