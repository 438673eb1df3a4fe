"""Keeping a lease alive: a background thread (:class:`LeaseKeeper`) for the
blocking client, a task (:class:`AsyncLeaseKeeper`) for the asyncio one, and
the rules both follow (:class:`KeepaliveSchedule`, no I/O).

The rules (docs/LEASES.md, "Client and CLI"):

- a keepalive is sent a third of the TTL after the last one that was
  acknowledged (counted from when that one was *sent*, which is before the
  server renewed the lease: so the client never believes in a lease longer
  than the server keeps it);
- a keepalive that fails (no node answered, a timeout, a 503) is tried again
  after a short pause (a tenth of the TTL, at most one second), each attempt
  bounded by the time left;
- the lease is **lost** when a keepalive answers that it has ended
  (``lease_expired``, ``lease_not_found``) or is not this user's
  (``lease_not_owned``), or when no keepalive was acknowledged for a whole TTL
  (``keepalive_failed``: the cluster may have expired it). Then ``lost`` is
  set, ``reason`` holds a :class:`LeaseLost`, and nothing more is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable

from http_api.client.errors import (
    AuthenticationError,
    InvalidRequestError,
    LeaseLost,
    LeaseNotFoundError,
    PermissionDeniedError,
    RkvClientError,
)
from http_api.client.lease_model import Lease

logger = logging.getLogger(__name__)

RETRY_PAUSE = 1.0
"""The longest pause between two attempts of a failed keepalive (a tenth of the TTL
when that is shorter)."""
MIN_REQUEST_TIMEOUT = 0.5


class KeepaliveSchedule:
    """When the next keepalive is due and when the lease counts as lost (no I/O).
    Times are ``time.monotonic()`` seconds."""

    def __init__(self, lease_id: int, ttl: int, sent_at: float) -> None:
        self.lease_id = lease_id
        self.ttl = ttl
        self.valid_until = sent_at + ttl
        """Until then the lease is certainly alive on the cluster."""
        self.due = sent_at + ttl / 3

    def renewed(self, ttl: int, sent_at: float) -> None:
        """A keepalive sent at ``sent_at`` was acknowledged with ``ttl``."""
        self.ttl = ttl
        self.valid_until = max(self.valid_until, sent_at + ttl)
        self.due = sent_at + ttl / 3

    def failed(self, now: float) -> None:
        """A keepalive got no acknowledgement: try again shortly (and wake up when the
        lease may have expired, to say so)."""
        self.due = min(now + min(RETRY_PAUSE, self.ttl / 10), self.valid_until)

    def expired(self, now: float) -> bool:
        return now >= self.valid_until

    def request_timeout(self, now: float, default: float) -> float:
        """An attempt's timeout: no longer than the time left for the lease."""
        return min(default, max(MIN_REQUEST_TIMEOUT, self.valid_until - now))

    def outcome(self, error: RkvClientError) -> LeaseLost | None:
        """What a refused keepalive means: a :class:`LeaseLost` when the lease is gone
        (or not ours), None when it is worth trying again."""
        if isinstance(error, LeaseNotFoundError):
            return LeaseLost(
                f"lease {self.lease_id} ended ({error.code}): it expired or was revoked",
                lease_id=self.lease_id,
                code=error.code,
                status=error.status,
                url=error.url,
            )
        if isinstance(error, PermissionDeniedError | AuthenticationError | InvalidRequestError):
            return LeaseLost(
                f"lease {self.lease_id} cannot be kept alive: {error.message} [{error.code}]",
                lease_id=self.lease_id,
                code=error.code,
                status=error.status,
                url=error.url,
            )
        return None

    def timed_out(self, last: RkvClientError | None) -> LeaseLost:
        detail = f" (last: {last.message})" if last is not None else ""
        return LeaseLost(
            f"lease {self.lease_id}: no keepalive acknowledged for its TTL of {self.ttl}s"
            f"{detail}; the cluster may have expired it",
            lease_id=self.lease_id,
            code="keepalive_failed",
        )


class LeaseKeeper:
    """A daemon thread renewing one lease by :class:`KeepaliveSchedule`'s rules.

    ``renew(lease_id, timeout)`` sends one keepalive (from this thread: it must
    not share a connection with the caller's thread) and returns the renewed
    lease, or raises :class:`RkvClientError`."""

    def __init__(
        self,
        schedule: KeepaliveSchedule,
        renew: Callable[[int, float], Lease],
        request_timeout: float,
        close: Callable[[], None] = lambda: None,
    ) -> None:
        self.schedule = schedule
        self.lost = threading.Event()
        self.reason: LeaseLost | None = None
        self._renew = renew
        self._timeout = request_timeout
        self._close = close
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"rkv-lease-{schedule.lease_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing. An attempt under way is left to end on the thread (it does
        not hold up a revocation); what it finds is ignored."""
        self._stop.set()

    def _loop(self) -> None:
        schedule = self.schedule
        last: RkvClientError | None = None
        try:
            while not self._stop.wait(max(0.0, schedule.due - time.monotonic())):
                now = time.monotonic()
                if schedule.expired(now):
                    self._lose(schedule.timed_out(last))
                    return
                try:
                    lease = self._renew(
                        schedule.lease_id, schedule.request_timeout(now, self._timeout)
                    )
                except RkvClientError as error:
                    if (gone := schedule.outcome(error)) is not None:
                        self._lose(gone)
                        return
                    last = error
                    schedule.failed(time.monotonic())
                    continue
                if self._stop.is_set():
                    return
                schedule.renewed(lease.ttl, now)
                last = None
        except Exception as error:  # a bug must not end the keepalives in silence
            logger.exception("lease %d: the keepalive thread failed", schedule.lease_id)
            self._lose(
                LeaseLost(
                    f"lease {schedule.lease_id}: the keepalive thread failed: {error!r}",
                    lease_id=schedule.lease_id,
                    code="keepalive_failed",
                )
            )
        finally:
            self._close()

    def _lose(self, reason: LeaseLost) -> None:
        if self._stop.is_set():
            return  # stopped meanwhile (revoked, say): not a loss
        logger.warning("%s", reason)
        self.reason = reason
        self.lost.set()


class AsyncLeaseKeeper:
    """The asyncio twin of :class:`LeaseKeeper`: a task on the running loop."""

    def __init__(
        self,
        schedule: KeepaliveSchedule,
        renew: Callable[[int, float], Awaitable[Lease]],
        request_timeout: float,
    ) -> None:
        self.schedule = schedule
        self.lost = asyncio.Event()
        self.reason: LeaseLost | None = None
        self._renew = renew
        self._timeout = request_timeout
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._loop(), name=f"rkv-lease-{self.schedule.lease_id}"
        )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        schedule = self.schedule
        last: RkvClientError | None = None
        try:
            while True:
                await asyncio.sleep(max(0.0, schedule.due - time.monotonic()))
                now = time.monotonic()
                if schedule.expired(now):
                    self._lose(schedule.timed_out(last))
                    return
                try:
                    timeout = schedule.request_timeout(now, self._timeout)
                    lease = await asyncio.wait_for(
                        self._renew(schedule.lease_id, timeout), timeout + self._timeout
                    )
                except RkvClientError as error:
                    if (gone := schedule.outcome(error)) is not None:
                        self._lose(gone)
                        return
                    last = error
                    schedule.failed(time.monotonic())
                    continue
                except TimeoutError:
                    schedule.failed(time.monotonic())
                    continue
                schedule.renewed(lease.ttl, now)
                last = None
        except asyncio.CancelledError:
            raise
        except Exception as error:
            logger.exception("lease %d: the keepalive task failed", schedule.lease_id)
            self._lose(
                LeaseLost(
                    f"lease {schedule.lease_id}: the keepalive task failed: {error!r}",
                    lease_id=schedule.lease_id,
                    code="keepalive_failed",
                )
            )

    def _lose(self, reason: LeaseLost) -> None:
        logger.warning("%s", reason)
        self.reason = reason
        self.lost.set()
