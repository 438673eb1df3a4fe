"""GET /metrics (Prometheus text exposition) and the middleware counting HTTP requests.

Only added with ``--metrics on`` (the default). Requests are labelled by route
template (``/v1/kv/{key}``, never the key), method and status class; the
labelled children are cached, so a request costs two clock reads, one counter
increment and one histogram observation.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest
from prometheus_client.registry import Collector

from http_api.errors import ServedByMain
from node import metrics

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_Children = tuple[Counter, Histogram]
_UNMATCHED = "unmatched"  # no route: 404s and 405s of unknown paths (any path, one label)
_children: dict[tuple[str, str, str], _Children] = {}
_STATUS_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")
_METHODS = frozenset({"GET", "HEAD", "PUT", "POST", "DELETE", "PATCH", "OPTIONS"})


def _route_of(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return _UNMATCHED if resource is None else resource.canonical


def _status_class(status: int) -> str:
    index = status // 100 - 1
    return _STATUS_CLASSES[index] if 0 <= index < len(_STATUS_CLASSES) else "other"


def _observe(request: web.Request, status: int, seconds: float) -> None:
    method = request.method if request.method in _METHODS else "other"
    route = _route_of(request)
    key = (method, route, _status_class(status))
    children = _children.get(key)
    if children is None:
        children = (
            metrics.HTTP_REQUESTS.labels(*key),
            metrics.HTTP_DURATION.labels(method, route),
        )
        _children[key] = children
    children[0].inc()
    children[1].observe(seconds)


@web.middleware
async def count_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.perf_counter()
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        _observe(request, exc.status, time.perf_counter() - started)
        raise
    except ServedByMain:  # main serves and counts it
        raise
    except Exception:
        _observe(request, 500, time.perf_counter() - started)
        raise
    _observe(request, response.status, time.perf_counter() - started)
    return response


def add_routes(app: web.Application, collector: Collector | None = None) -> None:
    """GET /metrics; ``collector`` is in the registry from the app's start-up to its
    cleanup (one node per process in production; a test may run several in turn)."""
    if collector is not None:

        async def registered(app: web.Application) -> AsyncIterator[None]:
            metrics.REGISTRY.register(collector)
            yield
            metrics.REGISTRY.unregister(collector)

        app.cleanup_ctx.append(registered)

    async def exposition(request: web.Request) -> web.Response:
        body = generate_latest(metrics.REGISTRY)
        response = web.Response(body=body)
        # CONTENT_TYPE_LATEST carries its charset; set it whole, not through content_type.
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    app.router.add_route("GET", "/metrics", exposition)
