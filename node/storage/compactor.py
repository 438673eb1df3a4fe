"""When compaction runs on a node: on demand (forced) or when closed segments grow.

One compaction at a time, in a worker thread, off the apply path. A forced
compaction first rolls the active segment (on the apply thread, where
appends happen), so that afterwards the log holds exactly one record per live
key plus the tombstones still in retention.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from node import metrics
from node.storage.commit_log import CommitLog
from node.storage.compaction import CompactionPolicy, CompactionResult, compact

if TYPE_CHECKING:  # only for annotations: `rkv get` must not load lmdb via settings
    from node.storage.lmdb_store import LmdbStore

logger = logging.getLogger(__name__)

OnApplyThread = Callable[[Callable[[], None]], Awaitable[None]]
"""Runs a function on the thread that appends to the commit log, and waits for it."""


@dataclass(frozen=True, slots=True)
class CompactionTriggers:
    interval_seconds: float = 300.0  # how often the closed segments are looked at
    min_closed_bytes: int = 64 * 1024 * 1024  # compact once this much was closed since
    min_dirty_ratio: float = 0.5  # rewrite a segment only if about this share would go


class Compactor:
    def __init__(
        self,
        log: CommitLog,
        store: LmdbStore,
        *,
        policy: CompactionPolicy,
        triggers: CompactionTriggers,
        segment_bytes: int,
        on_apply_thread: OnApplyThread,
    ) -> None:
        self._log = log
        self._store = store
        self._policy = policy
        self._triggers = triggers
        self._segment_bytes = segment_bytes
        self._on_apply_thread = on_apply_thread
        self._lock = asyncio.Lock()
        self._last: CompactionResult | None = None
        self._last_finished = 0.0
        self._compacted_closed_bytes = 0
        self._progress: tuple[int, int] | None = None
        self.runs = 0
        self.reclaimed_bytes = 0

    async def compact(self, force: bool = False) -> CompactionResult:
        """One pass. Forced: the active segment is rolled first and every closed segment
        rewritten; otherwise only those whose sample reaches the dirty ratio."""
        async with self._lock:
            if force:
                await self._on_apply_thread(self._log.roll)
            self._progress = (0, 0)
            started = time.perf_counter()
            try:
                result = await asyncio.to_thread(
                    compact,
                    self._log,
                    self._store,
                    self._policy,
                    self._segment_bytes,
                    progress=self._note_progress,
                    min_dirty_ratio=0.0 if force else self._triggers.min_dirty_ratio,
                )
            finally:
                self._progress = None
            self._last, self._last_finished = result, time.time()
            self._compacted_closed_bytes = self._closed_bytes()
            self.runs += 1
            self.reclaimed_bytes += result.bytes_reclaimed
            if metrics.enabled:
                metrics.COMPACTION_DURATION.observe(time.perf_counter() - started)
            return result

    def _note_progress(self, examined: int, total: int) -> None:
        self._progress = (examined, total)

    def _closed_bytes(self) -> int:
        return sum(s.size for s in self._log.closed_segments())

    def due(self) -> bool:
        return (
            self._closed_bytes() - self._compacted_closed_bytes >= self._triggers.min_closed_bytes
        )

    async def run_triggers(self) -> None:
        """Compact whenever enough closed segments have accumulated (until cancelled)."""
        while True:
            await asyncio.sleep(self._triggers.interval_seconds)
            if self.due() and not self._lock.locked():
                try:
                    await self.compact()
                except Exception:
                    logger.exception("background compaction failed; will retry later")

    def status(self) -> dict[str, Any]:
        running = self._progress
        return {
            "running": None
            if running is None
            else {"bytes_examined": running[0], "bytes_total": running[1]},
            "runs": self.runs,
            "reclaimed_bytes": self.reclaimed_bytes,
            "last": None
            if self._last is None
            else {
                **asdict(self._last),
                "bytes_reclaimed": self._last.bytes_reclaimed,
                "finished_at": self._last_finished,
            },
            "closed_segment_bytes": self._closed_bytes(),
        }
