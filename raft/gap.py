"""Filling the gap behind a raft marker, on a worker thread, until it is filled.

A raft marker from the leader that is ahead of this node's state means entries
are missing here that raft will not send again (the leader compacted them).
The marker's load (raft/marker.py, on pysyncobj's thread) only records the
target; :class:`GapFiller` brings the state there on its own thread with the
catch-up the composition root supplies (replication/pull/catch_up.py: the
missing log range, else another member's whole state), trying each source in
turn and, when all fail, again after a growing pause (1 s doubling to 30 s),
for as long as it takes. Meanwhile the node stays a raft member (it receives
and acknowledges entries into its journal) but applies none
(:meth:`holding`), serves no reads, and stands for no election. A round that
fails sets :attr:`stalled` (the reason reported by /v1/status and /readyz);
the first success clears it and the node applies the entries it held.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from node import metrics
from node.errors import ReplicationError, SnapshotFormatError, StorageError
from node.storage.recovery import NodeStorage

logger = logging.getLogger(__name__)

CatchUp = Callable[[NodeStorage, str, int, int], int]
"""(storage, source URL, raft index, offset) -> records pulled or keys installed: brings
the state up to a marker ahead of it (replication/pull/catch_up.py; raises ReplicationError,
SnapshotFormatError, StorageError or OSError). The composition root supplies it."""

FIRST_PAUSE = 1.0
MAX_PAUSE = 30.0


def _count_catch_up(result: str, started: float) -> None:
    if metrics.enabled:
        metrics.CATCH_UPS.labels(result).inc()
        metrics.CATCH_UP_DURATION.observe(time.perf_counter() - started)


class Target(NamedTuple):
    raft_index: int
    offset: int
    author: str


class GapFiller:
    def __init__(
        self,
        storage: NodeStorage,
        catch_up: CatchUp,
        sources: Callable[[str], list[str]],
        on_filled: Callable[[int], None],
    ) -> None:
        self._storage = storage
        self._catch_up = catch_up
        self._sources = sources
        self._on_filled = on_filled
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._target: Target | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.stalled: str | None = None
        """Why the last round failed, while the gap is still open; None otherwise."""

    @property
    def behind(self) -> str | None:
        """Why this node applies nothing and serves no reads, while a gap is open."""
        target = self._target
        if target is None:
            return None
        return (
            f"catching up to a raft marker from {target.author} at raft index {target.raft_index} "
            f"(offset {target.offset})"
        )

    def holding(self) -> bool:
        """True while entries must not be applied: the state has a gap before them."""
        return self._target is not None

    def open(self, index: int, offset: int, author: str) -> None:
        """The state must reach raft index ``index`` and offset ``offset`` (a marker's)
        before any later entry is applied. Called on the raft thread; returns at once."""
        with self._lock:
            if self._stopping:
                return
            current = self._target
            if current is None or offset > current.offset or index > current.raft_index:
                self._target = Target(
                    max(index, current.raft_index if current else 0),
                    max(offset, current.offset if current else 0),
                    author,
                )
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rkv-catch-up", daemon=True)
                self._thread.start()
            self._wake.notify_all()

    def stop(self, timeout: float = 2.0) -> None:
        with self._lock:
            self._stopping = True
            self._wake.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        pause = FIRST_PAUSE
        while True:
            with self._lock:
                target = self._target
                if self._stopping or target is None:
                    self._thread = None
                    return
            if self._fill(target):
                pause = FIRST_PAUSE
                continue
            with self._lock:
                if not self._stopping:
                    self._wake.wait(pause)
            pause = min(pause * 2, MAX_PAUSE)

    def _fill(self, target: Target) -> bool:
        """One round over every source; True when the state reached ``target``."""
        store = self._storage.store
        if store.applied_offset >= target.offset:
            # An earlier round went past it (a whole state is the source's newest).
            if target.raft_index > store.applied_index:
                store.write([], target.raft_index, store.applied_offset)
            self._filled(target, 0)
            return True
        gap = (
            f"a snapshot from {target.author} at raft index {target.raft_index} (offset "
            f"{target.offset}) is ahead of this node's state (raft index "
            f"{store.applied_index}, offset {store.applied_offset})"
        )
        failures: list[str] = []
        for source in self._sources(target.author):
            if self._stopping:
                return False
            started = time.perf_counter()
            try:
                filled = self._catch_up(self._storage, source, target.raft_index, target.offset)
            except (ReplicationError, SnapshotFormatError, StorageError, OSError) as exc:
                _count_catch_up("failed", started)
                logger.warning("catching up from %s failed: %s", source, exc)
                failures.append(f"{source}: {exc}")
                continue
            _count_catch_up("ok", started)
            self._filled(target, filled)
            return True
        reason = "; ".join(failures) or "no other member is known"
        if self.stalled is None:
            logger.error(
                "STALLED: %s; installing another member's state failed (%s): this node "
                "applies nothing and serves no reads until it has caught up, and retries",
                gap,
                reason,
            )
        self.stalled = f"{gap}; installing another member's state failed ({reason}); retrying"
        return False

    def _filled(self, target: Target, filled: int) -> None:
        with self._lock:
            if self._target == target:
                self._target = None
                self.stalled = None
        logger.info("caught up with the raft marker at raft index %d", target.raft_index)
        self._on_filled(filled)
