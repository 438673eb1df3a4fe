"""The node's HTTPS port (http_api/tls.py, GuardedSite) and the clients' side of it, on
real sockets: a real aiohttp server with the node's site, real TLS, the real clients.

- a verified client certificate names its user (mutual TLS), a client without one
  is still served, one from another CA fails the handshake and logs nothing alarming;
- every client sends the Authorization header its Credentials make, and maps 401 and
  403 to AuthenticationError and PermissionDeniedError.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

from http_api.client import (
    AsyncRkvClient,
    AuthenticationError,
    ClusterUnreachableError,
    Credentials,
    PermissionDeniedError,
    RetryPolicy,
    RkvClient,
    TlsError,
)
from http_api.client.control import ControlClient
from http_api.connections import ConnectionCounts, GuardedSite, HttpLimits
from http_api.tls import ServerTls, client_certificate_user, server_context
from node.cli.cert_authority import CertificatePlan, create_certificates
from tests.support.cluster import free_ports

pytestmark = pytest.mark.timeout(60)


class Server:
    def __init__(self, certs: Path, port: int) -> None:
        self.certs = certs
        self.port = port
        self.seen: list[dict[str, Any]] = []
        self.answer: tuple[int, str] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def credentials(self, **fields: str) -> Credentials:
        return Credentials(cafile=str(self.certs / "ca.crt"), **fields)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(
            {
                "user": client_certificate_user(request),
                "authorization": request.headers.get("Authorization"),
            }
        )
        if self.answer is not None:
            status, code = self.answer
            return web.json_response({"code": code, "message": f"{code} here"}, status=status)
        return web.json_response({"members": [], "leader": None, "user": self.seen[-1]["user"]})


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = Path(tmp_path_factory.mktemp("certs"))
    create_certificates(CertificatePlan(out, ("127.0.0.1",), ("n0",), ("alice",)))
    other = out / "other"
    create_certificates(CertificatePlan(other, ("127.0.0.1",), ("n9",), ("mallory",)))
    return out


@pytest_asyncio.fixture
async def server(certs: Path) -> AsyncIterator[Server]:
    (port,) = free_ports(1)
    served = Server(certs, port)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", served.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    tls = ServerTls(certs / "n0.crt", certs / "n0.key", certs / "ca.crt", handshake_timeout=2)
    site = GuardedSite(
        runner,
        "127.0.0.1",
        port,
        ConnectionCounts(HttpLimits()),
        {},
        ssl_context=server_context(tls),
        handshake_timeout=tls.handshake_timeout,
    )
    await site.start()
    try:
        yield served
    finally:
        await runner.cleanup()


def status_of(server: Server, credentials: Credentials) -> dict[str, Any]:
    with RkvClient(server.url, credentials=credentials, retry=RetryPolicy(max_attempts=1)) as c:
        return c.status(server.url)


@pytest.mark.asyncio
async def test_a_verified_client_certificate_names_its_user(server: Server) -> None:
    alice = server.credentials(
        certfile=str(server.certs / "alice.crt"), keyfile=str(server.certs / "alice.key")
    )
    assert (await asyncio.to_thread(status_of, server, alice))["user"] == "alice"
    # Password and token clients need no certificate (CERT_OPTIONAL).
    assert (await asyncio.to_thread(status_of, server, server.credentials()))["user"] is None
    async with AsyncRkvClient(server.url, credentials=alice) as client:
        assert (await client.status(server.url))["user"] == "alice"


@pytest.mark.asyncio
async def test_a_certificate_from_another_ca_fails_the_handshake(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    other = server.certs / "other"
    mallory = server.credentials(
        certfile=str(other / "mallory.crt"), keyfile=str(other / "mallory.key")
    )
    with caplog.at_level(logging.INFO):
        # Under TLS 1.3 the server judges the client's certificate after the client
        # has finished its side: the client sees an alert (TlsError) or the
        # connection closed before any answer, never a served request.
        with pytest.raises(ClusterUnreachableError):
            await asyncio.to_thread(status_of, server, mallory)
        # The server is still there for everyone else.
        assert (await asyncio.to_thread(status_of, server, server.credentials()))["user"] is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert all(seen["user"] != "mallory" for seen in server.seen)


@pytest.mark.asyncio
async def test_a_client_trusting_another_ca_fails_at_once(server: Server) -> None:
    stranger = Credentials(cafile=str(server.certs / "other" / "ca.crt"))
    with RkvClient(server.url, credentials=stranger) as client, pytest.raises(TlsError) as caught:
        await asyncio.to_thread(client.get, "k")
    assert "certificate" in str(caught.value)
    assert server.seen == []
    async with AsyncRkvClient(server.url, credentials=stranger) as aclient:
        with pytest.raises(TlsError):
            await aclient.get("k")
    status, answer = await asyncio.to_thread(ControlClient([server.url], 5, stranger).members)
    assert (status, answer["code"]) == (0, "tls_failed")


@pytest.mark.asyncio
async def test_every_client_sends_the_authorization_header(server: Server) -> None:
    basic = server.credentials(user="bob", password="pw")
    await asyncio.to_thread(status_of, server, basic)
    async with AsyncRkvClient(server.url, credentials=server.credentials(token="t0k")) as c:
        await c.status(server.url)
    control = ControlClient([server.url], 5, server.credentials(token="t1k"))
    status, _ = await asyncio.to_thread(control.members)
    assert status == 200
    assert [seen["authorization"] for seen in server.seen] == [
        "Basic " + base64.b64encode(b"bob:pw").decode(),
        "Bearer t0k",
        "Bearer t1k",
    ]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("status", "code", "kind"),
    [
        (401, "invalid_credentials", AuthenticationError),
        (401, "token_expired", AuthenticationError),
        (403, "permission_denied", PermissionDeniedError),
    ],
)
async def test_401_and_403_become_their_errors(
    server: Server, status: int, code: str, kind: type[Exception]
) -> None:
    server.answer = (status, code)
    credentials = server.credentials(user="bob", password="wrong")
    with RkvClient(server.url, credentials=credentials) as client, pytest.raises(kind) as caught:
        await asyncio.to_thread(client.get, "k")
    assert getattr(caught.value, "code", None) == code
    assert len(server.seen) <= 2  # the leader's discovery, then the get: never retried
    async with AsyncRkvClient(server.url, credentials=credentials) as aclient:
        with pytest.raises(kind):
            await aclient.put("k", "v")
