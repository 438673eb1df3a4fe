"""The one table from errors to HTTP responses, and the middleware that applies it.

Every error body is JSON: ``{"code": stable machine code, "message": for people}``
plus details some errors carry (``current_version`` on a failed precondition,
``token`` on a fenced write or a lock not got: the lock holder's fencing token, or
null).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from node.errors import (
    AuditExportFailed,
    Conflict,
    Fenced,
    Forbidden,
    InvalidRequest,
    KeyNotFound,
    LimitReached,
    LockHeld,
    NodeNotReady,
    NoSpace,
    NotApplied,
    NotLeader,
    Overloaded,
    PayloadTooLarge,
    RequestError,
    RequestTimeout,
    TransferExpired,
    Unauthenticated,
    Unavailable,
    UnknownOutcome,
    VersionConflict,
)

logger = logging.getLogger(__name__)

# First match wins: subclasses before their bases.
STATUS_BY_ERROR: tuple[tuple[type[RequestError], int], ...] = (
    (InvalidRequest, 400),
    (KeyNotFound, 404),
    (VersionConflict, 412),
    (Conflict, 409),
    (PayloadTooLarge, 413),
    (LimitReached, 429),
    (NoSpace, 507),
    (Unauthenticated, 401),
    (Forbidden, 403),
    (RequestTimeout, 408),
    (NotLeader, 307),
    (Overloaded, 503),
    (NotApplied, 503),
    (UnknownOutcome, 503),
    (NodeNotReady, 503),
    (Unavailable, 503),
    (TransferExpired, 410),
    (AuditExportFailed, 500),
    (RequestError, 400),
)

WWW_AUTHENTICATE = 'Basic realm="rkv", Bearer'

_HTTP_CODES = {
    404: "no_such_endpoint",
    405: "method_not_allowed",
    413: "payload_too_large",
    400: "bad_request",
}


def json_response(body: dict[str, Any], status: int = 200, **headers: str) -> web.Response:
    return web.Response(
        body=json.dumps(body).encode(),
        status=status,
        content_type="application/json",
        headers=headers or None,
    )


def error_body(error: RequestError) -> tuple[int, dict[str, Any]]:
    """The status and JSON body ``error`` answers (without headers or redirects)."""
    status = next(s for kind, s in STATUS_BY_ERROR if isinstance(error, kind))
    return status, {"code": error.code, "message": error.message}


def error_response(error: RequestError, path_qs: str) -> web.Response:
    status, body = error_body(error)
    headers: dict[str, str] = {}
    if isinstance(error, VersionConflict):
        body["current_version"] = error.current_version
    if isinstance(error, Fenced | LockHeld):
        body["token"] = error.token
    if isinstance(error, NotLeader):
        if error.leader_url is None:
            status, body["code"] = 503, "no_leader"
        else:
            body["leader_url"] = error.leader_url
            headers["Location"] = error.leader_url.rstrip("/") + path_qs
    if isinstance(error, Unauthenticated):
        headers["WWW-Authenticate"] = WWW_AUTHENTICATE
    if error.duplicate:
        headers["Rkv-Duplicate"] = "true"
    if isinstance(error, Unavailable | LimitReached) and error.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(error.retry_after)))
    return json_response(body, status, **headers)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ServedByMain(Exception):
    """Raised in an HTTP worker by a route that needs what only the node's main process
    holds (the lease service): the worker passes the request to main
    (http_api/worker_app.py). Never raised in main."""


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ServedByMain:
        raise
    except RequestError as error:
        response = error_response(error, request.path_qs)
        if error.close_connection:
            response.force_close()  # the rest of the request cannot be read
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, f"http_{exc.status}")
        # A 405 must say which methods the resource has (RFC 9110 15.5.6).
        allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else {}
        return json_response({"code": code, "message": exc.reason}, exc.status, **allow)
    except Exception:
        logger.exception("unexpected error serving %s %s", request.method, request.path)
        return json_response(
            {"code": "internal_error", "message": "unexpected error; see the node's log"}, 500
        )
