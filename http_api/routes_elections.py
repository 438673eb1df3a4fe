"""Elections: /v1/elections/{name} (docs/LEASES.md), locks whose holder announces a
value: the same names, queues and fencing tokens as /v1/locks/{name}.

- ``POST`` ``{"lease": ID, "value"?: str, "timeout"?: S}`` (campaign): waits
  until leader; ``{"name", "key", "token", "lease", "value"}``.
- ``PUT`` ``{"lease": ID, "token": T, "value": str}`` (proclaim): ``{"name",
  "token", "value"}``; 409 ``not_lock_holder`` unless leader with that token.
- ``DELETE ?lease=ID`` (resign): ``{"name", "released": true}``.
- ``GET``: ``{"name", "lease", "token", "value", "since_ms"}``; 404 ``no_leader``.
- ``GET ?observe=true``: NDJSON, one line per leader, the one now first:
  ``{"leader": {"name", "lease", "token", "value", "since_ms"} or null}``; after
  --watch-keepalive seconds without a line, a keep-alive line ``{}``. Observers
  count as watches (http_api/stream_slots.py). The stream ends when the node
  shuts down; a last line ``{"error": {"code", "message"}}`` says why it ends
  otherwise.

Values are UTF-8 strings of at most 4096 bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from http_api import lease_input
from http_api.bodies import json_integer, read_json
from http_api.connections import LIMITS
from http_api.encoding import MAX_VERSION, raw_query, text_param
from http_api.errors import json_response
from http_api.kv_api import KvApi
from http_api.lease_context import caller_of, leases_of
from http_api.lease_json import acquired_json, leader_json, value_text
from http_api.long_poll import GONE_CHECK_SECONDS, client_gone
from http_api.routes_locks import acquire, lease_param, lock_name_of
from http_api.stream_slots import STREAMS, StreamSlots
from http_api.streaming import write_or_give_up
from node.errors import InvalidRequest, KeyNotFound, RequestError
from node.service.lease_types import LockHolder

logger = logging.getLogger(__name__)

ELECTION_PATH = r"/v1/elections/{name:[\s\S]+}"
NDJSON = "application/x-ndjson"
KEEPALIVE_LINE = b"{}\n"


def _line(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def leader_line(holder: LockHolder | None) -> bytes:
    return _line({"leader": None if holder is None else leader_json(holder)})


def _observing(request: web.Request) -> bool:
    text = text_param(raw_query(request), "observe")
    if text not in (None, "true", "false"):
        raise InvalidRequest(f"parameter observe must be true or false, not {text!r:.20}")
    return text == "true"


async def _follow(
    request: web.Request,
    response: web.StreamResponse,
    changes: AsyncIterator[LockHolder | None],
    kv: KvApi,
    slots: StreamSlots,
) -> None:
    """Send each change of leader, and keep-alives, until shutdown, disconnection or
    the end of the changes."""
    loop = asyncio.get_running_loop()
    last_sent = loop.time()
    closing = asyncio.ensure_future(slots.wait_closed())
    pending = asyncio.ensure_future(anext(changes))
    try:
        while not client_gone(request):
            idle = last_sent + kv.watch_keepalive - loop.time()
            done, _ = await asyncio.wait(
                {pending, closing},
                timeout=max(0.0, min(idle, GONE_CHECK_SECONDS)),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if closing in done:
                return
            if pending in done:
                try:
                    line = leader_line(pending.result())
                except StopAsyncIteration:
                    return
                except RequestError as error:
                    line = _line({"error": {"code": error.code, "message": error.message}})
                    await write_or_give_up(request, response, line, kv.stall_timeout)
                    return
                pending = asyncio.ensure_future(anext(changes))
            elif loop.time() - last_sent >= kv.watch_keepalive:
                line = KEEPALIVE_LINE
            else:
                continue
            await write_or_give_up(request, response, line, kv.stall_timeout)
            last_sent = loop.time()
    finally:
        for task in (pending, closing):
            task.cancel()
        await asyncio.gather(pending, closing, return_exceptions=True)


async def _close(changes: AsyncIterator[LockHolder | None]) -> None:
    closer = getattr(changes, "aclose", None)
    if closer is not None:
        with contextlib.suppress(Exception):
            await closer()


async def _observe(request: web.Request, name: str, kv: KvApi) -> web.StreamResponse:
    """GET ?observe=true: the leader now, then each change, as NDJSON."""
    slots = request.app[STREAMS]
    response = web.StreamResponse(headers={"Content-Type": NDJSON, "Cache-Control": "no-store"})
    # Refused (too many watches) before anything is sent; counted until the end.
    with slots.hold(request.app[LIMITS], request.remote or "?"):
        changes = leases_of(request).observe(name)
        try:
            # The leader now, before the answer starts: a refusal is a plain error.
            first = await anext(changes)
            await response.prepare(request)
            await write_or_give_up(request, response, leader_line(first), kv.stall_timeout)
            await _follow(request, response, changes, kv, slots)
            await response.write_eof()
        except ConnectionError:
            pass  # the client went away: nothing to finish
        except Exception:
            if not response.prepared:
                raise  # the error table answers it
            logger.exception("observing election %s failed", name)
            with contextlib.suppress(ConnectionError):
                failed = {"code": "internal_error", "message": "see the node's log"}
                await response.write(_line({"error": failed}))
                await response.write_eof()
        finally:
            await _close(changes)
    return response


def add_routes(app: web.Application, service_key: web.AppKey[KvApi]) -> None:
    async def campaign(request: web.Request) -> web.Response:
        leases = leases_of(request)
        name = lock_name_of(request)
        shape = '{"lease": ID, "value"?: string, "timeout"?: seconds}'
        body = lease_input.json_object(
            await read_json(request), {"lease"}, {"value", "timeout"}, shape
        )
        lease_id = lease_input.lease_id(body["lease"])
        value = lease_input.election_value(body.get("value", ""))
        wait = lease_input.lock_wait(body, leases.max_lock_wait)
        holder = await acquire(request, name, lease_id, wait, value)
        return json_response({**acquired_json(holder), "value": value_text(holder)})

    async def proclaim(request: web.Request) -> web.Response:
        leases = leases_of(request)
        name = lock_name_of(request)
        shape = '{"lease": ID, "token": T, "value": string}'
        body = lease_input.json_object(
            await read_json(request), {"lease", "token", "value"}, set(), shape
        )
        lease_id = lease_input.lease_id(body["lease"])
        token = json_integer(body["token"])
        if token is None or not 0 <= token <= MAX_VERSION:
            raise InvalidRequest(
                f"token must be a fencing token (an integer), not {body['token']!r:.40}"
            )
        value = lease_input.election_value(body["value"])
        holder = await leases.proclaim(name, lease_id, token, value, caller_of(request))
        return json_response({"name": name, "token": holder.token, "value": value_text(holder)})

    async def resign(request: web.Request) -> web.Response:
        leases = leases_of(request)
        name = lock_name_of(request)
        await leases.unlock(name, lease_param(request), caller_of(request))
        return json_response({"name": name, "released": True})

    async def leader(request: web.Request) -> web.StreamResponse:
        leases = leases_of(request)
        name = lock_name_of(request)
        if _observing(request):
            return await _observe(request, name, request.app[service_key])
        info = await leases.lock_info(name)
        if info.holder is None:
            raise KeyNotFound(f"election {name} has no leader", code="no_leader")
        return json_response(leader_json(info.holder))

    app.router.add_route("POST", ELECTION_PATH, campaign)
    app.router.add_route("PUT", ELECTION_PATH, proclaim)
    app.router.add_route("DELETE", ELECTION_PATH, resign)
    app.router.add_route("GET", ELECTION_PATH, leader)
