"""GET /v1/leases/keepalive: keepalives of many leases over one WebSocket.

Each text message the client sends is ``{"ids": [...]}`` (1 to 10,000 lease
ids); each answer, in order, is ``{"leases": [{"id", "ttl"} | {"id", "code"}]}``
as POST /v1/leases/keepalive answers. A message that is not such an object (or
not text) answers ``{"code": "invalid_request", "message": ...}``; a refused
keepalive (``no_leader``, ``overloaded``...) answers ``{"code", "message"}`` the
same way; either way the stream goes on. A message above
``MAX_MESSAGE_BYTES`` closes the socket (1009, message too big).

The caller is who opened the socket (authenticated once, at the upgrade). The
server pings every --watch-keepalive seconds and closes a socket whose client
does not answer, or does not read an answer within --transfer-idle-timeout; a
server shutdown closes every socket (1001, going away).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import weakref
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from http_api import lease_input
from http_api.kv_api import KvApi
from http_api.lease_api import LeaseApi
from http_api.lease_context import caller_of, leases_of
from http_api.lease_json import renewal_json
from node.errors import InvalidRequest, RequestError
from node.service.lease_types import Caller

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 1024 * 1024
"""A message of 10,000 ids takes about 200 KB."""
KEEPALIVE_PATH = "/v1/leases/keepalive"


class OpenSockets:
    """The open keepalive streams, to close them when the node shuts down."""

    def __init__(self) -> None:
        self.sockets: weakref.WeakSet[web.WebSocketResponse] = weakref.WeakSet()


SOCKETS = web.AppKey("lease_keepalive_sockets", OpenSockets)


async def answer(leases: LeaseApi, caller: Caller, kind: WSMsgType, data: Any) -> dict[str, Any]:
    """The answer to one message (an error is the answer: it never raises)."""
    try:
        if kind is not WSMsgType.TEXT:
            raise InvalidRequest('send text messages: {"ids": [lease ids]}')
        try:
            body = json.loads(data)
        except (ValueError, RecursionError):
            raise InvalidRequest('a message must be JSON: {"ids": [lease ids]}') from None
        renewals = await leases.keepalive(lease_input.lease_ids(body), caller)
        return {"leases": [renewal_json(r) for r in renewals]}
    except RequestError as error:
        return {"code": error.code, "message": error.message}
    except Exception:  # as the error table answers it: the stream goes on
        logger.exception("a keepalive from the lease keepalive stream failed")
        return {"code": "internal_error", "message": "unexpected error; see the node's log"}


def add_routes(app: web.Application, service_key: web.AppKey[KvApi]) -> None:
    app[SOCKETS] = OpenSockets()

    async def close_sockets(app: web.Application) -> None:
        for socket in list(app[SOCKETS].sockets):
            await socket.close(code=WSCloseCode.GOING_AWAY, message=b"the node is shutting down")

    app.on_shutdown.append(close_sockets)

    async def keepalive_stream(request: web.Request) -> web.StreamResponse:
        leases = leases_of(request)
        kv = request.app[service_key]
        socket = web.WebSocketResponse(heartbeat=kv.watch_keepalive, max_msg_size=MAX_MESSAGE_BYTES)
        if not socket.can_prepare(request).ok:
            raise InvalidRequest(
                f"GET {KEEPALIVE_PATH} is a WebSocket (Upgrade: websocket); "
                f"POST {KEEPALIVE_PATH} takes one batch",
                code="websocket_required",
            )
        caller = caller_of(request)
        await socket.prepare(request)
        request.app[SOCKETS].sockets.add(socket)
        try:
            async for message in socket:
                if message.type is WSMsgType.ERROR:
                    break
                reply = await answer(leases, caller, message.type, message.data)
                await asyncio.wait_for(socket.send_json(reply), kv.stall_timeout)
        except TimeoutError:
            logger.info("a lease keepalive stream's client read nothing; closing it")
            if request.transport is not None:
                request.transport.abort()
        except ConnectionError:
            pass  # the client went away
        finally:
            request.app[SOCKETS].sockets.discard(socket)
            with contextlib.suppress(ConnectionError):
                await socket.close()
        return socket

    app.router.add_route("GET", KEEPALIVE_PATH, keepalive_stream)
