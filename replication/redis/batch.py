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
"""

from __future__ import annotations

import base64
import heapq
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

from http_api.client import RkvClient
from http_api.client.errors import ClusterUnreachableError, UnavailableError
from replication.redis.checkpoint import Checkpoint

logger = logging.getLogger(__name__)

MAX_BATCH_OPS = 8000
"""Writes per transaction (rkv takes 10,000 compares and ops)."""
MAX_BATCH_BYTES = 6 * 1024 * 1024
"""Keys and values per transaction (the JSON body, base64, stays under 16 MiB)."""
_READS_PER_TXN = 5000
_SCAN_PAGE = 1000
_RETRY_PAUSE = 0.5
_ABSENT = object()


class CheckpointConflict(Exception):
    """Someone else moved the checkpoint: another replicator runs on this prefix."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class RkvStore:
    def __init__(self, client: RkvClient, checkpoint_name: str) -> None:
        self.client = client
        self.checkpoint_name = checkpoint_name

    def read_checkpoint(self) -> tuple[Checkpoint | None, int]:
        """The checkpoint and its version (0: none), read through the log."""
        answer = self.client.txn_raw(
            {"success": [{"op": "get", "checkpoint": self.checkpoint_name}]}
        )
        result = answer["results"][0]
        if not result["found"]:
            return None, 0
        return Checkpoint.decode(base64.b64decode(result["value"])), int(result["version"])

    def get_many(self, keys: Iterable[bytes]) -> dict[bytes, bytes | None]:
        """Linearizable reads of several keys (one transaction per 5,000)."""
        wanted = list(dict.fromkeys(keys))
        found: dict[bytes, bytes | None] = {}
        for start in range(0, len(wanted), _READS_PER_TXN):
            chunk = wanted[start : start + _READS_PER_TXN]
            answer = self.client.txn_raw(
                {"success": [{"op": "get", "key": _b64(key)} for key in chunk]}
            )
            for key, result in zip(chunk, answer["results"], strict=True):
                found[key] = base64.b64decode(result["value"]) if result["found"] else None
        return found

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
        ops = [_op(key, value) for key, value in changes.items()]
        for start in range(0, len(ops), MAX_BATCH_OPS):
            self.client.txn_raw({"success": ops[start : start + MAX_BATCH_OPS]})

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
        guard makes a repeat of one that landed harmless)."""
        while True:
            try:
                return self.client.txn_raw(body)
            except (UnavailableError, ClusterUnreachableError) as exc:
                logger.warning("commit failed or its outcome is unknown (%s); retrying", exc)
                time.sleep(_RETRY_PAUSE)

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

    def __init__(self, store: RkvStore, cache_entries: int = 200_000) -> None:
        self.store = store
        self._cache: OrderedDict[bytes, bytes | None] = OrderedDict()
        self._cache_entries = cache_entries
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
        return len(self.pending) >= MAX_BATCH_OPS or self.pending_bytes >= MAX_BATCH_BYTES

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

    def remember(self, key: bytes, value: bytes | None) -> None:
        """Cache a committed value (read elsewhere, e.g. by a scan)."""
        self._cache[key] = value
        self._cache.move_to_end(key)
        if len(self._cache) > self._cache_entries:
            self._cache.popitem(last=False)
