"""Leases kept alive and locks held by the blocking client: what
``client.lease(ttl)`` and ``with client.lock(name) as held`` give.

A :class:`KeptLease` is renewed by a :class:`LeaseKeeper` thread (its own
connection) until it is revoked; leaving its ``with`` block revokes it, and
raises :class:`LeaseLost` when the lease was lost meanwhile (the rules:
:mod:`http_api.client.lease_keeper`). A :class:`HeldLock` is a lock held
under such a lease: leaving its block revokes the lease, which releases the
lock in the same raft entry (with a lease given by the caller, it unlocks
instead and leaves the lease alone), and raises :class:`LockLost` when the
lease was lost meanwhile: the loss is reported, never hidden. It is raised
even when the block raised an exception of its own (that one is its
``__context__``), but not over a KeyboardInterrupt or SystemExit.

A release that fails (no node answers) is logged, not raised: the keepalives
have stopped, so the lease ends by itself within its TTL.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Protocol

from http_api.client.errors import LeaseLost, LeaseNotFoundError, LockLost, RkvClientError
from http_api.client.lease_keeper import LeaseKeeper
from http_api.client.lease_model import Fencing, LockHolder
from http_api.client.lease_plans import DEFAULT_WAIT_CHUNK

logger = logging.getLogger(__name__)


def report_lost(exc: BaseException | None) -> bool:
    """Whether a loss should be raised on leaving a block that ended with ``exc``:
    yes over a normal end or an ordinary exception, not over an interrupt."""
    return exc is None or isinstance(exc, Exception)


def may_exist(reason: LeaseLost | None) -> bool:
    """Whether a lease lost for ``reason`` may still exist on the cluster (worth
    revoking): yes unless the cluster said it has ended or is not ours."""
    return reason is None or reason.code == "keepalive_failed"


def lock_lost(holder: LockHolder, reason: LeaseLost, what: str = "lock") -> LockLost:
    return LockLost(
        f"{what} {holder.name} (token {holder.token}) lost: {reason.message}",
        lease_id=holder.lease_id,
        name=holder.name,
        token=holder.token,
        code=reason.code,
        status=reason.status,
        url=reason.url,
    )


class KeptLease:
    """A lease granted by ``client.lease(ttl)`` and renewed by a background thread
    every third of its TTL until :meth:`revoke` (or the end of its ``with`` block)."""

    def __init__(self, lease_id: int, keeper: LeaseKeeper, revoke: Callable[[int], int]) -> None:
        self.id = lease_id
        self._keeper = keeper
        self._revoke = revoke
        self._ended = False

    @property
    def ttl(self) -> int:
        """The TTL granted (or last renewed), in seconds."""
        return self._keeper.schedule.ttl

    @property
    def lost(self) -> threading.Event:
        """Set when the lease is lost (see :attr:`reason`)."""
        return self._keeper.lost

    @property
    def reason(self) -> LeaseLost | None:
        """Why the lease was lost; None while it is kept (or after it was revoked)."""
        return self._keeper.reason

    @property
    def ended(self) -> bool:
        """Revoked (or released on leaving its block)."""
        return self._ended

    def stop(self) -> None:
        """Stop the keepalives and leave the lease alone: it expires after its TTL."""
        self._keeper.stop()
        self._ended = True

    def revoke(self) -> int:
        """Stop the keepalives and revoke the lease now: its keys are deleted, its locks
        released. Returns how many keys were deleted."""
        self._keeper.stop()
        self._ended = True
        return self._revoke(self.id)

    def release(self) -> None:
        """Stop the keepalives and revoke the lease if it may still exist; a failure is
        logged (the lease then ends by itself within its TTL)."""
        self._keeper.stop()
        if self._ended or not may_exist(self.reason):
            self._ended = True
            return
        self._ended = True
        try:
            self._revoke(self.id)
        except LeaseNotFoundError:
            pass  # it has ended already
        except RkvClientError as error:
            logger.warning(
                "lease %d could not be revoked (%s); it ends within its TTL of %ds",
                self.id,
                error,
                self.ttl,
            )

    def __enter__(self) -> KeptLease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
        reason = self.reason
        if reason is not None and report_lost(exc):
            raise reason

    def __repr__(self) -> str:
        state = "lost" if self.reason else "ended" if self._ended else "kept"
        return f"<KeptLease id={self.id} ttl={self.ttl} {state}>"


class HeldLock:
    """A lock held under a kept lease (``with client.lock(name) as held``)."""

    def __init__(self, holder: LockHolder, lease: KeptLease) -> None:
        self.holder = holder
        self.lease = lease

    @property
    def name(self) -> str:
        return self.holder.name

    @property
    def token(self) -> int:
        """The fencing token: it strictly increases with each new holder of the name."""
        return self.holder.token

    @property
    def key(self) -> str:
        """NAME/LEASE_ID, unique to this holding."""
        return self.holder.key

    @property
    def lease_id(self) -> int:
        return self.lease.id

    @property
    def fencing(self) -> Fencing:
        """What to pass as ``fencing=`` on writes made under the lock."""
        return self.holder.fencing

    @property
    def lost(self) -> threading.Event:
        """Set when the lease behind the lock is lost: someone else may hold it now."""
        return self.lease.lost

    def __repr__(self) -> str:
        return f"<HeldLock {self.name} token={self.token} lease={self.lease_id}>"


class _LockClient(Protocol):
    def lease(self, ttl: int) -> KeptLease: ...

    def lock_acquire(
        self,
        name: str,
        lease: int | KeptLease,
        timeout: float | None = None,
        *,
        wait_chunk: float = DEFAULT_WAIT_CHUNK,
    ) -> LockHolder: ...

    def unlock(self, name: str, lease: int | KeptLease) -> None: ...


class LockContext:
    """``with client.lock(name, ttl=10, timeout=None) as held``: grants a lease (or uses
    the one given), waits for the lock (no end by default; LockHeldError when
    ``timeout`` passes), and on leaving releases it (see the module's docstring)."""

    def __init__(
        self,
        client: _LockClient,
        name: str,
        *,
        ttl: int,
        timeout: float | None,
        lease: KeptLease | None,
        wait_chunk: float,
    ) -> None:
        self._client = client
        self._name = name
        self._ttl = ttl
        self._timeout = timeout
        self._given = lease
        self._wait_chunk = wait_chunk
        self._held: HeldLock | None = None

    def __enter__(self) -> HeldLock:
        lease = self._given or self._client.lease(self._ttl)
        try:
            holder = self._client.lock_acquire(
                self._name, lease, self._timeout, wait_chunk=self._wait_chunk
            )
        except BaseException:
            if self._given is None:
                lease.release()
            raise
        self._held = HeldLock(holder, lease)
        return self._held

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        held, self._held = self._held, None
        if held is None:
            return
        if self._given is None:
            held.lease.release()  # revoking the lease releases the lock with it
        elif held.lease.reason is None:
            try:
                self._client.unlock(held.name, held.lease)
            except RkvClientError as error:
                logger.warning("lock %s could not be released: %s", held.name, error)
        reason = held.lease.reason
        if reason is not None and report_lost(exc):
            raise lock_lost(held.holder, reason)
