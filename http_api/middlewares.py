"""The middlewares every rkv HTTP app runs, in their order: main's app
(http_api/app.py) and an HTTP worker's (http_api/worker_app.py) build the list
here, so that a middleware added for one is never missing from the other.

Outermost first: the request's id (so every log line and answer carries it),
the request counter (so errors are counted too), the head deadline's end, the
fair share of the loop, JSON errors, authentication, and last the body budget
(a body is reserved only for a request that may be served)."""

from __future__ import annotations

from aiohttp.typedefs import Middleware

from http_api import routes_metrics
from http_api.authn import authenticate
from http_api.body_budget import hold_body_bytes
from http_api.connections import request_bounds, share_the_loop
from http_api.errors import error_middleware
from http_api.request_id import request_id_middleware


def common_middlewares(first: Middleware | None = None, *, metrics: bool) -> list[Middleware]:
    """The list, with ``first`` (if any) outside every other one; ``metrics``: count
    requests (GET /metrics serves the counts)."""
    return [
        *([first] if first is not None else []),
        request_id_middleware,
        *([routes_metrics.count_requests] if metrics else []),
        request_bounds,
        share_the_loop,
        error_middleware,
        authenticate,
        hold_body_bytes,
    ]
