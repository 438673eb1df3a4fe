"""Leases, locks and elections: what a client can ask (docs/LEASES.md).

Every change goes through the log (node/state/lease_apply.py decides it); this
service validates requests, checks who owns a lease, waits for locks, and on the
leader proposes the expiry of the leases whose deadline passed on its
:class:`node.service.lease_clock.LeaseClock`.

Ownership is checked against this node's applied state before proposing: a
lease the node does not have yet (just granted through a member that is ahead)
is left to the state machine, which refuses a lease that does not exist.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from node.errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    KeyNotFound,
    LimitReached,
    LockHeld,
    RequestError,
)
from node.service.kv import ConsensusLog
from node.service.kv_writes import result_error
from node.service.lease_clock import LeaseClock
from node.service.lease_types import Caller, LeaseInfo, LockHolder, LockInfo, Renewal
from node.service.lock_waits import LockWaits
from node.state.commands import Command
from node.state.entry_writer import LeaseEvents
from node.state.lease_commands import (
    ExpireLeases,
    LeaseGrant,
    LeaseKeepAlive,
    LeaseRevoke,
    Lock,
    Proclaim,
    Unlock,
)
from node.state.leases import (
    DEFAULT_MAX_LEASE_ATTACHMENTS,
    DEFAULT_MAX_LEASE_TTL,
    DEFAULT_MAX_LEASES,
    DEFAULT_MAX_LOCK_WAITERS,
    EXPIRY_RECORD_BUDGET,
    LEASES_PREFIX,
    MAX_KEEPALIVE_IDS,
    MAX_LOCK_VALUE_BYTES,
    LeaseRecord,
    LockRecord,
    decode_lease,
    decode_lock,
    key_attachments,
    lease_id_of,
    lease_key,
    lock_attachments,
    lock_key,
    lock_name_problem,
)
from node.state.results import CommandResult, ResultCode
from node.storage.lmdb_store import LmdbStore, ReadView

logger = logging.getLogger(__name__)

DEFAULT_MAX_LOCK_WAIT = 300.0
SWEEP_SECONDS = 0.1
"""How often the leader looks for leases past their deadline."""
EXPIRY_SLICE = 1000
"""Leases one expiry entry names at most."""
MAX_LISTED = 1000
INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class LeaseLimits:
    max_leases: int = DEFAULT_MAX_LEASES
    max_lease_ttl: int = DEFAULT_MAX_LEASE_TTL
    max_lease_attachments: int = DEFAULT_MAX_LEASE_ATTACHMENTS
    max_lock_waiters: int = DEFAULT_MAX_LOCK_WAITERS
    max_lock_wait: float = DEFAULT_MAX_LOCK_WAIT


def ttl_problem(ttl: object, max_ttl: int) -> str | None:
    if type(ttl) is not int or not 1 <= ttl <= max_ttl:
        return (
            f"ttl is a whole number of seconds from 1 to {max_ttl} (--max-lease-ttl), "
            f"not {ttl!r:.40}"
        )
    return None


def lease_result_error(result: CommandResult, clock: LeaseClock, lease_id: int = 0) -> RequestError:
    """The error of a lease or lock command's result that is not OK."""
    code = result.code
    if code is ResultCode.LEASE_NOT_FOUND:
        if lease_id and clock.recently_ended(lease_id):
            return KeyNotFound(f"lease {lease_id} expired or was revoked", code="lease_expired")
        return KeyNotFound(result.message, code=code.value)
    if code in (
        ResultCode.TOO_MANY_LEASES,
        ResultCode.TOO_MANY_LEASE_ATTACHMENTS,
        ResultCode.TOO_MANY_LOCK_WAITERS,
    ):
        return LimitReached(result.message, code=code.value)
    if code is ResultCode.NOT_LOCK_HOLDER:
        return Conflict(result.message, code=code.value)
    return result_error(result)


class LeaseService:
    def __init__(
        self,
        consensus: ConsensusLog,
        store: LmdbStore,
        clock: LeaseClock,
        limits: LeaseLimits = LeaseLimits(),
    ) -> None:
        self._consensus = consensus
        self._store = store
        self._clock = clock
        self._limits = limits
        self.waits = LockWaits()

    @property
    def max_lease_ttl(self) -> int:
        return self._limits.max_lease_ttl

    @property
    def max_lock_wait(self) -> float:
        return self._limits.max_lock_wait

    @property
    def limits(self) -> LeaseLimits:
        return self._limits

    def status(self) -> dict[str, Any]:
        """/v1/status ``leases``: how many this node tracks, whether it expires them (it
        leads and has promoted its clock), and the limits."""
        limits = self._limits
        return {
            "count": len(self._clock),
            "expiring": self._clock.promoted and self._consensus.is_leader(),
            "max_leases": limits.max_leases,
            "max_lease_ttl": limits.max_lease_ttl,
            "max_lease_attachments": limits.max_lease_attachments,
            "max_lock_waiters": limits.max_lock_waiters,
            "max_lock_wait": limits.max_lock_wait,
        }

    # -- fed by the state machine ------------------------------------------------------

    def on_applied(self, events: LeaseEvents) -> None:
        """The state machine's lease hook (apply thread)."""
        self._clock.on_applied(events)
        if events.locks:
            self.waits.changed(events.locks)

    def load_clock(self) -> None:
        """(Re)start the clock from the applied state (start-up, a state install)."""
        with self._store.reader() as view:
            self._clock.load(_all_leases(view))

    # -- leases --------------------------------------------------------------------------

    async def _propose(self, command: Command, lease_id: int = 0) -> CommandResult:
        result = await self._consensus.propose(command)
        if result.code is not ResultCode.OK:
            raise lease_result_error(result, self._clock, lease_id)
        return result

    async def grant(self, ttl: int, caller: Caller) -> tuple[int, int]:
        problem = ttl_problem(ttl, self._limits.max_lease_ttl)
        if problem is not None:
            raise InvalidRequest(problem, code="invalid_ttl")
        limits = self._limits
        result = await self._propose(
            LeaseGrant(ttl * 1000, caller.name, limits.max_leases, limits.max_lease_attachments)
        )
        return int(result.value), ttl

    def _record(self, lease_id: int) -> LeaseRecord | None:
        found = self._store.get(lease_key(lease_id))
        return None if found is None else decode_lease(found.value)

    def _owned(self, lease: LeaseRecord | None, caller: Caller) -> bool:
        return caller.admin or lease is None or lease.owner == caller.name

    def check_use(self, lease_id: int, caller: Caller) -> None:
        _check_id(lease_id)
        if not self._owned(None if caller.admin else self._record(lease_id), caller):
            raise Forbidden(f"lease {lease_id} belongs to another user", code="lease_not_owned")

    async def keepalive(self, lease_ids: Sequence[int], caller: Caller) -> list[Renewal]:
        if not 0 < len(lease_ids) <= MAX_KEEPALIVE_IDS:
            raise InvalidRequest(f"a keepalive renews 1 to {MAX_KEEPALIVE_IDS} leases")
        for lease_id in lease_ids:
            _check_id(lease_id)
        refused = set()
        if not caller.admin:
            refused = {i for i in lease_ids if not self._owned(self._record(i), caller)}
        asked = tuple(dict.fromkeys(i for i in lease_ids if i not in refused))
        renewed: dict[int, int] = {}
        if asked:
            result = await self._propose(LeaseKeepAlive(asked))
            renewed = {int(op.key): int(op.value) // 1000 for op in result.op_results if op.found}
        return [self._renewal(i, renewed, refused) for i in lease_ids]

    def _renewal(self, lease_id: int, renewed: dict[int, int], refused: set[int]) -> Renewal:
        if lease_id in refused:
            return Renewal(lease_id, None, "lease_not_owned")
        if lease_id in renewed:
            return Renewal(lease_id, renewed[lease_id])
        ended = self._clock.recently_ended(lease_id)
        return Renewal(lease_id, None, "lease_expired" if ended else "lease_not_found")

    async def revoke(self, lease_id: int, caller: Caller) -> int:
        self.check_use(lease_id, caller)
        result = await self._propose(LeaseRevoke(lease_id), lease_id)
        return int(result.value)

    def lease(self, lease_id: int, caller: Caller) -> LeaseInfo:
        _check_id(lease_id)
        with self._store.reader() as view:
            found = view.get(lease_key(lease_id))
            if found is None:
                raise lease_result_error(
                    CommandResult(ResultCode.LEASE_NOT_FOUND, message=f"no lease {lease_id}"),
                    self._clock,
                    lease_id,
                )
            lease = decode_lease(found.value)
            if not self._owned(lease, caller):
                raise Forbidden(f"lease {lease_id} belongs to another user", code="lease_not_owned")
            keys, truncated = _attached_keys(view, lease_id)
            prefix = lock_attachments(lease_id)
            locks = view.scan(prefix, None, MAX_LISTED, include_internal=True)
        return LeaseInfo(
            lease_id,
            lease.ttl_ms // 1000,
            self._remaining(lease_id, lease),
            lease.owner,
            tuple(keys),
            tuple(key[len(prefix) :].decode() for key, _ in locks),
            truncated,
        )

    def _remaining(self, lease_id: int, lease: LeaseRecord) -> float:
        remaining = self._clock.remaining(lease_id)
        return lease.ttl_ms / 1000 if remaining is None else round(remaining, 3)

    def leases(
        self, after: int | None, limit: int, caller: Caller
    ) -> tuple[list[LeaseInfo], int | None]:
        if not 1 <= limit <= MAX_LISTED:
            raise InvalidRequest(f"limit must be between 1 and {MAX_LISTED}")
        start = None if after is None else lease_key(after)
        listed: list[LeaseInfo] = []
        with self._store.reader() as view:
            while len(listed) < limit:
                page = view.scan(LEASES_PREFIX, start, MAX_LISTED, include_internal=True)
                for key, stored in page:
                    lease = decode_lease(stored.value)
                    lease_id = lease_id_of(key)
                    start = key
                    if self._owned(lease, caller) and (caller.admin or lease.owner):
                        info = LeaseInfo(
                            lease_id,
                            lease.ttl_ms // 1000,
                            self._remaining(lease_id, lease),
                            lease.owner,
                        )
                        listed.append(info)
                        if len(listed) == limit:
                            break
                if len(listed) < limit and len(page) < MAX_LISTED:
                    return listed, None  # the scan reached the last lease
        return listed, listed[-1].lease_id

    # -- expiry (the leader) --------------------------------------------------------------

    async def expire_due(self) -> int:
        """On the leader, once its clock is promoted: propose the expiry of every lease
        past its deadline, a slice per entry; how many ended."""
        ended = 0
        while self._consensus.is_leader():
            due = self._clock.due(EXPIRY_SLICE)
            if not due:
                break
            result = await self._consensus.propose(ExpireLeases(tuple(due), EXPIRY_RECORD_BUDGET))
            if result.code is not ResultCode.OK:
                break
            done = {int(op.key) for op in result.op_results}
            ended += sum(op.found for op in result.op_results)
            self._clock.retry_soon(i for i, _ in due if i not in done)
        return ended

    async def sweep(self) -> None:
        """Forever: :meth:`expire_due` every :data:`SWEEP_SECONDS`."""
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            if not self._clock.promoted:
                continue
            try:
                ended = await self.expire_due()
            except RequestError as exc:  # no leader, overloaded...: the next round retries
                logger.debug("lease expiry skipped: %s", exc)
                continue
            if ended:
                logger.info("expired %d leases", ended)

    # -- locks and elections -----------------------------------------------------------------

    def _check_lock(self, name: str, lease_id: int, value: bytes = b"") -> None:
        problem = lock_name_problem(name)
        if problem is not None:
            raise InvalidRequest(problem, code="invalid_lock_name")
        _check_id(lease_id)
        if len(value) > MAX_LOCK_VALUE_BYTES:
            raise InvalidRequest(f"a lock's value is at most {MAX_LOCK_VALUE_BYTES} bytes")

    def _lock_record(self, name: str) -> LockRecord | None:
        found = self._store.get(lock_key(name))
        return None if found is None else decode_lock(found.value)

    def _holder(self, name: str, lock: LockRecord | None) -> LockHolder | None:
        if lock is None or not lock.holder:
            return None
        return LockHolder(name, lock.holder, lock.token, lock.since_ms, lock.value)

    async def lock(
        self, name: str, lease_id: int, timeout: float, caller: Caller, value: bytes = b""
    ) -> LockHolder:
        self._check_lock(name, lease_id, value)
        if not 0 <= timeout <= self._limits.max_lock_wait:
            raise InvalidRequest(
                f"timeout is 0 to {self._limits.max_lock_wait:g} seconds (--max-lock-wait)"
            )
        self.check_use(lease_id, caller)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        with self.waits.watching(name) as watch:
            watch.arm()
            limits = self._limits
            result = await self._propose(
                Lock(name, lease_id, value, limits.max_lock_waiters), lease_id
            )
            try:
                while True:
                    lock = self._lock_record(name)
                    if lock is not None and lock.holder == lease_id:
                        holder = self._holder(name, lock)
                        assert holder is not None
                        return holder
                    if result.succeeded:  # held, and already lost again
                        holder = self._holder(name, lock)
                        token = None if holder is None else holder.token
                        raise LockHeld(f"lock {name} was lost at once", token)
                    if self._record(lease_id) is None and not self._ahead(lock, lease_id):
                        raise KeyNotFound(
                            f"lease {lease_id} ended while waiting", code="lease_expired"
                        )
                    left = deadline - loop.time()
                    if left <= 0:
                        break
                    await watch.wait(left)
                    watch.arm()
            except BaseException:
                await self._leave_queue(name, lease_id)
                raise
        await self._leave_queue(name, lease_id)
        current = self._holder(name, self._lock_record(name))
        held_by = "" if current is None else f" (token {current.token})"
        raise LockHeld(
            f"lock {name} is held by another lease{held_by}; waited {timeout:g}s",
            None if current is None else current.token,
        )

    def _ahead(self, lock: LockRecord | None, lease_id: int) -> bool:
        """Whether the lease is still in the lock's queue (this node may lag its end)."""
        return lock is not None and any(w == lease_id for w, _ in lock.waiters)

    async def _leave_queue(self, name: str, lease_id: int) -> None:
        """Stop waiting (or let go of a lock just won after the caller gave up)."""
        try:
            await asyncio.shield(self._consensus.propose(Unlock(name, lease_id)))
        except Exception as exc:  # the lease's end will take it out of the queue
            logger.warning("could not leave the queue of lock %s: %s", name, exc)

    async def unlock(self, name: str, lease_id: int, caller: Caller) -> None:
        self._check_lock(name, lease_id)
        self.check_use(lease_id, caller)
        await self._propose(Unlock(name, lease_id), lease_id)

    async def proclaim(
        self, name: str, lease_id: int, token: int, value: bytes, caller: Caller
    ) -> LockHolder:
        self._check_lock(name, lease_id, value)
        self.check_use(lease_id, caller)
        result = await self._propose(Proclaim(name, lease_id, token, value), lease_id)
        lock = self._lock_record(name)
        holder = self._holder(name, lock)
        if holder is None or holder.token != result.version:
            return LockHolder(name, lease_id, token, 0, value)
        return holder

    async def lock_info(self, name: str) -> LockInfo:
        problem = lock_name_problem(name)
        if problem is not None:
            raise InvalidRequest(problem, code="invalid_lock_name")
        await self._consensus.read_barrier()
        lock = self._lock_record(name)
        return LockInfo(name, self._holder(name, lock), 0 if lock is None else len(lock.waiters))

    async def observe(self, name: str) -> AsyncIterator[LockHolder | None]:
        await self.lock_info(name)  # checks the name; a linearizable first answer
        with self.waits.watching(name) as watch:
            watch.arm()
            last = self._holder(name, self._lock_record(name))
            yield last
            while True:
                await watch.wait(3600.0)
                watch.arm()
                now = self._holder(name, self._lock_record(name))
                if now != last:
                    last = now
                    yield now


def _check_id(lease_id: int) -> None:
    if type(lease_id) is not int or not 1 <= lease_id <= INT64_MAX:
        raise InvalidRequest(f"a lease id is a positive integer, not {lease_id!r:.40}")


def _all_leases(view: ReadView) -> list[tuple[int, int, int]]:
    found: list[tuple[int, int, int]] = []
    after: bytes | None = None
    while True:
        page = view.scan(LEASES_PREFIX, after, 1000, include_internal=True)
        for key, stored in page:
            found.append((lease_id_of(key), decode_lease(stored.value).ttl_ms, stored.version))
        if len(page) < 1000:
            return found
        after = page[-1][0]


def _attached_keys(view: ReadView, lease_id: int) -> tuple[list[bytes], bool]:
    """The keys still attached to the lease (their version is the one written under
    it), at most :data:`MAX_LISTED`; and whether there are more."""
    prefix = key_attachments(lease_id)
    keys: list[bytes] = []
    after: bytes | None = None
    while True:
        page = view.scan(prefix, after, MAX_LISTED, include_internal=True)
        for attachment, stored in page:
            key = attachment[len(prefix) :]
            current = view.get(key)
            if current is not None and current.version == int(stored.value):
                if len(keys) == MAX_LISTED:
                    return keys, True
                keys.append(key)
        if len(page) < MAX_LISTED:
            return keys, False
        after = page[-1][0]
