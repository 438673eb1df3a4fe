"""A node's TLS flags (and RKV_TLS_* variables): its HTTPS port and its calls to members.

- ``--tls-cert FILE --tls-key FILE``: the HTTP API speaks HTTPS only, with this
  certificate; the node's advertised URL is https://. When the node calls
  another member (catch-up, snapshot download, join) it presents the same
  certificate as its client certificate, for clusters that ask for one.
- ``--tls-client-ca FILE``: ask clients for a certificate and verify one that is
  presented against this CA (its subject CN names the user); clients with a
  password or a token need none.
- ``--tls-ca FILE``: the CA this node verifies other members' certificates
  against when it calls them (default: the system's CAs).
- ``--tls-handshake-timeout S``: a connection's TLS handshake must finish in
  this long, or it is closed.

Every file is read at start-up: a missing or unreadable one, or a key that does
not match its certificate, stops the node with a message naming the flag.
Parsed by node/cli/settings.py, which owns the environment.
"""

from __future__ import annotations

import argparse
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from http_api.client.credentials import NO_CREDENTIALS, Credentials
from http_api.tls import DEFAULT_HANDSHAKE_TIMEOUT, ServerTls, server_context
from node.errors import ConfigError


@dataclass(frozen=True, slots=True)
class NodeTls:
    """The HTTP port's TLS (None: plain HTTP) and what the node presents to members."""

    server: ServerTls | None = None
    peer_credentials: Credentials = NO_CREDENTIALS


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--tls-cert",
        metavar="FILE",
        help="serve the HTTP API over HTTPS only, with this PEM certificate (chain); "
        "also this node's client certificate when it calls other members (RKV_TLS_CERT)",
    )
    add("--tls-key", metavar="FILE", help="the private key of --tls-cert (RKV_TLS_KEY)")
    add(
        "--tls-client-ca",
        metavar="FILE",
        help="ask HTTPS clients for a certificate and verify it against this CA; a "
        "verified certificate's subject CN names the user (RKV_TLS_CLIENT_CA)",
    )
    add(
        "--tls-ca",
        metavar="FILE",
        help="the CA this node verifies other members' certificates against when it "
        "calls them: catch-up, snapshot download, join (RKV_TLS_CA; default: the "
        "system's CAs)",
    )
    add(
        "--tls-handshake-timeout",
        metavar="SECONDS",
        help="seconds a connection's TLS handshake may take before it is closed "
        f"(RKV_TLS_HANDSHAKE_TIMEOUT, {DEFAULT_HANDSHAKE_TIMEOUT:g})",
    )


def _readable(text: str | None, flag: str) -> Path | None:
    if not text:
        return None
    path = Path(text)
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ConfigError(f"{flag} {text}: cannot read it: {exc.strerror}") from None
    return path


def node_tls(
    value: Callable[[str], str | None], handshake_timeout: Callable[[str | None], float]
) -> NodeTls:
    """The TLS settings from ``value(name)`` (a flag, else its RKV_ variable).
    Raises ConfigError."""
    cert = _readable(value("tls_cert"), "--tls-cert")
    key = _readable(value("tls_key"), "--tls-key")
    client_ca = _readable(value("tls_client_ca"), "--tls-client-ca")
    peer_ca = _readable(value("tls_ca"), "--tls-ca")
    timeout = handshake_timeout(value("tls_handshake_timeout"))
    if (cert is None) != (key is None):
        raise ConfigError("--tls-cert and --tls-key (RKV_TLS_CERT, RKV_TLS_KEY) go together")
    if client_ca is not None and cert is None:
        raise ConfigError("--tls-client-ca needs --tls-cert and --tls-key (TLS on the port)")
    server = None
    if cert is not None and key is not None:
        server = ServerTls(cert, key, client_ca, timeout)
        try:
            server_context(server)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"--tls-cert {cert} / --tls-key {key}"
                + (f" / --tls-client-ca {client_ca}" if client_ca else "")
                + f": cannot use them: {exc}"
            ) from None
    peers = Credentials(
        cafile=None if peer_ca is None else str(peer_ca),
        certfile=None if cert is None else str(cert),
        keyfile=None if key is None else str(key),
    )
    try:
        peers.ssl_context()
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"--tls-ca {peer_ca}: cannot use it: {exc}") from None
    return NodeTls(server, peers)
