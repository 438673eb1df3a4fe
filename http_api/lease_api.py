"""The HTTP layer's view of leases, locks and elections (node.service.leases provides it)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from node.service.lease_types import Caller, LeaseInfo, LockHolder, LockInfo, Renewal


class LeaseApi(Protocol):
    @property
    def max_lease_ttl(self) -> int:
        """The longest TTL a lease may have, in seconds (--max-lease-ttl)."""
        ...

    @property
    def max_lock_wait(self) -> float:
        """The longest a lock or campaign request may wait, in seconds (--max-lock-wait)."""
        ...

    async def grant(self, ttl: int, caller: Caller) -> tuple[int, int]:
        """A new lease owned by ``caller``: (id, granted ttl in seconds). Raises
        InvalidRequest ``invalid_ttl``, LimitReached ``too_many_leases``."""
        ...

    async def keepalive(self, lease_ids: Sequence[int], caller: Caller) -> list[Renewal]:
        """Renew each lease (one raft entry for all of them); one outcome per id, in
        order. Raises only for the request as a whole (InvalidRequest: too many ids)."""
        ...

    async def revoke(self, lease_id: int, caller: Caller) -> int:
        """End the lease now: its keys deleted, its locks released; how many keys.
        Raises KeyNotFound ``lease_not_found``/``lease_expired``, Forbidden
        ``lease_not_owned``."""
        ...

    def lease(self, lease_id: int, caller: Caller) -> LeaseInfo:
        """One lease with its keys and locks, from this node's state (KeyNotFound,
        Forbidden as for revoke). Blocking LMDB reads: short."""
        ...

    def leases(
        self, after: int | None, limit: int, caller: Caller
    ) -> tuple[list[LeaseInfo], int | None]:
        """The leases after id ``after`` in id order that ``caller`` may see (its own;
        every one for an admin), at most ``limit``; and where the next page starts."""
        ...

    def check_use(self, lease_id: int, caller: Caller) -> None:
        """Before attaching a key or a lock to a lease: raises KeyNotFound
        ``lease_not_found`` or Forbidden ``lease_not_owned``."""
        ...

    async def lock(
        self, name: str, lease_id: int, timeout: float, caller: Caller, value: bytes = b""
    ) -> LockHolder:
        """Queue for lock ``name`` with the lease and wait until it holds it (up to
        ``timeout`` seconds; 0 tries once). Raises Conflict ``lock_held`` on timeout
        (leaving the queue), LimitReached ``too_many_lock_waiters``, KeyNotFound
        ``lease_not_found``, InvalidRequest for a bad name, value or timeout."""
        ...

    async def unlock(self, name: str, lease_id: int, caller: Caller) -> None:
        """Release the lock (or leave its queue). Raises Conflict ``not_lock_holder``."""
        ...

    async def proclaim(
        self, name: str, lease_id: int, token: int, value: bytes, caller: Caller
    ) -> LockHolder:
        """A leader's new value. Raises Conflict ``not_lock_holder`` unless the lease
        holds the lock with ``token``."""
        ...

    async def lock_info(self, name: str) -> LockInfo:
        """The lock as the cluster has it now (a linearizable read)."""
        ...

    def observe(self, name: str) -> AsyncIterator[LockHolder | None]:
        """The holder now, then each change of holder or value, until the caller stops."""
        ...
