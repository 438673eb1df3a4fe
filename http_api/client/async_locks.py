"""The asyncio twins of :mod:`http_api.client.locks` and
:mod:`http_api.client.elections`: a lease kept alive by a task, a lock held
for an ``async with`` block, an election. The same rules: a lost lease
sets ``lost`` (an :class:`asyncio.Event`) and leaving the block raises
:class:`LeaseLost` / :class:`LockLost`.

``client.lease(ttl)`` is both awaitable (``lease = await client.lease(30)``)
and an async context manager (``async with client.lease(30) as lease:``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from types import TracebackType
from typing import Protocol

from http_api.client.errors import (
    LeaseLost,
    LeaseNotFoundError,
    LockLost,
    NotLockHolderError,
    RkvClientError,
)
from http_api.client.lease_keeper import AsyncLeaseKeeper
from http_api.client.lease_model import Fencing, LockHolder, check_lock_name, check_ttl
from http_api.client.lease_plans import DEFAULT_WAIT_CHUNK
from http_api.client.locks import lock_lost, may_exist, report_lost

logger = logging.getLogger(__name__)


class AsyncKeptLease:
    """A lease renewed by a task every third of its TTL until :meth:`revoke`."""

    def __init__(
        self, lease_id: int, keeper: AsyncLeaseKeeper, revoke: Callable[[int], Awaitable[int]]
    ) -> None:
        self.id = lease_id
        self._keeper = keeper
        self._revoke = revoke
        self._ended = False

    @property
    def ttl(self) -> int:
        return self._keeper.schedule.ttl

    @property
    def lost(self) -> asyncio.Event:
        return self._keeper.lost

    @property
    def reason(self) -> LeaseLost | None:
        return self._keeper.reason

    @property
    def ended(self) -> bool:
        return self._ended

    async def stop(self) -> None:
        """Stop the keepalives and leave the lease alone: it expires after its TTL."""
        await self._keeper.stop()
        self._ended = True

    async def revoke(self) -> int:
        """Stop the keepalives and revoke the lease now; how many keys were deleted."""
        await self._keeper.stop()
        self._ended = True
        return await self._revoke(self.id)

    async def release(self) -> None:
        """Stop the keepalives and revoke the lease if it may still exist (a failure is
        logged: the lease then ends by itself within its TTL)."""
        await self._keeper.stop()
        if self._ended or not may_exist(self.reason):
            self._ended = True
            return
        self._ended = True
        try:
            await self._revoke(self.id)
        except LeaseNotFoundError:
            pass
        except RkvClientError as error:
            logger.warning(
                "lease %d could not be revoked (%s); it ends within its TTL of %ds",
                self.id,
                error,
                self.ttl,
            )

    async def __aenter__(self) -> AsyncKeptLease:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release()
        reason = self.reason
        if reason is not None and report_lost(exc):
            raise reason

    def __repr__(self) -> str:
        state = "lost" if self.reason else "ended" if self._ended else "kept"
        return f"<AsyncKeptLease id={self.id} ttl={self.ttl} {state}>"


class AsyncLeaseStart:
    """What ``client.lease(ttl)`` returns: await it, or use it with ``async with``."""

    def __init__(self, start: Callable[[], Awaitable[AsyncKeptLease]]) -> None:
        self._start = start
        self._kept: AsyncKeptLease | None = None

    def __await__(self) -> Generator[object, None, AsyncKeptLease]:
        return self._start().__await__()

    async def __aenter__(self) -> AsyncKeptLease:
        self._kept = await self._start()
        return self._kept

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._kept is not None:
            await self._kept.__aexit__(exc_type, exc, tb)


class AsyncHeldLock:
    """A lock held under a kept lease (``async with client.lock(name) as held``)."""

    def __init__(self, holder: LockHolder, lease: AsyncKeptLease) -> None:
        self.holder = holder
        self.lease = lease

    @property
    def name(self) -> str:
        return self.holder.name

    @property
    def token(self) -> int:
        return self.holder.token

    @property
    def key(self) -> str:
        return self.holder.key

    @property
    def lease_id(self) -> int:
        return self.lease.id

    @property
    def fencing(self) -> Fencing:
        return self.holder.fencing

    @property
    def lost(self) -> asyncio.Event:
        return self.lease.lost

    def __repr__(self) -> str:
        return f"<AsyncHeldLock {self.name} token={self.token} lease={self.lease_id}>"


class _AsyncLeaseClient(Protocol):
    def lease(self, ttl: int) -> AsyncLeaseStart: ...

    async def lock_acquire(
        self,
        name: str,
        lease: int | AsyncKeptLease,
        timeout: float | None = None,
        *,
        wait_chunk: float = DEFAULT_WAIT_CHUNK,
    ) -> LockHolder: ...

    async def unlock(self, name: str, lease: int | AsyncKeptLease) -> None: ...

    async def campaign(
        self,
        name: str,
        lease: int | AsyncKeptLease,
        value: str,
        timeout: float | None = None,
        *,
        wait_chunk: float = DEFAULT_WAIT_CHUNK,
    ) -> LockHolder: ...

    async def proclaim(
        self, name: str, lease: int | AsyncKeptLease, token: int, value: str
    ) -> LockHolder: ...

    async def leader(self, name: str) -> LockHolder | None: ...

    def observe(self, name: str) -> AsyncIterator[LockHolder | None]: ...


class AsyncLockContext:
    """``async with client.lock(name, ttl=10, timeout=None) as held`` (see
    :class:`http_api.client.locks.LockContext`)."""

    def __init__(
        self,
        client: _AsyncLeaseClient,
        name: str,
        *,
        ttl: int,
        timeout: float | None,
        lease: AsyncKeptLease | None,
        wait_chunk: float,
    ) -> None:
        self._client = client
        self._name = name
        self._ttl = ttl
        self._timeout = timeout
        self._given = lease
        self._wait_chunk = wait_chunk
        self._held: AsyncHeldLock | None = None

    async def __aenter__(self) -> AsyncHeldLock:
        lease = self._given or await self._client.lease(self._ttl)
        try:
            holder = await self._client.lock_acquire(
                self._name, lease, self._timeout, wait_chunk=self._wait_chunk
            )
        except BaseException:
            if self._given is None:
                await lease.release()
            raise
        self._held = AsyncHeldLock(holder, lease)
        return self._held

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        held, self._held = self._held, None
        if held is None:
            return
        if self._given is None:
            await held.lease.release()
        elif held.lease.reason is None:
            try:
                await self._client.unlock(held.name, held.lease)
            except RkvClientError as error:
                logger.warning("lock %s could not be released: %s", held.name, error)
        reason = held.lease.reason
        if reason is not None and report_lost(exc):
            raise lock_lost(held.holder, reason)


class AsyncElection:
    """The asyncio twin of :class:`http_api.client.elections.Election`."""

    def __init__(
        self,
        client: _AsyncLeaseClient,
        name: str,
        ttl: int,
        wait_chunk: float = DEFAULT_WAIT_CHUNK,
    ) -> None:
        self.name = check_lock_name(name)
        self.ttl = check_ttl(ttl)
        self._client = client
        self._wait_chunk = wait_chunk
        self._lease: AsyncKeptLease | None = None
        self._leadership: LockHolder | None = None
        self._idle = asyncio.Event()

    @property
    def lease(self) -> AsyncKeptLease | None:
        return self._lease

    @property
    def leadership(self) -> LockHolder | None:
        return self._leadership

    @property
    def fencing(self) -> Fencing:
        if self._leadership is None:
            raise NotLockHolderError(f"not the leader of {self.name}: campaign first")
        return self._leadership.fencing

    @property
    def lost(self) -> asyncio.Event:
        return self._idle if self._lease is None else self._lease.lost

    async def campaign(self, value: str, timeout: float | None = None) -> LockHolder:
        if self._lease is not None and self._lease.reason is not None:
            await self.resign()
        lease = self._lease or await self._client.lease(self.ttl)
        self._lease = lease
        try:
            holder = await self._client.campaign(
                self.name, lease, value, timeout, wait_chunk=self._wait_chunk
            )
        except BaseException:
            self._lease = None
            await lease.release()
            raise
        self._leadership = holder
        return holder

    async def proclaim(self, value: str) -> LockHolder:
        leader, lease = self._leadership, self._lease
        if leader is None or lease is None:
            raise NotLockHolderError(f"not the leader of {self.name}: campaign first")
        if lease.reason is not None:
            raise lock_lost(leader, lease.reason, "leadership of")
        self._leadership = await self._client.proclaim(self.name, lease, leader.token, value)
        return self._leadership

    async def resign(self) -> None:
        lease, leader = self._lease, self._leadership
        self._lease = self._leadership = None
        if lease is None:
            return
        await lease.release()
        if lease.reason is not None and leader is not None:
            raise lock_lost(leader, lease.reason, "leadership of")

    async def leader(self) -> LockHolder | None:
        return await self._client.leader(self.name)

    def observe(self) -> AsyncIterator[LockHolder | None]:
        return self._client.observe(self.name)

    async def __aenter__(self) -> AsyncElection:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.resign()
        except LockLost:
            if report_lost(exc):
                raise
