"""What a client presents to a node: the CA it trusts, its certificate, who it is.

One :class:`Credentials` value travels through every client: the blocking and
the asyncio clients, the control-plane calls (http_api/client/control.py),
the CLI's commands, a node calling another member. It builds

- the TLS context for ``https://`` URLs (:meth:`Credentials.ssl_context`):
  the server's certificate is verified against ``cafile`` (else the system's
  CAs) and its host name checked, TLS 1.2 at least; with ``certfile`` the
  client presents that certificate (mutual TLS: its subject CN names the user);
- the ``Authorization`` header (:meth:`Credentials.authorization`): HTTP Basic
  for a user and password, ``Bearer`` for a token, never both.

The password and the token never appear in a repr, a log line or an error.
"""

from __future__ import annotations

import base64
import ssl
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Credentials:
    """TLS trust and identity for calls to rkv nodes (every field optional).

    ``cafile``: PEM file of the CA(s) that signed the nodes' certificates (None:
    the system's). ``certfile``/``keyfile``: this client's certificate and key
    for mutual TLS (the key may sit in ``certfile``). ``user`` and ``password``:
    HTTP Basic. ``token``: a bearer token (instead of a user and password).
    Raises ValueError for a combination that cannot be sent.
    """

    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.token is not None and (self.user is not None or self.password is not None):
            raise ValueError("give a user and password or a token, not both")
        if self.password is not None and self.user is None:
            raise ValueError("a password needs a user")
        if self.user is not None and self.password is None:
            raise ValueError(f"user {self.user!r} needs a password")
        if self.user is not None and ":" in self.user:
            raise ValueError("a user name cannot contain ':' (HTTP Basic separates with it)")
        if self.keyfile is not None and self.certfile is None:
            raise ValueError("a client key needs its certificate (certfile)")
        if self.token is not None and not self.token.strip():
            raise ValueError("the token is empty")

    @property
    def uses_tls_files(self) -> bool:
        """Whether a CA or a client certificate was given."""
        return self.cafile is not None or self.certfile is not None

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context, or None when neither a CA nor a client certificate
        was given (an https:// URL is then verified against the system's CAs, as
        http.client and aiohttp do by default). Raises OSError or ssl.SSLError for a
        file that cannot be read or is not PEM."""
        if not self.uses_tls_files:
            return None
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.cafile)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.certfile is not None:
            context.load_cert_chain(self.certfile, self.keyfile)
        return context

    def authorization(self) -> str | None:
        """The Authorization header's value, or None without a user or token."""
        if self.token is not None:
            return f"Bearer {self.token.strip()}"
        if self.user is not None and self.password is not None:
            pair = f"{self.user}:{self.password}".encode()
            return "Basic " + base64.b64encode(pair).decode("ascii")
        return None

    def headers(self) -> dict[str, str]:
        """The headers every request carries ({} or the Authorization header)."""
        value = self.authorization()
        return {} if value is None else {"Authorization": value}


NO_CREDENTIALS = Credentials()
"""Plain HTTP, or HTTPS trusting the system's CAs, and no user."""
