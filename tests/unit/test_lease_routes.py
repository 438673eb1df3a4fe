"""The lease, lock and election routes of an app built without a lease service: each
answers 503 leases_unavailable (a node always has one: node/cli/wiring.py).

tests/cluster/test_leases_http.py covers the routes against real nodes.
"""

from __future__ import annotations

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from http_api.app import build_app
from http_api.permissions import ROUTE_NEEDS
from tests.unit.test_openapi import NoService

LEASE_ROUTES = sorted(
    (method, path)
    for method, path in ROUTE_NEEDS
    if path.startswith(("/v1/leases", "/v1/locks", "/v1/elections"))
)


def concrete(path: str) -> str:
    return path.replace("{id}", "7").replace("{name}", "jobs/a")


@pytest.mark.asyncio
async def test_without_a_lease_service_every_lease_route_answers_503() -> None:
    assert len(LEASE_ROUTES) == 14
    server = TestServer(build_app(NoService()))
    await server.start_server()
    try:
        async with ClientSession() as session:
            for method, path in LEASE_ROUTES:
                url = server.make_url(concrete(path))
                async with session.request(method, url, json={"ttl": 5}) as response:
                    answer = await response.json()
                    assert (response.status, answer["code"]) == (503, "leases_unavailable"), (
                        method,
                        path,
                    )
    finally:
        await server.close()
