"""An election for the blocking client: ``client.election(name, ttl=10)``.

An election is a lock whose holder announces a value (docs/LEASES.md,
"Elections"). :meth:`Election.campaign` grants a lease kept alive by a
background thread and waits until this candidate leads; :meth:`proclaim`
announces a new value; :meth:`resign` revokes the lease (which ends the
leadership in the same raft entry). Leaving ``with election:`` resigns.
When the lease is lost while leading, ``lost`` is set and :meth:`resign`
(so leaving the block) raises :class:`LockLost`; the leader's ``token``
fences writes like a lock's (``fencing=election.leadership``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import TracebackType
from typing import Protocol

from http_api.client.errors import LockLost, NotLockHolderError
from http_api.client.lease_model import Fencing, LockHolder, check_lock_name, check_ttl
from http_api.client.lease_plans import DEFAULT_WAIT_CHUNK
from http_api.client.locks import KeptLease, lock_lost, report_lost


class _ElectionClient(Protocol):
    def lease(self, ttl: int) -> KeptLease: ...

    def campaign(
        self,
        name: str,
        lease: int | KeptLease,
        value: str,
        timeout: float | None = None,
        *,
        wait_chunk: float = DEFAULT_WAIT_CHUNK,
    ) -> LockHolder: ...

    def proclaim(self, name: str, lease: int | KeptLease, token: int, value: str) -> LockHolder: ...

    def leader(self, name: str) -> LockHolder | None: ...

    def observe(self, name: str) -> Iterator[LockHolder | None]: ...


class Election:
    """One candidate in election ``name`` (see the module's docstring)."""

    def __init__(
        self, client: _ElectionClient, name: str, ttl: int, wait_chunk: float = DEFAULT_WAIT_CHUNK
    ) -> None:
        self.name = check_lock_name(name)
        self.ttl = check_ttl(ttl)
        self._client = client
        self._wait_chunk = wait_chunk
        self._lease: KeptLease | None = None
        self._leadership: LockHolder | None = None
        self._idle = threading.Event()

    @property
    def lease(self) -> KeptLease | None:
        """The candidate's lease, from a campaign until resigning."""
        return self._lease

    @property
    def leadership(self) -> LockHolder | None:
        """This candidate as leader (token, value), None unless it won a campaign."""
        return self._leadership

    @property
    def fencing(self) -> Fencing:
        """The leader's token as ``fencing=`` takes it."""
        if self._leadership is None:
            raise NotLockHolderError(f"not the leader of {self.name}: campaign first")
        return self._leadership.fencing

    @property
    def lost(self) -> threading.Event:
        """Set when the candidate's lease is lost (a fresh unset event before a campaign)."""
        return self._idle if self._lease is None else self._lease.lost

    def campaign(self, value: str, timeout: float | None = None) -> LockHolder:
        """Wait until this candidate leads with ``value`` (no end by default; after
        ``timeout`` seconds LockHeldError, and the candidacy is withdrawn)."""
        if self._lease is not None and self._lease.reason is not None:
            self.resign()
        lease = self._lease or self._client.lease(self.ttl)
        self._lease = lease
        try:
            holder = self._client.campaign(
                self.name, lease, value, timeout, wait_chunk=self._wait_chunk
            )
        except BaseException:
            self._lease = None
            lease.release()
            raise
        self._leadership = holder
        return holder

    def proclaim(self, value: str) -> LockHolder:
        """Announce a new value as the leader; NotLockHolderError unless leading."""
        leader, lease = self._leadership, self._lease
        if leader is None or lease is None:
            raise NotLockHolderError(f"not the leader of {self.name}: campaign first")
        if lease.reason is not None:
            raise lock_lost(leader, lease.reason, "leadership of")
        self._leadership = self._client.proclaim(self.name, lease, leader.token, value)
        return self._leadership

    def resign(self) -> None:
        """Stop being a candidate (or the leader): the lease is revoked. Raises
        LockLost when the leadership had been lost before."""
        lease, leader = self._lease, self._leadership
        self._lease = self._leadership = None
        if lease is None:
            return
        lease.release()
        if lease.reason is not None and leader is not None:
            raise lock_lost(leader, lease.reason, "leadership of")

    def leader(self) -> LockHolder | None:
        """Who leads now (None: nobody)."""
        return self._client.leader(self.name)

    def observe(self) -> Iterator[LockHolder | None]:
        """The leader now, then each new leader or value, until the caller stops."""
        return self._client.observe(self.name)

    def __enter__(self) -> Election:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.resign()
        except LockLost:
            if report_lost(exc):
                raise
