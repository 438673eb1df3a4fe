"""The key-value writes: checking a write, building its command, and turning the
command's result into a return value or a :mod:`node.errors` exception.

The same code serves in the node's main process (:class:`node.service.kv.KvService`,
which proposes the command itself) and in an HTTP worker process
(node/service/worker_writes.py, which has main propose it), so that a write is
checked and built the same way whichever process parsed its request. Only
:meth:`KvWrites._propose` differs.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from node.errors import (
    Conflict,
    Fenced,
    InvalidRequest,
    KeyNotFound,
    LimitReached,
    NoSpace,
    PayloadTooLarge,
    RequestError,
    UnknownOutcome,
    VersionConflict,
)
from node.keyspace import is_reserved, key_length_problem
from node.service.lease_types import Fence
from node.service.txn_reads import returns_over
from node.state.commands import (
    MAX_TXN_OPS,
    Append,
    Command,
    Delete,
    Incr,
    Produced,
    ProducibleCommand,
    Put,
    Txn,
    payload_bytes,
)
from node.state.commands import (
    Fenced as FencedWrite,
)
from node.state.lease_commands import LeasedPut, TtlPut
from node.state.leases import DEFAULT_MAX_LEASE_TTL, DEFAULT_MAX_LEASES
from node.state.producers import ProducerTag
from node.state.results import CommandResult, ResultCode
from node.storage.lmdb_store import ReadView


def check_key(key: bytes) -> None:
    """InvalidRequest for a key a client may not name (reserved, empty, too long)."""
    if is_reserved(key):
        raise InvalidRequest("keys starting with \\x00rkv/ are internal", code="reserved_key")
    problem = key_length_problem(key)
    if problem is not None:
        raise InvalidRequest(problem, code="invalid_key")


_CONFLICTS = frozenset(
    {
        ResultCode.NOT_AN_INTEGER,
        ResultCode.INTEGER_OVERFLOW,
        ResultCode.UNKNOWN_PRODUCER,
        ResultCode.PRODUCER_FENCED,
        ResultCode.OUT_OF_ORDER_SEQUENCE,
        ResultCode.DUPLICATE_SEQUENCE_TOO_OLD,
    }
)


def result_error(result: CommandResult) -> RequestError:
    """The error a command result that is not OK stands for."""
    error = _result_error(result)
    error.duplicate = result.duplicate
    return error


def _result_error(result: CommandResult) -> RequestError:
    code = result.code
    if code is ResultCode.VERSION_CONFLICT:
        return VersionConflict(result.message, result.current_version)
    if code is ResultCode.NOT_FOUND:
        return KeyNotFound(result.message or "no such key")
    if code is ResultCode.VALUE_TOO_LARGE:
        return PayloadTooLarge(result.message)
    if code is ResultCode.TXN_TOO_LARGE or code is ResultCode.TXN_RESULT_TOO_LARGE:
        return PayloadTooLarge(result.message, code=code.value)
    if code in (
        ResultCode.TOO_MANY_PRODUCERS,
        ResultCode.TOO_MANY_LEASES,
        ResultCode.TOO_MANY_LEASE_ATTACHMENTS,
        ResultCode.TOO_MANY_LOCK_WAITERS,
    ):
        return LimitReached(result.message, code=code.value)
    if code is ResultCode.NO_SPACE:
        return NoSpace(result.message)
    if code is ResultCode.FENCED:
        return Fenced(result.message, result.current_version or None)
    if code is ResultCode.LEASE_NOT_FOUND:
        return KeyNotFound(result.message, code=code.value)
    if code in (ResultCode.INVALID_KEY, ResultCode.RESERVED_KEY):
        return InvalidRequest(result.message, code=code.value)
    if code in _CONFLICTS:
        return Conflict(result.message, code=code.value)
    # ALREADY_APPLIED, MALFORMED_ENTRY, NODE_STALLED...: the entry is in the log but
    # this node cannot tell what it did.
    return UnknownOutcome(f"the write was committed but its result is unknown: {code.value}")


class KvWrites:
    """The writes of a node's key-value service; subclasses say how a built command
    is proposed (:meth:`_propose`)."""

    def __init__(
        self,
        max_value_bytes: int,
        *,
        max_txn_ops: int = MAX_TXN_OPS,
        max_txn_result_bytes: int | None = None,
        max_txn_bytes: int | None = None,
        max_leases: int = DEFAULT_MAX_LEASES,
        max_lease_ttl: int = DEFAULT_MAX_LEASE_TTL,
    ) -> None:
        self._max_value_bytes = max_value_bytes
        self._max_txn_ops = max_txn_ops
        self._max_txn_result_bytes = max_txn_result_bytes
        self._max_txn_bytes = max_txn_bytes
        self._max_leases = max_leases
        self._max_lease_ttl = max_lease_ttl

    async def _propose(self, command: Command) -> CommandResult:
        """Propose a built command; its raw result (RequestError when not proposed)."""
        raise NotImplementedError

    def _state_view(self) -> AbstractContextManager[ReadView]:
        """A read view of this node's state (the txn result check before the log)."""
        raise NotImplementedError

    @property
    def max_value_bytes(self) -> int:
        return self._max_value_bytes

    @property
    def max_txn_ops(self) -> int:
        """Most compares and ops a transaction may hold here (at most the state machine's
        MAX_TXN_OPS, which every replica applies the same)."""
        return self._max_txn_ops

    # -- validation ---------------------------------------------------------------

    def check_key(self, key: bytes) -> None:
        check_key(key)

    def check_value(self, value: bytes) -> None:
        if len(value) > self._max_value_bytes:
            raise PayloadTooLarge(
                f"value is {len(value)} bytes; the limit is {self._max_value_bytes}"
            )

    @staticmethod
    def check_version(version: int | None, what: str) -> None:
        if version is not None and version < 0:
            raise InvalidRequest(f"{what} must be a non-negative integer")

    # -- writes -------------------------------------------------------------------
    #
    # Each write may come from an idempotent producer (``producer``: id, epoch,
    # sequence). It returns the command's OK result, whose ``duplicate`` says the
    # sequence was applied before (the result is the original one); any other
    # outcome raises the matching RequestError, with ``duplicate`` set likewise.

    async def put(
        self,
        key: bytes,
        value: bytes,
        expected_version: int | None = None,
        producer: ProducerTag | None = None,
        *,
        lease: int | None = None,
        ttl: int | None = None,
        fence: Fence | None = None,
        owner: str = "",
    ) -> CommandResult:
        """Set ``key``; ``expected_version`` makes it a compare-and-set (0: must not exist).

        ``lease`` attaches the key to that lease; ``ttl`` (seconds) grants a lease of its
        own to the key, owned by ``owner``, whose id is the result's ``value``."""
        self.check_key(key)
        self.check_value(value)
        self.check_version(expected_version, "expected version")
        command: Put | LeasedPut | TtlPut = Put(key, value, expected_version)
        if lease is not None and ttl is not None:
            raise InvalidRequest("a put takes a lease or a ttl, not both")
        if lease is not None:
            if type(lease) is not int or not 1 <= lease < 2**63:
                raise InvalidRequest(f"a lease id is a positive integer, not {lease!r:.40}")
            command = LeasedPut(key, value, expected_version, lease)
        elif ttl is not None:
            if type(ttl) is not int or not 1 <= ttl <= self._max_lease_ttl:
                raise InvalidRequest(
                    f"ttl is a whole number of seconds from 1 to {self._max_lease_ttl} "
                    f"(--max-lease-ttl), not {ttl!r:.40}",
                    code="invalid_ttl",
                )
            command = TtlPut(key, value, expected_version, ttl * 1000, owner, self._max_leases)
        return await self.write(command, producer, fence)

    async def delete(
        self,
        key: bytes,
        expected_version: int | None = None,
        producer: ProducerTag | None = None,
        *,
        fence: Fence | None = None,
    ) -> CommandResult:
        """Delete ``key``; the result's version is the tombstone's offset. Raises KeyNotFound."""
        self.check_key(key)
        self.check_version(expected_version, "expected version")
        return await self.write(Delete(key, expected_version), producer, fence)

    async def incr(
        self,
        key: bytes,
        by: int,
        producer: ProducerTag | None = None,
        *,
        fence: Fence | None = None,
    ) -> CommandResult:
        """Add ``by`` to the integer at ``key``; the result's value is the new one."""
        self.check_key(key)
        return await self.write(Incr(key, by), producer, fence)

    async def append(
        self,
        key: bytes,
        suffix: bytes,
        producer: ProducerTag | None = None,
        *,
        fence: Fence | None = None,
    ) -> CommandResult:
        """Append ``suffix`` to the value at ``key``; the result's value is the new length."""
        self.check_key(key)
        self.check_value(suffix)
        return await self.write(Append(key, suffix), producer, fence)

    async def txn(
        self, txn: Txn, producer: ProducerTag | None = None, *, fence: Fence | None = None
    ) -> CommandResult:
        """Run an already validated transaction (http_api/txn_json.py parses one).

        A txn that reads carries this node's --max-txn-result-bytes in its entry:
        every replica refuses it the same way when its gets would return more."""
        size = payload_bytes(txn)
        if self._max_txn_bytes is not None and size > self._max_txn_bytes:
            raise PayloadTooLarge(
                f"the transaction carries {size} bytes of keys and values; one holds at most "
                f"{self._max_txn_bytes} (--max-entry-bytes: it must fit in one raft entry); "
                "split it",
                code="txn_too_large",
            )
        if txn.reads and self._max_txn_result_bytes is not None:
            txn = txn._replace(max_result_bytes=self._max_txn_result_bytes)
            self._refuse_plain_oversized_reads(txn, self._max_txn_result_bytes)
        return await self.write(txn, producer, fence)

    def _refuse_plain_oversized_reads(self, txn: Txn, limit: int) -> None:
        """Refuse before the log a txn whose gets would return more than ``limit`` in
        either branch as this node's state stands (what the state machine would answer,
        without a raft round and an apply on every replica). Only the keys no earlier op
        of the branch writes are counted, so what is refused here would be refused
        there too unless those keys shrink meanwhile; the state machine decides."""
        # Without compares the success branch runs; with them, either may.
        branches = (txn.success, txn.failure) if txn.compares else (txn.success,)
        with self._state_view() as view:
            if all(returns_over(branch, view, limit) for branch in branches):
                raise PayloadTooLarge(
                    f"the txn's gets would return more than {limit} bytes of keys and values "
                    "(--max-txn-result-bytes); read fewer keys per txn",
                    code=ResultCode.TXN_RESULT_TOO_LARGE.value,
                )

    async def write(
        self,
        command: ProducibleCommand,
        producer: ProducerTag | None = None,
        fence: Fence | None = None,
    ) -> CommandResult:
        """Propose ``command`` (guarded by ``fence``'s lock token, sent by ``producer``)."""
        if fence is not None and not isinstance(command, FencedWrite):
            command = FencedWrite(fence.name, fence.token, command)
        wrapped: Command = command if producer is None else Produced(*producer, command)
        result = await self._propose(wrapped)
        if result.code is ResultCode.OK:
            return result
        raise result_error(result)
