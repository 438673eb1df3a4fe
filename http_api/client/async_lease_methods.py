"""The lease, lock and election methods of :class:`http_api.client.AsyncRkvClient`:
those of :mod:`http_api.client.lease_methods`, as coroutines (``observe`` is an
async iterator). ``client.lease(ttl)`` is awaited or used with ``async with``;
``async with client.lock(name) as held:``; ``client.election(name)`` gives an
:class:`AsyncElection`. A lease is kept alive by a task on the client's loop,
over the client's own session.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from typing import TypeVar

from http_api.client.async_locks import (
    AsyncElection,
    AsyncKeptLease,
    AsyncLeaseStart,
    AsyncLockContext,
)
from http_api.client.errors import LeaseLost
from http_api.client.lease_keeper import AsyncLeaseKeeper, KeepaliveSchedule
from http_api.client.lease_methods import DEFAULT_LOCK_TTL, LEASE_PAGE, LeaseRef
from http_api.client.lease_model import (
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
from http_api.client.observing import Observer, Skip, StreamEnded
from http_api.client.operations import _Core
from http_api.client.wire import _Failure, _Plan, _Reply, _Send

T = TypeVar("T")

AsyncLeaseRef = LeaseRef | AsyncKeptLease


def _lost_reason(lease: AsyncLeaseRef) -> LeaseLost | None:
    return lease.reason if isinstance(lease, AsyncKeptLease) else None


class _AsyncLeaseMethods:
    """Mixed into AsyncRkvClient, which provides ``_core``, ``_run`` and ``_stream``."""

    _core: _Core

    async def _run(self, plan: _Plan[T]) -> T:
        raise NotImplementedError

    async def _stream(self, action: _Send) -> tuple[_Reply | _Failure, AsyncGenerator[bytes, None]]:
        raise NotImplementedError

    @property
    def _leases(self) -> _LeasePlans:
        return _LeasePlans(self._core)

    async def grant_lease(self, ttl: int) -> Lease:
        return await self._run(self._leases.grant(ttl))

    async def keepalive(self, lease: AsyncLeaseRef) -> Lease:
        return await self._run(self._leases.keepalive(lease_arg(lease)))

    async def keepalive_many(self, leases: Iterable[AsyncLeaseRef]) -> list[Renewal]:
        ids = [lease_arg(lease) for lease in leases]
        return await self._run(self._leases.keepalive_many(ids))

    async def revoke(self, lease: AsyncLeaseRef) -> int:
        return await self._run(self._leases.revoke(lease_arg(lease)))

    async def lease_info(self, lease: AsyncLeaseRef) -> LeaseInfo:
        return await self._run(self._leases.lease(lease_arg(lease)))

    async def leases(self, *, page_size: int = LEASE_PAGE) -> AsyncIterator[LeaseInfo]:
        after: int | None = None
        while True:
            page, after = await self._run(self._leases.leases_page(after, page_size))
            for info in page:
                yield info
            if after is None:
                return

    def lease(self, ttl: int) -> AsyncLeaseStart:
        """``await client.lease(ttl)`` or ``async with client.lease(ttl) as lease``: a
        lease kept alive by a task until revoked."""
        check_ttl(ttl)

        async def start() -> AsyncKeptLease:
            sent_at = time.monotonic()
            return self._keep(await self.grant_lease(ttl), sent_at)

        return AsyncLeaseStart(start)

    async def adopt_lease(self, lease: AsyncLeaseRef) -> AsyncKeptLease:
        """Keep alive a lease granted before: renews it once now, then in a task."""
        sent_at = time.monotonic()
        return self._keep(await self.keepalive(lease), sent_at)

    def _keep(self, granted: Lease, sent_at: float) -> AsyncKeptLease:
        plans = self._leases

        async def renew(lease_id: int, timeout: float) -> Lease:
            return await self._run(plans.keepalive(lease_id, timeout))

        keeper = AsyncLeaseKeeper(
            KeepaliveSchedule(granted.id, granted.ttl, sent_at), renew, self._core.timeout
        )
        keeper.start()
        return AsyncKeptLease(granted.id, keeper, self.revoke)

    async def lock_acquire(
        self,
        name: str,
        lease: AsyncLeaseRef,
        timeout: float | None = None,
        *,
        wait_chunk: float = DEFAULT_WAIT_CHUNK,
    ) -> LockHolder:
        fields = {"lease": lease_arg(lease)}
        return await self._run(
            self._leases.wait_until(
                "locks",
                name,
                fields,
                timeout=timeout,
                chunk=wait_chunk,
                gone=lambda: _lost_reason(lease),
            )
        )

    async def unlock(self, name: str, lease: AsyncLeaseRef) -> None:
        await self._run(self._leases.unlock("locks", name, lease_arg(lease)))

    async def lock_info(self, name: str) -> LockInfo:
        return await self._run(self._leases.lock_info(name))

    def lock(
        self,
        name: str,
        *,
        ttl: int = DEFAULT_LOCK_TTL,
        timeout: float | None = None,
        lease: AsyncKeptLease | None = None,
        wait_chunk: float = DEFAULT_WAIT_CHUNK,
    ) -> AsyncLockContext:
        check_lock_name(name)
        check_ttl(ttl)
        return AsyncLockContext(
            self, name, ttl=ttl, timeout=timeout, lease=lease, wait_chunk=wait_chunk
        )

    async def campaign(
        self,
        name: str,
        lease: AsyncLeaseRef,
        value: str,
        timeout: float | None = None,
        *,
        wait_chunk: float = DEFAULT_WAIT_CHUNK,
    ) -> LockHolder:
        if not isinstance(value, str):
            raise TypeError("an election value is a str")
        fields = {"lease": lease_arg(lease), "value": value}
        return await self._run(
            self._leases.wait_until(
                "elections",
                name,
                fields,
                timeout=timeout,
                chunk=wait_chunk,
                gone=lambda: _lost_reason(lease),
            )
        )

    async def proclaim(self, name: str, lease: AsyncLeaseRef, token: int, value: str) -> LockHolder:
        return await self._run(self._leases.proclaim(name, lease_arg(lease), token, value))

    async def resign(self, name: str, lease: AsyncLeaseRef) -> None:
        await self._run(self._leases.unlock("elections", name, lease_arg(lease)))

    async def leader(self, name: str) -> LockHolder | None:
        return await self._run(self._leases.leader(name))

    async def observe(self, name: str) -> AsyncIterator[LockHolder | None]:
        observer = Observer(self._core, check_lock_name(name))
        while True:
            base = await self._run(observer.pick())
            if base is None:
                await asyncio.sleep(observer.broken(None, None))
                continue
            problem: _Reply | _Failure | BaseException | None = None
            opened, lines = await self._stream(observer.request(base))
            try:
                if isinstance(opened, _Reply) and opened.status == 200:
                    observer.connected(base)
                    async for raw in lines:
                        event = observer.line(raw)
                        if not isinstance(event, Skip):
                            yield event
                else:
                    problem = opened
            except (OSError, StreamEnded) as broken:
                problem = broken
            finally:
                await lines.aclose()
            await asyncio.sleep(observer.broken(base, problem))

    def election(self, name: str, *, ttl: int = DEFAULT_LOCK_TTL) -> AsyncElection:
        return AsyncElection(self, name, ttl)
