"""Reading request bodies: whatever a client sends, a bad body is a 400, never a 500.

A body is read whole (aiohttp caps it at the application's ``client_max_size``:
413 above it); a ``Content-Encoding`` that does not decode, a charset Python
does not know, text that is not in that charset, JSON that does not parse or
nests too deep all answer 400 ``invalid_request`` naming the problem.
"""

from __future__ import annotations

import asyncio
import codecs
import json
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from http_api.connections import LIMITS
from node.errors import InvalidRequest, RequestTimeout


async def read_body(request: web.Request) -> bytes:
    """The body's bytes, decoded from its Content-Encoding; it must arrive within the
    node's --http-read-timeout (a client sending a byte a minute holds a slot)."""
    timeout = request.app[LIMITS].read_timeout if LIMITS in request.app else None
    try:
        async with asyncio.timeout(timeout):
            return await request.read()
    except TimeoutError:
        request.content.feed_eof()  # nothing more is read; the answer closes the connection
        late = RequestTimeout(f"the body did not arrive within {timeout:g} s (--http-read-timeout)")
        late.close_connection = True
        raise late from None
    except (HttpProcessingError, RequestPayloadError) as exc:
        # The rest of the body cannot be read either: mark it ended, so that aiohttp
        # does not try to drain it after the answer (and log the same error again).
        request.content.feed_eof()
        message = exc.message if isinstance(exc, HttpProcessingError) else str(exc)
        unreadable = InvalidRequest(f"the body cannot be read: {message.strip()}")
        unreadable.close_connection = True  # where the next request starts is unknown
        raise unreadable from None


async def read_json(request: web.Request, what: str = "a JSON object") -> Any:
    """The body as JSON, in the charset its Content-Type names (UTF-8 by default)."""
    raw = await read_body(request)
    charset = request.charset or "utf-8"
    try:
        codecs.lookup(charset)
    except LookupError:
        raise InvalidRequest(f"unknown charset {charset!r} in Content-Type") from None
    try:
        text = raw.decode(charset)
    except UnicodeDecodeError:
        raise InvalidRequest(f"the body is not valid {charset}") from None
    try:
        return json.loads(text)
    except RecursionError:  # the C parser stops at the interpreter's recursion limit
        raise InvalidRequest("the body's JSON nests too deep") from None
    except ValueError:
        raise InvalidRequest(f"the body must be {what}") from None


def json_integer(value: object) -> int | None:
    """``value`` as an int if it is a JSON integer, as JSON Schema (and so the OpenAPI
    document) counts them: 3 and 3.0, never true or 3.5; None otherwise."""
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    return None
