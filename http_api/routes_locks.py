"""Locks: /v1/locks/{name} (docs/LEASES.md). Names may contain "/".

- ``POST`` ``{"lease": ID, "timeout"?: S}``: waits (FIFO) until the lease holds
  the lock, up to ``timeout`` seconds (default 10, 0: try once, at most
  --max-lock-wait); ``{"name", "key", "token", "lease"}``, or 409 ``lock_held``
  with the holder's token. A client that goes away leaves the queue.
- ``DELETE ?lease=ID``: ``{"name", "released": true}``; 409 ``not_lock_holder``.
- ``GET``: ``{"name", "holder": {"lease", "token", "since_ms", "value"} or null,
  "waiters": N}``.

Elections (http_api/routes_elections.py) are the same locks.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from http_api import lease_input
from http_api.bodies import read_json
from http_api.encoding import raw_query, text_param
from http_api.errors import json_response
from http_api.lease_context import caller_of, leases_of
from http_api.lease_json import acquired_json, holder_json
from http_api.long_poll import while_client_waits
from node.service.lease_types import LockHolder

LOCK_PATH = r"/v1/locks/{name:[\s\S]+}"


def lock_name_of(request: web.Request) -> str:
    return lease_input.lock_name(request.match_info["name"])


def lease_param(request: web.Request) -> int:
    """The ``?lease=ID`` a release names."""
    return lease_input.lease_id_text(text_param(raw_query(request), "lease"), "parameter lease")


async def acquire(
    request: web.Request, name: str, lease_id: int, wait: float, value: bytes = b""
) -> LockHolder:
    """Wait for the lock while the client does; a lock not got within ``wait`` is
    LockHeld (the service names the holder's token)."""
    leases = leases_of(request)
    return await while_client_waits(
        request, leases.lock(name, lease_id, wait, caller_of(request), value)
    )


def add_routes(app: web.Application) -> None:
    async def lock(request: web.Request) -> web.Response:
        leases = leases_of(request)
        name = lock_name_of(request)
        shape = '{"lease": ID, "timeout"?: seconds}'
        body = lease_input.json_object(await read_json(request), {"lease"}, {"timeout"}, shape)
        lease_id = lease_input.lease_id(body["lease"])
        wait = lease_input.lock_wait(body, leases.max_lock_wait)
        holder = await acquire(request, name, lease_id, wait)
        return json_response(acquired_json(holder))

    async def unlock(request: web.Request) -> web.Response:
        leases = leases_of(request)
        name = lock_name_of(request)
        await leases.unlock(name, lease_param(request), caller_of(request))
        return json_response({"name": name, "released": True})

    async def show(request: web.Request) -> web.Response:
        leases = leases_of(request)
        info = await leases.lock_info(lock_name_of(request))
        body: dict[str, Any] = {
            "name": info.name,
            "holder": None if info.holder is None else holder_json(info.holder),
            "waiters": info.waiters,
        }
        return json_response(body)

    app.router.add_route("POST", LOCK_PATH, lock)
    app.router.add_route("DELETE", LOCK_PATH, unlock)
    app.router.add_route("GET", LOCK_PATH, show)
