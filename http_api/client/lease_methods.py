"""The lease, lock and election methods of :class:`http_api.client.RkvClient`
(and, as coroutines, of :class:`http_api.client.AsyncRkvClient`: the asyncio
mixin is :mod:`http_api.client.async_lease_methods`).

``adopt_lease(id)`` keeps alive a lease granted elsewhere. Low-level calls, one
request each (the lock waits excepted): ``grant_lease``,
``keepalive``, ``keepalive_many``, ``revoke``, ``lease_info``, ``leases``;
``lock_acquire``, ``unlock``, ``lock_info``; ``campaign``, ``proclaim``,
``resign``, ``leader``, ``observe``. A lease is given as its id or as any
object with an ``id`` (a :class:`Lease`, a :class:`KeptLease`).

What most programs want instead:

- ``client.lease(ttl)``: a :class:`KeptLease`, kept alive by a background
  thread until revoked (``with client.lease(30) as lease: ...``);
- ``with client.lock(name, ttl=10) as held:``: a :class:`HeldLock`; write
  with ``fencing=held``;
- ``client.election(name, ttl=10)``: an :class:`Election`.

The rules of keeping a lease alive and of reporting its loss:
:mod:`http_api.client.lease_keeper` and :mod:`http_api.client.locks`.
Refusals: LeaseNotFoundError (404 ``lease_not_found``/``lease_expired``),
PermissionDeniedError (``lease_not_owned``, or no permission on the lock),
LockHeldError (the wait ended), NotLockHolderError, NoElectionLeaderError
(``leader`` answers None instead), TooManyRequestsError (``too_many_leases``,
``too_many_lease_attachments``, ``too_many_lock_waiters``), InvalidRequestError
(``invalid_ttl``, ``invalid_lock_name``, a wait above the server's limit).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import TypeVar

from http_api.client.elections import Election
from http_api.client.errors import LeaseLost
from http_api.client.lease_keeper import KeepaliveSchedule, LeaseKeeper
from http_api.client.lease_model import (
    HasLeaseId,
    Lease,
    LeaseInfo,
    LockHolder,
    LockInfo,
    Renewal,
    check_lock_name,
    check_ttl,
    lease_arg,
)
from http_api.client.lease_plans import DEFAULT_WAIT_CHUNK, _LeasePlans
from http_api.client.locks import KeptLease, LockContext
from http_api.client.observing import Observer, Skip, StreamEnded
from http_api.client.operations import _Core
from http_api.client.wire import _Failure, _Plan, _Reply, _Send

T = TypeVar("T")

LeaseRef = int | HasLeaseId
DEFAULT_LOCK_TTL = 10
LEASE_PAGE = 1000


def lost_reason(lease: LeaseRef) -> Callable[[], LeaseLost | None]:
    """Why a lease given to a lock or campaign wait is lost (None: it is not, or
    nothing tracks it)."""
    if isinstance(lease, KeptLease):
        return lambda: lease.reason
    return lambda: None


class _SyncLeaseMethods:
    """Mixed into RkvClient, which provides ``_core``, ``_run``, ``_stream`` and
    ``_keepalive_sender``."""

    _core: _Core

    def _run(self, plan: _Plan[T]) -> T:
        raise NotImplementedError

    def _stream(self, action: _Send) -> tuple[_Reply | _Failure, Generator[bytes, None, None]]:
        raise NotImplementedError

    def _keepalive_sender(self) -> tuple[Callable[[int, float], Lease], Callable[[], None]]:
        """A way to send keepalives from another thread (its own connections), and to
        close it."""
        raise NotImplementedError

    @property
    def _leases(self) -> _LeasePlans:
        return _LeasePlans(self._core)

    # -- leases ---------------------------------------------------------------------------

    def grant_lease(self, ttl: int) -> Lease:
        """A new lease of ``ttl`` seconds (nothing keeps it alive: see :meth:`lease`)."""
        return self._run(self._leases.grant(ttl))

    def keepalive(self, lease: LeaseRef) -> Lease:
        """Renew the lease once; returns its TTL. LeaseNotFoundError when it has ended."""
        return self._run(self._leases.keepalive(lease_arg(lease)))

    def keepalive_many(self, leases: Iterable[LeaseRef]) -> list[Renewal]:
        """Renew several leases in one request (at most 10,000); one outcome each."""
        return self._run(self._leases.keepalive_many([lease_arg(lease) for lease in leases]))

    def revoke(self, lease: LeaseRef) -> int:
        """End the lease now: its keys deleted, its locks released; how many keys."""
        return self._run(self._leases.revoke(lease_arg(lease)))

    def lease_info(self, lease: LeaseRef) -> LeaseInfo:
        """The lease's TTL, time left, owner, keys (at most 1000) and locks."""
        return self._run(self._leases.lease(lease_arg(lease)))

    def leases(self, *, page_size: int = LEASE_PAGE) -> Iterator[LeaseInfo]:
        """Every lease the caller may see (its own; all for an admin), in id order."""
        after: int | None = None
        while True:
            page, after = self._run(self._leases.leases_page(after, page_size))
            yield from page
            if after is None:
                return

    def lease(self, ttl: int) -> KeptLease:
        """Grant a lease of ``ttl`` seconds and keep it alive on a background thread
        until it is revoked (or its ``with`` block ends)."""
        sent_at = time.monotonic()
        return self._keep(self.grant_lease(ttl), sent_at)

    def adopt_lease(self, lease: LeaseRef) -> KeptLease:
        """Keep alive a lease granted before (by this process or another): renews it
        once now (LeaseNotFoundError when it has ended), then on a background thread
        as :meth:`lease` does."""
        sent_at = time.monotonic()
        return self._keep(self.keepalive(lease), sent_at)

    def _keep(self, granted: Lease, sent_at: float) -> KeptLease:
        renew, close = self._keepalive_sender()
        keeper = LeaseKeeper(
            KeepaliveSchedule(granted.id, granted.ttl, sent_at), renew, self._core.timeout, close
        )
        keeper.start()
        return KeptLease(granted.id, keeper, self.revoke)

    # -- locks ----------------------------------------------------------------------------

    def lock_acquire(
        self,
        name: str,
        lease: LeaseRef,
        timeout: float | None = None,
        *,
        wait_chunk: float = DEFAULT_WAIT_CHUNK,
    ) -> LockHolder:
        """Queue for lock ``name`` with the lease and wait until it holds it: no end by
        default, LockHeldError after ``timeout`` seconds (0: try once). With a kept
        lease that is lost meanwhile, its LeaseLost is raised."""
        fields = {"lease": lease_arg(lease)}
        return self._run(
            self._leases.wait_until(
                "locks", name, fields, timeout=timeout, chunk=wait_chunk, gone=lost_reason(lease)
            )
        )

    def unlock(self, name: str, lease: LeaseRef) -> None:
        """Release the lock held with the lease (or leave its queue)."""
        self._run(self._leases.unlock("locks", name, lease_arg(lease)))

    def lock_info(self, name: str) -> LockInfo:
        """The lock's holder (None: free) and how many wait for it."""
        return self._run(self._leases.lock_info(name))

    def lock(
        self,
        name: str,
        *,
        ttl: int = DEFAULT_LOCK_TTL,
        timeout: float | None = None,
        lease: KeptLease | None = None,
        wait_chunk: float = DEFAULT_WAIT_CHUNK,
    ) -> LockContext:
        """``with client.lock(name) as held:`` hold lock ``name`` for the block, under a
        lease of ``ttl`` seconds kept alive meanwhile (or under ``lease``). Waits with
        no end by default; LockHeldError after ``timeout`` seconds. Leaving the block
        releases the lock, and raises LockLost if the lease was lost meanwhile."""
        check_lock_name(name)
        check_ttl(ttl)
        return LockContext(self, name, ttl=ttl, timeout=timeout, lease=lease, wait_chunk=wait_chunk)

    # -- elections ------------------------------------------------------------------------

    def campaign(
        self,
        name: str,
        lease: LeaseRef,
        value: str,
        timeout: float | None = None,
        *,
        wait_chunk: float = DEFAULT_WAIT_CHUNK,
    ) -> LockHolder:
        """Stand in election ``name`` with the lease and wait until leading with
        ``value`` (the waits as for :meth:`lock_acquire`)."""
        fields = {"lease": lease_arg(lease), "value": value}
        if not isinstance(value, str):
            raise TypeError("an election value is a str")
        return self._run(
            self._leases.wait_until(
                "elections",
                name,
                fields,
                timeout=timeout,
                chunk=wait_chunk,
                gone=lost_reason(lease),
            )
        )

    def proclaim(self, name: str, lease: LeaseRef, token: int, value: str) -> LockHolder:
        """The leader (the lease, with its ``token``) announces a new value."""
        return self._run(self._leases.proclaim(name, lease_arg(lease), token, value))

    def resign(self, name: str, lease: LeaseRef) -> None:
        """Stop leading (or leave the queue of candidates)."""
        self._run(self._leases.unlock("elections", name, lease_arg(lease)))

    def leader(self, name: str) -> LockHolder | None:
        """Who leads election ``name`` now (None: nobody)."""
        return self._run(self._leases.leader(name))

    def observe(self, name: str) -> Iterator[LockHolder | None]:
        """The leader now (None: nobody), then each new leader or value, for as long as
        the caller iterates (rules: :mod:`http_api.client.observing`)."""
        observer = Observer(self._core, check_lock_name(name))
        while True:
            base = self._run(observer.pick())
            if base is None:
                time.sleep(observer.broken(None, None))
                continue
            problem: _Reply | _Failure | BaseException | None = None
            opened, lines = self._stream(observer.request(base))
            try:
                if isinstance(opened, _Reply) and opened.status == 200:
                    observer.connected(base)
                    for raw in lines:
                        event = observer.line(raw)
                        if not isinstance(event, Skip):
                            yield event
                else:
                    problem = opened
            except (OSError, StreamEnded) as broken:
                problem = broken
            finally:
                lines.close()
            time.sleep(observer.broken(base, problem))

    def election(self, name: str, *, ttl: int = DEFAULT_LOCK_TTL) -> Election:
        """A candidate in election ``name`` whose lease has ``ttl`` seconds."""
        return Election(self, name, ttl)
