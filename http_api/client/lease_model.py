"""The values the lease, lock and election calls take and return (docs/LEASES.md).

A :class:`Lease` is what a grant answers; :class:`LeaseInfo` what a look at
one shows; :class:`Renewal` one lease's outcome in a batch keepalive. A
:class:`LockHolder` is who holds a lock or leads an election, with its
fencing token; :class:`Fencing` is that token as a write carries it
(``Rkv-Fencing: NAME=TOKEN``). Nothing here does I/O.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from http_api.client.errors import RkvClientError

LOCK_NAME = re.compile(r"[A-Za-z0-9._:/@-]{1,200}")
"""What a lock or election name may be (the server checks it too)."""
FENCING_HEADER = "Rkv-Fencing"


def _bad(what: str) -> RkvClientError:
    return RkvClientError(f"the server sent a malformed {what}", code="bad_response")


def _int(raw: Any, name: str, what: str) -> int:
    value = raw.get(name) if isinstance(raw, dict) else None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(what)
    return value


def check_lock_name(name: str) -> str:
    """``name`` if it is a valid lock or election name, else ValueError."""
    if (
        not isinstance(name, str)
        or LOCK_NAME.fullmatch(name) is None
        or any(part in ("", ".", "..") for part in name.split("/"))
    ):
        raise ValueError(
            "a lock or election name is 1 to 200 characters of A-Z a-z 0-9 . _ : / @ -, "
            f"in /-separated parts that are neither empty nor . or .., not {name!r:.80}"
        )
    return name


def check_lease_id(lease_id: int) -> int:
    if isinstance(lease_id, bool) or not isinstance(lease_id, int) or lease_id < 1:
        raise ValueError(f"a lease id is a positive integer, not {lease_id!r}")
    return lease_id


def check_ttl(ttl: int) -> int:
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 1:
        raise ValueError(f"a lease TTL is a positive integer number of seconds, not {ttl!r}")
    return ttl


class Fencing(NamedTuple):
    """A fencing token as a write carries it: apply the write only while lock ``name``
    is held with exactly ``token``."""

    name: str
    token: int

    def header(self) -> str:
        return f"{self.name}={self.token}"


class HasFencing(Protocol):
    """Anything holding a lock: a held lock, an election's leadership."""

    @property
    def fencing(self) -> Fencing: ...


FencingLike = Fencing | tuple[str, int] | HasFencing


def fencing_headers(fencing: FencingLike | None) -> dict[str, str]:
    """``{"Rkv-Fencing": "NAME=TOKEN"}`` for ``fencing=`` (a held lock, or a (name,
    token) pair), ``{}`` for None."""
    if fencing is None:
        return {}
    if isinstance(fencing, tuple):
        if len(fencing) != 2:
            raise ValueError("fencing= takes a held lock or a (name, token) pair")
        name, token = fencing
    else:
        name, token = fencing.fencing
    check_lock_name(name)
    if isinstance(token, bool) or not isinstance(token, int) or token < 0:
        raise ValueError(f"a fencing token is a non-negative integer, not {token!r}")
    return {FENCING_HEADER: Fencing(name, token).header()}


class HasLeaseId(Protocol):
    @property
    def id(self) -> int: ...


def lease_arg(lease: int | HasLeaseId) -> int:
    """A lease given as its id or as an object with an ``id`` (a Lease, a kept lease)."""
    if isinstance(lease, int):
        return check_lease_id(lease)
    return check_lease_id(lease.id)


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease as granted or renewed: its id and TTL in seconds."""

    id: int
    ttl: int

    @classmethod
    def from_json(cls, raw: Any) -> Lease:
        return cls(_int(raw, "id", "lease"), _int(raw, "ttl", "lease"))


@dataclass(frozen=True, slots=True)
class Renewal:
    """One lease's outcome in a batch keepalive: ``ttl`` when it was renewed, else
    ``code`` (``lease_expired``, ``lease_not_found``, ``lease_not_owned``)."""

    lease_id: int
    ttl: int | None
    code: str | None = None

    @property
    def renewed(self) -> bool:
        return self.ttl is not None

    @classmethod
    def from_json(cls, raw: Any) -> Renewal:
        lease_id = _int(raw, "id", "keepalive answer")
        ttl = raw.get("ttl")
        if isinstance(ttl, int) and not isinstance(ttl, bool):
            return cls(lease_id, ttl)
        code = raw.get("code")
        return cls(lease_id, None, code if isinstance(code, str) else "lease_not_found")


def _key(text: Any) -> bytes:
    if not isinstance(text, str):
        raise _bad("lease key")
    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):
        raise _bad("lease key") from None


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    """A lease as one node sees it. ``remaining``: seconds before that node would
    consider it expired, on its own clock. ``keys`` (at most 1000; ``truncated``
    when there are more) and ``locks`` are filled by a look at one lease only."""

    id: int
    ttl: int
    remaining: float
    owner: str
    keys: tuple[bytes, ...] = ()
    locks: tuple[str, ...] = ()
    truncated: bool = False

    @classmethod
    def from_json(cls, raw: Any) -> LeaseInfo:
        remaining = raw.get("remaining") if isinstance(raw, dict) else None
        if isinstance(remaining, bool) or not isinstance(remaining, int | float):
            raise _bad("lease")
        keys = raw.get("keys") or []
        locks = raw.get("locks") or []
        if not isinstance(keys, list) or not isinstance(locks, list):
            raise _bad("lease")
        return cls(
            _int(raw, "id", "lease"),
            _int(raw, "ttl", "lease"),
            float(remaining),
            str(raw.get("owner") or ""),
            tuple(_key(key) for key in keys),
            tuple(str(lock) for lock in locks),
            bool(raw.get("truncated", False)),
        )


@dataclass(frozen=True, slots=True)
class LockHolder:
    """Who holds a lock or leads an election: its lease, its fencing ``token`` (it
    strictly increases with each new holder of the name), its ``value`` (an
    election's; "" for a plain lock) and when it got it (``since_ms``, ms since the
    epoch; 0 when the answer did not say)."""

    name: str
    lease_id: int
    token: int
    value: str = ""
    since_ms: int = 0

    @property
    def key(self) -> str:
        """Unique to this holding: NAME/LEASE_ID."""
        return f"{self.name}/{self.lease_id}"

    @property
    def fencing(self) -> Fencing:
        """What to pass as ``fencing=`` on a write made under this holding."""
        return Fencing(self.name, self.token)

    @classmethod
    def from_json(cls, raw: Any, name: str) -> LockHolder:
        since = raw.get("since_ms") if isinstance(raw, dict) else None
        value = raw.get("value") if isinstance(raw, dict) else None
        return cls(
            str(raw.get("name") or name),
            _int(raw, "lease", "lock holder"),
            _int(raw, "token", "lock holder"),
            value if isinstance(value, str) else "",
            since if isinstance(since, int) and not isinstance(since, bool) else 0,
        )


@dataclass(frozen=True, slots=True)
class LockInfo:
    """A lock as the cluster has it now: its holder (None: free) and how many wait."""

    name: str
    holder: LockHolder | None
    waiters: int

    @classmethod
    def from_json(cls, raw: Any, name: str) -> LockInfo:
        if not isinstance(raw, dict):
            raise _bad("lock")
        holder = raw.get("holder")
        waiters = raw.get("waiters", 0)
        return cls(
            str(raw.get("name") or name),
            None if holder is None else LockHolder.from_json(holder, name),
            waiters if isinstance(waiters, int) else 0,
        )


def leader_of_line(raw: Any, name: str) -> LockHolder | None:
    """One leader line of an election's observe stream: ``{"leader": null}`` when
    nobody leads, else the leader (as ``{"leader": {...}}`` or the object itself)."""
    if isinstance(raw, dict) and "leader" in raw:
        inner = raw["leader"]
        return None if inner is None else LockHolder.from_json(inner, name)
    return LockHolder.from_json(raw, name)
