"""Each request's id: taken from a sane incoming ``Rkv-Request-Id`` or ``X-Request-Id``
header, else made up; returned as ``Rkv-Request-Id`` on every answer, and held in
:data:`REQUEST_ID` while the request is served, so that log lines written meanwhile
carry it (node/cli/json_logs.py reads it)."""

from __future__ import annotations

import itertools
import os
import re
from contextvars import ContextVar

from aiohttp import web
from aiohttp.typedefs import Handler

HEADER = "Rkv-Request-Id"
_INCOMING = (HEADER, "X-Request-Id")
# A token a log line or a header can hold as it is: short, no spaces or quotes.
_SANE = re.compile(r"[A-Za-z0-9._:/+=-]{1,64}")
_KEY: web.RequestKey[str] = web.RequestKey("rkv_request_id", str)

REQUEST_ID: ContextVar[str | None] = ContextVar("rkv_request_id", default=None)

# Made-up ids: this process's random prefix and a counter. Unique, not secret, and
# without a system call per request (secrets.token_hex cost 1 % of a PUT's CPU).
_PREFIX = os.urandom(6).hex()
_NEXT = itertools.count(1)


def current_request_id() -> str | None:
    """The id of the request being served in this context, if any."""
    return REQUEST_ID.get()


def _chosen_id(request: web.Request) -> str:
    for name in _INCOMING:
        given = request.headers.get(name)
        if given is not None and _SANE.fullmatch(given):
            return given
    return f"{_PREFIX}-{next(_NEXT):x}"


@web.middleware
async def request_id_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    request[_KEY] = request_id = _chosen_id(request)
    token = REQUEST_ID.set(request_id)
    try:
        return await handler(request)
    finally:
        REQUEST_ID.reset(token)


async def add_request_id_header(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: every answer, streamed ones and errors too, names its id."""
    request_id = request.get(_KEY)
    if request_id is not None:
        response.headers[HEADER] = request_id
