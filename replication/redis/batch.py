"""Committing replicated Redis data into rkv exactly once.

:class:`RkvStore` talks to rkv through the Python client: linearizable reads
(a transaction of ``get`` ops goes through the log), scans, and
:meth:`RkvStore.commit`, ONE transaction holding a batch's writes and the
replicator's checkpoint, guarded by a compare on the checkpoint's version. A
second replicator on the same prefix, or a stale incarnation of this one,
fails that compare and stops (:class:`CheckpointConflict`). A commit whose
outcome is unknown (the leader died mid-request) is resent; if the first
attempt had landed, the compare fails and the checkpoint read back equals the
one sent, which proves it: nothing is applied twice.

:class:`BatchView` is the :class:`~replication.redis.view.View` commands are
applied through: writes wait in memory (and are what later reads of the same
batch see) until :meth:`BatchView.commit`; reads of other keys come from a
bounded cache of committed values, else from rkv.

Transactions fit the node: rkv refuses one holding more compares and ops than
its ``--max-txn-ops`` (413 ``txn_too_large``). :meth:`RkvStore.learn_limits`
reads the leader's limit from ``GET /v1/status``; reads, clean-up writes and
batches are sized within it (a batch counts as full at 80% of it, so a
command that follows still fits), and a 413 all the same (a leader with a
lower limit) raises :class:`TxnTooLarge`, which the replicator answers by
halving its idea of the limit and starting again from its checkpoint.
"""

from __future__ import annotations

import base64
import heapq
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

from http_api.client import Fencing, RkvClient
from http_api.client.errors import (
    ClusterUnreachableError,
    NoSpaceError,
    PayloadTooLargeError,
    UnavailableError,
)
from replication.redis.checkpoint import Checkpoint

logger = logging.getLogger(__name__)

RKV_MAX_TXN_OPS = 10_000
"""The most compares and ops rkv ever takes in one transaction (its state
machine's bound, and --max-txn-ops's default before nodes said theirs)."""
TXN_OVERHEAD = 3
"""What a commit adds to its writes: the compare, the checkpoint put, the failure get."""
MIN_TXN_OPS = 16
"""The smallest --max-txn-ops the replicator works with."""
MAX_BATCH_BYTES = 3 * 1024 * 1024
"""Keys and values per transaction: under the nodes' --max-entry-bytes (4 MiB by
default), the most a transaction may carry (a larger one is 413 txn_too_large)."""
_READS_PER_TXN = 5000
_SCAN_PAGE = 1000
CACHE_ENTRIES = 200_000
CACHE_BYTES = 64 * 1024 * 1024
"""What a BatchView's cache of committed values may hold (keys and values)."""
_RETRY_PAUSE = 0.5
_NO_SPACE_PAUSE = 5.0
"""Between two tries while rkv refuses writes with a NOSPACE alarm (an operator acts)."""
_ABSENT = object()


class CheckpointConflict(Exception):
    """Someone else moved the checkpoint: another replicator runs on this prefix."""


class TxnTooLarge(Exception):
    """rkv refused a transaction for holding more ops than its --max-txn-ops."""

    def __init__(self, message: str, size: int) -> None:
        super().__init__(message)
        self.size = size


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class RkvStore:
    def __init__(
        self,
        client: RkvClient,
        checkpoint_name: str,
        max_txn_ops: int = RKV_MAX_TXN_OPS,
        fencing: Fencing | None = None,
    ) -> None:
        self.client = client
        self.checkpoint_name = checkpoint_name
        self.max_txn_ops = max_txn_ops
        """The most compares and ops a transaction may hold (see the module docstring)."""
        self.fencing = fencing
        """The replicator's lock and token (replication/redis/standby.py): every
        transaction carries it, and rkv refuses each one (409 fenced, raised as
        :class:`~http_api.client.errors.Fenced`) once another replicator holds the lock."""

    @property
    def max_batch_writes(self) -> int:
        """The most writes one commit (with its checkpoint) may hold."""
        return self.max_txn_ops - TXN_OVERHEAD

    def learn_limits(self) -> int | None:
        """The leader's --max-txn-ops as its status says it (None: it does not say)."""
        status = self.client.status()
        leader = status.get("leader")
        if isinstance(leader, dict) and isinstance(leader.get("url"), str):
            status = self.client.status(leader["url"])
        limits = status.get("limits")
        value = limits.get("max_txn_ops") if isinstance(limits, dict) else None
        return value if isinstance(value, int) and value > 0 else None

    def _txn(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.client.txn_raw(body, fencing=self.fencing)
        except PayloadTooLargeError as exc:
            if exc.code != "txn_too_large":
                raise
            size = sum(len(body.get(part, ())) for part in ("compare", "success", "failure"))
            raise TxnTooLarge(str(exc), size) from exc

    def read_checkpoint(self) -> tuple[Checkpoint | None, int]:
        """The checkpoint and its version (0: none), read through the log."""
        answer = self._txn({"success": [{"op": "get", "checkpoint": self.checkpoint_name}]})
        result = answer["results"][0]
        if not result["found"]:
            return None, 0
        return Checkpoint.decode(base64.b64decode(result["value"])), int(result["version"])

    def get_many(self, keys: Iterable[bytes]) -> dict[bytes, bytes | None]:
        """Linearizable reads of several keys (one transaction per 5,000, or per
        --max-txn-ops if lower)."""
        wanted = list(dict.fromkeys(keys))
        found: dict[bytes, bytes | None] = {}
        step = min(_READS_PER_TXN, self.max_txn_ops)
        for start in range(0, len(wanted), step):
            self._read_into(found, wanted[start : start + step])
        return found

    def _read_into(self, found: dict[bytes, bytes | None], chunk: list[bytes]) -> None:
        """Read ``chunk`` in one transaction, or in halves when its values are more than
        the node returns at once (413 txn_result_too_large; one key always fits)."""
        body = {"success": [{"op": "get", "key": _b64(key)} for key in chunk]}
        try:
            answer = self._txn(body)
        except PayloadTooLargeError as exc:
            if exc.code != "txn_result_too_large" or len(chunk) == 1:
                raise
            half = len(chunk) // 2
            self._read_into(found, chunk[:half])
            self._read_into(found, chunk[half:])
            return
        for key, result in zip(chunk, answer["results"], strict=True):
            found[key] = base64.b64decode(result["value"]) if result["found"] else None

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for item in self.client.scan(prefix, limit=_SCAN_PAGE):
            yield item.key, item.value

    def first(self, prefix: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """The first ``limit`` keys under ``prefix`` with their values."""
        page = self.client.scan_page(prefix, limit=limit)
        return [(item.key, item.value) for item in page.items]

    def write(self, changes: dict[bytes, bytes | None]) -> None:
        """Idempotent writes outside any checkpoint (garbage collection, a load's
        clean-up): plain puts and deletes, no guard."""
        chunk: list[dict[str, Any]] = []
        size = 0
        for key, value in changes.items():
            weight = len(key) + (0 if value is None else len(value))
            if chunk and (len(chunk) >= self.max_txn_ops or size + weight > MAX_BATCH_BYTES):
                self._txn({"success": chunk})
                chunk, size = [], 0
            chunk.append(_op(key, value))
            size += weight
        if chunk:
            self._txn({"success": chunk})

    def write_guarded(self, changes: dict[bytes, bytes | None], expected_version: int) -> None:
        """Write ``changes`` in one transaction if the checkpoint's version is still
        ``expected_version`` (a full sync's batches: they leave the checkpoint as it is,
        so several may be in flight at once). Raises CheckpointConflict."""
        name = self.checkpoint_name
        body = {
            "compare": [{"checkpoint": name, "version": expected_version}],
            "success": [_op(key, value) for key, value in changes.items()],
            "failure": [{"op": "get", "checkpoint": name}],
        }
        answer = self._send(body)
        if not answer["succeeded"]:
            found = answer["results"][0]
            raise CheckpointConflict(
                f"the checkpoint {name} moved (version {found.get('version', 0)}, expected "
                f"{expected_version}): another replicator is writing this prefix"
            )

    def _send(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST a guarded transaction, again and again while rkv cannot answer (the
        guard makes a repeat of one that landed harmless), or refuses it with a
        NOSPACE alarm (507 no_space: nothing was written; replication waits for an
        operator to free space and disarm it)."""
        while True:
            try:
                return self._txn(body)
            except (UnavailableError, ClusterUnreachableError) as exc:
                logger.warning("commit failed or its outcome is unknown (%s); retrying", exc)
                time.sleep(_RETRY_PAUSE)
            except NoSpaceError as exc:
                logger.warning("rkv refuses writes until its NOSPACE alarm is disarmed: %s", exc)
                time.sleep(_NO_SPACE_PAUSE)

    def commit(
        self, changes: dict[bytes, bytes | None], checkpoint: Checkpoint, expected_version: int
    ) -> int:
        """Write ``changes`` and ``checkpoint`` in one transaction if the checkpoint's
        version is still ``expected_version``; returns its new version."""
        name = self.checkpoint_name
        body = {
            "compare": [{"checkpoint": name, "version": expected_version}],
            "success": [
                *(_op(key, value) for key, value in changes.items()),
                {"op": "put", "checkpoint": name, "value": _b64(checkpoint.encode())},
            ],
            "failure": [{"op": "get", "checkpoint": self.checkpoint_name}],
        }
        answer = self._send(body)
        if answer["succeeded"]:
            return int(answer["results"][-1]["version"])
        current = answer["results"][0]
        if current["found"] and base64.b64decode(current["value"]) == checkpoint.encode():
            return int(current["version"])  # an earlier attempt of this very commit landed
        raise CheckpointConflict(
            f"the checkpoint {self.checkpoint_name} moved (version {current.get('version', 0)}"
            f", expected {expected_version}): another replicator is writing this prefix"
        )


def _op(key: bytes, value: bytes | None) -> dict[str, Any]:
    if value is None:
        return {"op": "delete", "key": _b64(key)}
    return {"op": "put", "key": _b64(key), "value": _b64(value)}


class BatchView:
    """A View whose writes wait for :meth:`commit` (see the module docstring)."""

    def __init__(
        self, store: RkvStore, cache_entries: int = CACHE_ENTRIES, cache_bytes: int = CACHE_BYTES
    ) -> None:
        self.store = store
        self._cache: OrderedDict[bytes, bytes | None] = OrderedDict()
        self._cache_entries = cache_entries
        self._cache_max_bytes = cache_bytes
        self._cache_bytes = 0
        self.pending: dict[bytes, bytes | None] = {}
        self.pending_bytes = 0
        # Since mark(): each key's pending state before (_ABSENT: it had none).
        self._undo: dict[bytes, bytes | object | None] = {}
        self._undo_bytes = 0
        self.on_full: Callable[[], None] | None = None
        """Called by a write that fills the batch (a full-sync load commits then)."""

    # -- View -----------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        if key in self.pending:
            return self.pending[key]
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        value = self.store.get_many([key])[key]
        self.remember(key, value)
        return value

    def put(self, key: bytes, value: bytes) -> None:
        self._remember_undo(key)
        self.pending[key] = value
        self.pending_bytes += len(key) + len(value)
        if self.on_full is not None and self.full:
            self.on_full()

    def delete(self, key: bytes) -> None:
        self._remember_undo(key)
        self.pending[key] = None
        self.pending_bytes += len(key)

    def _remember_undo(self, key: bytes) -> None:
        if key not in self._undo:
            self._undo[key] = self.pending.get(key, _ABSENT)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        local = sorted((k, v) for k, v in self.pending.items() if k.startswith(prefix))
        stored = ((k, v) for k, v in self.store.scan(prefix) if k not in self.pending)
        for key, value in heapq.merge(stored, local):
            if value is not None:
                yield key, value

    # -- batching -------------------------------------------------------------------

    def prefetch(self, keys: Iterable[bytes]) -> None:
        """Read the keys not known yet in one round trip."""
        missing = [k for k in keys if k not in self.pending and k not in self._cache]
        if missing:
            for key, value in self.store.get_many(missing).items():
                self.remember(key, value)

    def mark(self) -> None:
        """Remember the pending writes as they are now (see :meth:`rollback_to_mark`)."""
        self._undo = {}
        self._undo_bytes = self.pending_bytes

    def rollback_to_mark(self) -> None:
        """Take back every write since :meth:`mark` (a command that failed half-way)."""
        for key, before in self._undo.items():
            if before is _ABSENT:
                self.pending.pop(key, None)
            else:
                self.pending[key] = cast("bytes | None", before)
        self._undo = {}
        self.pending_bytes = self._undo_bytes

    @property
    def full(self) -> bool:
        """Time to commit: 80% of what a transaction may hold, so that the writes
        of the command that follows still fit."""
        return (
            len(self.pending) * 5 >= self.store.max_batch_writes * 4
            or self.pending_bytes >= MAX_BATCH_BYTES
        )

    def commit(self, checkpoint: Checkpoint, expected_version: int) -> int:
        version = self.store.commit(self.pending, checkpoint, expected_version)
        for key, value in self.pending.items():
            self.remember(key, value)
        self.pending = {}
        self.pending_bytes = 0
        self._undo = {}
        return version

    def take_pending(self) -> dict[bytes, bytes | None]:
        """Hand the pending writes to the caller (who writes them) and start afresh."""
        pending = self.pending
        self.pending = {}
        self.pending_bytes = 0
        self._undo = {}
        return pending

    def discard(self) -> None:
        """Forget the pending writes (and the cache, which they may have shadowed)."""
        self.pending = {}
        self.pending_bytes = 0
        self._cache.clear()
        self._cache_bytes = 0

    def remember(self, key: bytes, value: bytes | None) -> None:
        """Cache a committed value (read elsewhere, e.g. by a scan)."""
        cache = self._cache
        if key in cache:
            self._cache_bytes -= _cached_size(key, cache[key])
        cache[key] = value
        cache.move_to_end(key)
        self._cache_bytes += _cached_size(key, value)
        while cache and (
            len(cache) > self._cache_entries or self._cache_bytes > self._cache_max_bytes
        ):
            old_key, old_value = cache.popitem(last=False)
            self._cache_bytes -= _cached_size(old_key, old_value)


def _cached_size(key: bytes, value: bytes | None) -> int:
    return len(key) + (0 if value is None else len(value))
