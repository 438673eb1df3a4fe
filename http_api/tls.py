"""TLS on the node's HTTP port: the server's context and the client certificate's user.

With a certificate and key the port speaks HTTPS only (TLS 1.2 at least, the
ssl module's defaults otherwise). With a client CA as well it asks every client
for a certificate (``CERT_OPTIONAL``: clients that authenticate with a password
or a token need none) and verifies one that is presented against that CA; a
certificate it cannot verify fails the handshake. A verified certificate's
subject CN names the user (:func:`client_certificate_user`), as etcd does.

A handshake must finish within ``handshake_timeout`` seconds
(http_api/server.py gives it to the event loop); a client that sends plain
HTTP to the port fails the handshake and is disconnected (asyncio logs that at
debug level only).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

DEFAULT_HANDSHAKE_TIMEOUT = 10.0  # node/cli/settings.py --tls-handshake-timeout
FORWARDED_CERT_USER = "rkv.forwarded_cert_user"
"""request[FORWARDED_CERT_USER]: the certificate user of a request an HTTP worker
forwarded to main (http_api/forwarding.py): the worker's client connection did the
handshake, so the user cannot be read from main's own transport."""


@dataclass(frozen=True, slots=True)
class ServerTls:
    """Where the node's certificate, key and (for mutual TLS) client CA are."""

    certfile: Path
    keyfile: Path
    client_cafile: Path | None = None
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT


def server_context(tls: ServerTls) -> ssl.SSLContext:
    """The server's context. Raises OSError or ssl.SSLError for a file that cannot be
    read, is not PEM, or a key that does not match the certificate."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tls.certfile, tls.keyfile)
    if tls.client_cafile is not None:
        context.load_verify_locations(cafile=str(tls.client_cafile))
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def common_name(peercert: Any) -> str | None:
    """The subject CN of a certificate as ``SSLSocket.getpeercert()`` returns it."""
    if not isinstance(peercert, dict):
        return None
    for rdn in peercert.get("subject", ()):
        for name, value in rdn:
            if name == "commonName" and isinstance(value, str) and value:
                return value
    return None


def client_certificate_user(request: web.BaseRequest) -> str | None:
    """The user named by the request's verified client certificate (its subject CN),
    or None: no TLS, no client CA, or no certificate presented. An unverified
    certificate never gets this far (the handshake fails)."""
    forwarded = request.get(FORWARDED_CERT_USER)
    if isinstance(forwarded, str):
        return forwarded
    transport = request.transport
    if transport is None:
        return None
    return common_name(transport.get_extra_info("peercert"))
