"""What the lease, lock and election service answers (docs/LEASES.md).

The HTTP layer sees leases through these types and :class:`Caller`; the
records behind them are node/state/leases.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class Caller(NamedTuple):
    """Who asks, for lease ownership: ``name`` is the user ("" while authentication
    is off) and ``admin`` lets the caller use any lease (always True while auth is
    off, so nothing is checked)."""

    name: str
    admin: bool


ANYONE = Caller("", True)
"""The caller while authentication is off: owns nothing, may use every lease."""


class Fence(NamedTuple):
    """``Rkv-Fencing: NAME=TOKEN``: apply the write only while lock NAME is held
    with exactly TOKEN."""

    name: str
    token: int


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    """A lease as this node sees it. ``remaining``: seconds before this node would
    consider it expired, on its own clock. ``keys`` and ``locks`` are filled only by
    a look at one lease (at most 1000 keys; ``truncated`` when there are more)."""

    lease_id: int
    ttl: int
    remaining: float
    owner: str
    keys: tuple[bytes, ...] = ()
    locks: tuple[str, ...] = ()
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class Renewal:
    """One lease's keepalive outcome: ``ttl`` (seconds) when it was renewed, else
    ``code``: ``lease_expired``, ``lease_not_found`` or ``lease_not_owned``."""

    lease_id: int
    ttl: int | None
    code: str | None = None


@dataclass(frozen=True, slots=True)
class LockHolder:
    """Who holds a lock (or leads an election): its lease, its fencing token, when
    it got it (the entry's timestamp, ms since the epoch) and its value."""

    name: str
    lease_id: int
    token: int
    since_ms: int
    value: bytes = b""

    @property
    def key(self) -> str:
        """Unique to this holding: NAME/LEASE_ID."""
        return f"{self.name}/{self.lease_id}"


@dataclass(frozen=True, slots=True)
class LockInfo:
    name: str
    holder: LockHolder | None
    waiters: int
