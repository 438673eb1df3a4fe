"""Building the aiohttp application around a :class:`KvApi`."""

from __future__ import annotations

from aiohttp import web

from http_api import (
    routes_audit,
    routes_kv,
    routes_log,
    routes_node,
    routes_producers,
    routes_snapshot,
    routes_watch,
    routes_writes,
)
from http_api.errors import error_middleware
from http_api.kv_api import KvApi
from http_api.routes_audit import AuditApi

SERVICE: web.AppKey[KvApi] = web.AppKey("service", KvApi)

# Bodies beyond this are refused with 413 before they are read whole. A
# transaction may carry many values, so the cap is above the value limit.
MIN_BODY_LIMIT = 16 * 1024 * 1024


def body_limit(max_value_bytes: int) -> int:
    """The largest request body the API reads: so the most keys and values one
    write (one raft command) can carry."""
    return max(MIN_BODY_LIMIT, 2 * max_value_bytes + 65536)


def build_app(service: KvApi, audits: AuditApi | None = None) -> web.Application:
    """The app around ``service``; ``audits`` serves /v1/audit (503 without one)."""
    app = web.Application(
        middlewares=[error_middleware],
        client_max_size=body_limit(service.max_value_bytes),
    )
    app[SERVICE] = service
    routes_kv.add_routes(app, SERVICE)
    routes_writes.add_routes(app, SERVICE)
    routes_node.add_routes(app, SERVICE)
    routes_log.add_routes(app, SERVICE)
    routes_snapshot.add_routes(app, SERVICE)
    routes_watch.add_routes(app, SERVICE)
    routes_producers.add_routes(app, SERVICE)
    routes_audit.add_routes(app, audits)
    return app
