"""The blocking client's idempotent producer: :class:`Producer` (``client.producer()``
on a :class:`http_api.client.RkvClient`)."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from http_api.client.lease_model import FencingLike, HasLeaseId
from http_api.client.model import BytesLike, Compare, Op, TxnResult
from http_api.client.operations import _Core, _Write
from http_api.client.producer import _ProducerCore, _ProducerView
from http_api.client.wire import _Plan

T = TypeVar("T")


class _Runner(Protocol):
    """What a producer needs of its client: the core, and running a plan."""

    _core: _Core

    def _run(self, plan: _Plan[T]) -> T: ...


class Producer(_ProducerView):
    """An idempotent producer on a :class:`RkvClient` (``client.producer()``).

    Every write carries the producer's id, epoch and next sequence and is sent
    again with the same sequence on any unknown or transient outcome, for up to
    ``deadline`` seconds: the server applies each sequence once. One write at a
    time (a lock): use several producers for parallelism. The rules, the
    exceptions and what happens after a deadline: :mod:`http_api.client.producer`.
    """

    def __init__(self, client: _Runner, state: _ProducerCore) -> None:
        self._client = client
        self._state = state
        self._lock = threading.Lock()

    def _write(self, request: _Write[T]) -> T:
        with self._lock:
            return self._client._run(self._state.write(request))

    def put(
        self,
        key: BytesLike,
        value: BytesLike,
        *,
        if_version: int | None = None,
        create_only: bool = False,
        lease: int | HasLeaseId | None = None,
        fencing: FencingLike | None = None,
    ) -> int:
        """Set the key; returns its new version."""
        return self._write(
            self._client._core.put_request(
                key, value, if_version, create_only, lease=lease, fencing=fencing
            )
        )

    def delete(
        self,
        key: BytesLike,
        *,
        if_version: int | None = None,
        fencing: FencingLike | None = None,
    ) -> int:
        """Delete the key; returns the tombstone's version. Raises KeyNotFoundError."""
        return self._write(self._client._core.delete_request(key, if_version, fencing))

    def incr(self, key: BytesLike, by: int = 1, *, fencing: FencingLike | None = None) -> int:
        """Add ``by`` to the integer at ``key``; returns the new value."""
        return self._write(self._client._core.incr_request(key, by, fencing))

    def append(
        self, key: BytesLike, value: BytesLike, *, fencing: FencingLike | None = None
    ) -> int:
        """Append ``value`` to the key's value; returns the new size."""
        return self._write(self._client._core.append_request(key, value, fencing))

    def txn(
        self,
        compare: Sequence[Compare] = (),
        success: Sequence[Op] = (),
        failure: Sequence[Op] = (),
        *,
        fencing: FencingLike | None = None,
    ) -> TxnResult:
        """Atomically: if every compare holds run ``success``, else ``failure``."""
        return self._write(self._client._core.txn_request(compare, success, failure, fencing))

    def txn_raw(
        self,
        body: Mapping[str, Any],
        *,
        encoding: str = "base64",
        fencing: FencingLike | None = None,
    ) -> dict[str, Any]:
        """POST /v1/txn with a body as the API takes it; returns the answer as JSON."""
        return self._write(self._client._core.txn_raw_request(body, encoding, fencing))

    def reinit(self) -> None:
        """Register again: with a transactional id the same producer id and the next
        epoch (this fences the older ones), else a new producer id. Sequences start
        from 0; a pending write is abandoned (with a transactional id, the new epoch
        guarantees it can no longer be applied)."""
        with self._lock:
            self._client._run(self._state.init())
