"""The lease, lock and election calls (``/v1/leases``, ``/v1/locks``,
``/v1/elections``) as I/O-free plans, which both clients run.

Which calls are sent again after an unknown outcome (a connection lost after
the request went out, a 503): keepalives (renewing twice is harmless), lock
and campaign requests (asking again with the lease that holds the lock
answers the same token; a request whose client went away left the queue)
and proclaims (the same value with the same token). Grants, revocations,
unlocks and resignations are writes like a put: retried only when certainly
not applied, else :class:`UnknownOutcomeError`.

A lock or campaign request waits on the server for at most its ``timeout``
(which the server bounds by ``--max-lock-wait``, 300 s by default), so its
HTTP timeout is that wait plus the client's. :meth:`_LeasePlans.lock_until`
asks again in chunks of at most ``chunk`` seconds until the caller's own
overall timeout; each chunk that ends without the lock leaves the server's
queue and joins it again at the back.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

from http_api.client.errors import (
    InvalidRequestError,
    LockHeldError,
    NoElectionLeaderError,
    RkvClientError,
)
from http_api.client.lease_model import (
    Lease,
    LeaseInfo,
    LockHolder,
    LockInfo,
    Renewal,
    check_lease_id,
    check_lock_name,
    check_ttl,
)
from http_api.client.operations import _Core
from http_api.client.wire import _Plan, _query, _Reply

_JSON = {"Content-Type": "application/json"}
DEFAULT_WAIT_CHUNK = 300.0
"""Seconds one lock or campaign request waits at most: the server's default
``--max-lock-wait``. A server with a lower limit refuses a longer wait (400); the
client then waits in chunks of the limit the refusal names (or of half as long)."""
MIN_WAIT_CHUNK = 1.0
MAX_KEEPALIVE_IDS = 10_000
"""The most lease ids one batch keepalive carries (the server's limit)."""


def _object(body: Any, what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise RkvClientError(f"the server sent a malformed {what}", code="bad_response")
    return body


def lock_path(kind: str, name: str) -> str:
    """``/v1/locks/NAME`` or ``/v1/elections/NAME`` (the name percent-encoded)."""
    return f"/v1/{kind}/{quote(check_lock_name(name), safe='')}"


def _wait_arg(timeout: float) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ValueError(f"a lock wait is a non-negative number of seconds, not {timeout!r}")
    return float(timeout)


_LIMIT_SAID = re.compile(r"\b0 to ([0-9]+(?:\.[0-9]+)?)\b")


def _smaller_chunk(error: InvalidRequestError, chunk: float) -> float | None:
    """After a 400 to a wait of ``chunk`` seconds: a shorter wait the server may take
    (the limit its message names, "... seconds, 0 to 60 (--max-lock-wait)", else half), or None
    when the refusal is not about the wait."""
    message = error.message.lower()
    if "timeout" not in message and "wait" not in message:
        return None
    said = _LIMIT_SAID.search(message)
    shorter = float(said.group(1)) if said else chunk / 2
    if not MIN_WAIT_CHUNK <= shorter < chunk:
        return None
    return shorter


class _LeasePlans:
    """Every lease, lock and election call as a plan over a client's core."""

    def __init__(self, core: _Core) -> None:
        self._core = core

    def _json(self, reply: _Reply, what: str) -> dict[str, Any]:
        return _object(reply.json(), what)

    @staticmethod
    def _body(fields: dict[str, Any]) -> bytes:
        return json.dumps(fields).encode()

    # -- leases ---------------------------------------------------------------------------

    def grant(self, ttl: int) -> _Plan[Lease]:
        body = self._body({"ttl": check_ttl(ttl)})
        reply = yield from self._core.call("POST", "/v1/leases", body, _JSON, write=True)
        return Lease.from_json(reply.json())

    def keepalive(self, lease_id: int, timeout: float | None = None) -> _Plan[Lease]:
        target = f"/v1/leases/{check_lease_id(lease_id)}/keepalive"
        reply = yield from self._core.call("POST", target, None, None, write=False, timeout=timeout)
        return Lease.from_json(reply.json())

    def keepalive_many(self, lease_ids: Sequence[int]) -> _Plan[list[Renewal]]:
        ids = [check_lease_id(lease_id) for lease_id in lease_ids]
        if not ids:
            return []
        if len(ids) > MAX_KEEPALIVE_IDS:
            raise ValueError(f"at most {MAX_KEEPALIVE_IDS} lease ids per keepalive")
        body = self._body({"ids": ids})
        reply = yield from self._core.call("POST", "/v1/leases/keepalive", body, _JSON, write=False)
        listed = self._json(reply, "keepalive answer").get("leases")
        if not isinstance(listed, list):
            raise RkvClientError(
                "the server sent a malformed keepalive answer", code="bad_response"
            )
        return [Renewal.from_json(raw) for raw in listed]

    def revoke(self, lease_id: int) -> _Plan[int]:
        target = f"/v1/leases/{check_lease_id(lease_id)}"
        reply = yield from self._core.call("DELETE", target, write=True)
        deleted = self._json(reply, "revocation").get("deleted_keys")
        return deleted if isinstance(deleted, int) else 0

    def lease(self, lease_id: int) -> _Plan[LeaseInfo]:
        target = f"/v1/leases/{check_lease_id(lease_id)}" + _query({"encoding": "base64"})
        reply = yield from self._core.call("GET", target, write=False)
        return LeaseInfo.from_json(reply.json())

    def leases_page(
        self, after: int | None, limit: int | None
    ) -> _Plan[tuple[list[LeaseInfo], int | None]]:
        if limit is not None and limit < 1:
            raise ValueError("limit must be at least 1")
        target = "/v1/leases" + _query({"after": after, "limit": limit})
        reply = yield from self._core.call("GET", target, write=False)
        body = self._json(reply, "lease list")
        listed = body.get("leases")
        if not isinstance(listed, list):
            raise RkvClientError("the server sent a malformed lease list", code="bad_response")
        following = body.get("next_after")
        return (
            [LeaseInfo.from_json(raw) for raw in listed],
            following if isinstance(following, int) and not isinstance(following, bool) else None,
        )

    # -- locks and elections ----------------------------------------------------------------

    def _wait_for(
        self, kind: str, name: str, fields: dict[str, Any], wait: float
    ) -> _Plan[LockHolder]:
        """POST a lock or campaign request that waits up to ``wait`` seconds."""
        body = self._body({**fields, "timeout": wait})
        reply = yield from self._core.call(
            "POST",
            lock_path(kind, name),
            body,
            _JSON,
            write=False,
            timeout=wait + self._core.timeout,
        )
        return LockHolder.from_json(reply.json(), name)

    def lock(self, name: str, lease_id: int, timeout: float) -> _Plan[LockHolder]:
        fields = {"lease": check_lease_id(lease_id)}
        return self._wait_for("locks", name, fields, _wait_arg(timeout))

    def campaign(self, name: str, lease_id: int, value: str, timeout: float) -> _Plan[LockHolder]:
        if not isinstance(value, str):
            raise TypeError("an election value is a str")
        fields = {"lease": check_lease_id(lease_id), "value": value}
        return self._wait_for("elections", name, fields, _wait_arg(timeout))

    def wait_until(
        self,
        kind: str,
        name: str,
        fields: dict[str, Any],
        *,
        timeout: float | None,
        chunk: float,
        gone: Callable[[], BaseException | None],
    ) -> _Plan[LockHolder]:
        """Ask for the lock (or leadership) in waits of at most ``chunk`` seconds until it
        is had, or ``timeout`` seconds pass (None: no end; 0: try once), or ``gone()``
        names why asking is pointless (the lease was lost: that is raised). Raises
        LockHeldError when the time is up."""
        if not chunk >= MIN_WAIT_CHUNK:
            raise ValueError(f"the wait chunk is at least {MIN_WAIT_CHUNK:g} seconds")
        deadline = None if timeout is None else time.monotonic() + _wait_arg(timeout)
        check_lease_id(fields["lease"])
        while True:
            if (reason := gone()) is not None:
                raise reason
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            wait = chunk if left is None else min(chunk, left)
            try:
                return (yield from self._wait_for(kind, name, fields, wait))
            except LockHeldError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
            except InvalidRequestError as refused:
                smaller = _smaller_chunk(refused, wait)
                if smaller is None:
                    raise
                chunk = smaller

    def unlock(self, kind: str, name: str, lease_id: int) -> _Plan[None]:
        target = lock_path(kind, name) + _query({"lease": check_lease_id(lease_id)})
        yield from self._core.call("DELETE", target, write=True)

    def lock_info(self, name: str) -> _Plan[LockInfo]:
        reply = yield from self._core.call("GET", lock_path("locks", name), write=False)
        return LockInfo.from_json(reply.json(), name)

    def proclaim(self, name: str, lease_id: int, token: int, value: str) -> _Plan[LockHolder]:
        if not isinstance(value, str):
            raise TypeError("an election value is a str")
        body = self._body({"lease": check_lease_id(lease_id), "token": token, "value": value})
        reply = yield from self._core.call(
            "PUT", lock_path("elections", name), body, _JSON, write=False
        )
        answer = self._json(reply, "proclamation")
        return LockHolder(name, lease_id, token, str(answer.get("value", value)))

    def leader(self, name: str) -> _Plan[LockHolder | None]:
        try:
            reply = yield from self._core.call("GET", lock_path("elections", name), write=False)
        except NoElectionLeaderError:
            return None
        return LockHolder.from_json(reply.json(), name)
