"""Bearer tokens: signed, expiring, verified by any member without a round trip.

A token is ``rkv1.<payload>.<mac>`` (both unpadded base64url): the payload is
msgpack ``[kind, name, revision, expires_ms]`` and the mac its HMAC-SHA256
under a key derived with HKDF-SHA256 from the cluster secret, one key per kind
(``info`` says which), so a token of one kind can never pass for the other:

- ``user``: issued by ``POST /v1/auth/token`` to a user whose password checked;
  ``revision`` is the auth revision the issuing node had applied. Every auth
  change raises the revision, so a token issued before the last change is
  refused (``invalid_token``): deleting a user, revoking a role or changing a
  password takes effect on every token at once. A node that has not applied
  the token's revision yet (it lags) accepts it and authorizes with the roles it
  knows.
- ``member``: what one member sends another on its own calls (catch-up, snapshot
  downloads, join); ``name`` is the calling node's id and ``revision`` 0. It
  grants the built-in identity :data:`MEMBER_IDENTITY`, whatever the auth state
  (a member behind on auth changes must still catch up), and lives
  :data:`MEMBER_TOKEN_SECONDS`; a member makes a new one for every call.

Another cluster's secret derives other keys: its tokens are ``invalid_token``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Callable
from typing import NamedTuple

import msgpack
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from node.errors import Unauthenticated

TOKEN_PREFIX = "rkv1"
USER_KIND = "user"
MEMBER_KIND = "member"
MEMBER_IDENTITY = "rkv:member"
"""The identity members authenticate as to each other: admin, and read on every key.
Not a user of the store (``:`` cannot be in a user's name)."""
MEMBER_TOKEN_SECONDS = 300.0
DEFAULT_TOKEN_TTL = 600.0
MAX_TOKEN_CHARS = 4096


class TokenClaims(NamedTuple):
    kind: str
    name: str
    revision: int
    expires_ms: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def member_headers(secret: bytes | None, node_id: str) -> Callable[[], dict[str, str]]:
    """The headers hook of this node's calls to other members (catch-up, snapshot
    downloads, join): a fresh member token each call; none without a cluster secret."""
    signer = None if secret is None else TokenSigner(secret)

    def headers() -> dict[str, str]:
        if signer is None:
            return {}
        return {"Authorization": "Bearer " + signer.member_token(node_id)}

    return headers


class TokenSigner:
    """Makes and checks tokens under keys derived from one cluster secret."""

    def __init__(self, secret: bytes) -> None:
        self._keys = {
            kind: HKDF(
                algorithm=hashes.SHA256(),
                length=32,
                salt=None,
                info=b"rkv tokens: " + kind.encode(),
            ).derive(secret)
            for kind in (USER_KIND, MEMBER_KIND)
        }

    def _mac(self, kind: str, payload: bytes) -> bytes:
        return hmac.new(self._keys[kind], payload, hashlib.sha256).digest()

    def issue(self, kind: str, name: str, revision: int, ttl_seconds: float) -> str:
        expires_ms = int((time.time() + ttl_seconds) * 1000)
        payload: bytes = msgpack.packb([kind, name, revision, expires_ms], use_bin_type=True)
        return f"{TOKEN_PREFIX}.{_b64(payload)}.{_b64(self._mac(kind, payload))}"

    def member_token(self, node_id: str) -> str:
        return self.issue(MEMBER_KIND, node_id, 0, MEMBER_TOKEN_SECONDS)

    def verify(self, token: str) -> TokenClaims:
        """The token's claims. Raises Unauthenticated ``invalid_token`` (not one of this
        cluster's, altered, malformed) or ``token_expired``."""
        invalid = Unauthenticated("the token is not valid here", code="invalid_token")
        parts = token.split(".")
        if len(token) > MAX_TOKEN_CHARS or len(parts) != 3 or parts[0] != TOKEN_PREFIX:
            raise invalid
        try:
            payload, mac = _unb64(parts[1]), _unb64(parts[2])
            kind, name, revision, expires_ms = msgpack.unpackb(payload, raw=False)
        except (ValueError, binascii.Error, TypeError, msgpack.UnpackException):
            raise invalid from None
        if (
            kind not in self._keys
            or type(name) is not str
            or type(revision) is not int
            or type(expires_ms) is not int
            or not hmac.compare_digest(mac, self._mac(kind, payload))
        ):
            raise invalid
        if expires_ms <= time.time() * 1000:
            raise Unauthenticated("the token has expired: ask for a new one", code="token_expired")
        return TokenClaims(kind, name, revision, expires_ms)
