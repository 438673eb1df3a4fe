"""Building the aiohttp application around a :class:`KvApi`."""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client.registry import Collector

from http_api import (
    routes_alarms,
    routes_audit,
    routes_auth,
    routes_elections,
    routes_health,
    routes_kv,
    routes_leases,
    routes_load,
    routes_locks,
    routes_log,
    routes_metrics,
    routes_node,
    routes_producers,
    routes_snapshot,
    routes_watch,
    routes_writes,
)
from http_api.auth_api import AuthApi
from http_api.authn import AUTH
from http_api.body_budget import BUDGET, BodyBudget
from http_api.connections import LIMITS, HttpLimits
from http_api.fair_share import SHARES, FairShare
from http_api.kv_api import KvApi
from http_api.lease_api import LeaseApi
from http_api.lease_context import LEASES
from http_api.middlewares import common_middlewares
from http_api.request_id import add_request_id_header
from http_api.request_size import body_limit
from http_api.routes_audit import AuditApi
from http_api.stream_slots import STREAMS, StreamSlots
from node.metrics import STREAMS_OPEN

SERVICE: web.AppKey[KvApi] = web.AppKey("service", KvApi)


def build_app(
    service: KvApi,
    audits: AuditApi | None = None,
    limits: HttpLimits | None = None,
    auth: AuthApi | None = None,
    leases: LeaseApi | None = None,
    *,
    metrics: bool = True,
    collector: Collector | None = None,
    forwarded: Middleware | None = None,
) -> web.Application:
    """The app around ``service``; ``audits`` serves /v1/audit (503 without one), ``auth``
    authenticates and authorizes requests once enabled (without one, nothing is checked
    and /v1/auth answers 503), ``leases`` serves leases, locks and elections (503
    ``leases_unavailable`` without one). ``metrics``: serve GET /metrics and count
    requests (http_api/routes_metrics.py), with ``collector`` (the node's scrape-time
    gauges) in the registry while the app runs. ``forwarded``: the first middleware,
    trusting what HTTP workers forward (http_api/forwarding.py)."""
    app = web.Application(
        middlewares=common_middlewares(forwarded, metrics=metrics),
        client_max_size=body_limit(service.max_value_bytes),
    )
    app[SERVICE] = service
    app.on_response_prepare.append(add_request_id_header)
    if auth is not None:
        app[AUTH] = auth
    if leases is not None:
        app[LEASES] = leases
    app[LIMITS] = limits = limits or HttpLimits()
    app[SHARES] = FairShare(limits.fair_share_busy)
    app[BUDGET] = BodyBudget(
        limits.max_body_bytes_in_flight,
        body_limit(service.max_value_bytes),
        wait=limits.read_timeout / 2,
    )
    app[STREAMS] = streams = StreamSlots()

    async def end_streams(app: web.Application) -> None:
        streams.close()

    app.on_shutdown.append(end_streams)
    if metrics:
        routes_metrics.add_routes(app, collector)
        STREAMS_OPEN.set_function(lambda: streams.open)
    routes_kv.add_routes(app, SERVICE)
    routes_writes.add_routes(app, SERVICE)
    routes_load.add_routes(app, SERVICE)
    routes_node.add_routes(app, SERVICE)
    routes_alarms.add_routes(app, SERVICE)
    routes_health.add_routes(app, SERVICE)
    routes_log.add_routes(app, SERVICE)
    routes_snapshot.add_routes(app, SERVICE)
    routes_watch.add_routes(app, SERVICE, LIMITS)
    routes_producers.add_routes(app, SERVICE)
    routes_audit.add_routes(app, audits)
    routes_auth.add_routes(app)
    routes_leases.add_routes(app, SERVICE)
    routes_locks.add_routes(app)
    routes_elections.add_routes(app, SERVICE)
    return app
