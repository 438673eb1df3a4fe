"""Making applied entries durable off the raft thread, then answering clients.

The raft thread hands over the outcomes of a tick; this thread fsyncs the
commit log once for everything queued since its last fsync (group fsync) and
then delivers the outcomes to the event loop. Meanwhile the raft thread goes
on receiving and applying entries instead of waiting for the disk.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from node import metrics

logger = logging.getLogger(__name__)

Ack = tuple[int, Any, int]
"""(entry id, pysyncobj's result, pysyncobj's failure reason)."""


class AckSyncer:
    def __init__(self, sync: Callable[[], None], deliver: Callable[[list[Ack]], None]) -> None:
        self._sync = sync
        self._deliver = deliver
        self._cond = threading.Condition()
        self._queue: list[Ack] = []
        self._stopping = False
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="rkv-ack-sync", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def busy(self) -> bool:
        """Whether answers are queued or being synced (later ones must wait behind them)."""
        return self._busy

    def submit(self, acks: list[Ack]) -> None:
        with self._cond:
            self._busy = True
            self._queue.extend(acks)
            self._cond.notify()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue and self._stopping:
                    return
                batch, self._queue = self._queue, []
            try:
                started = time.perf_counter()
                self._sync()
                if metrics.enabled:
                    metrics.COMMIT_LOG_FSYNC.observe(time.perf_counter() - started)
            except Exception:
                # Nothing is acknowledged that is not durable: these clients get
                # no answer and time out with an unknown outcome.
                logger.exception("fsync of the commit log failed; %d answers withheld", len(batch))
                continue
            self._deliver(batch)
            with self._cond:
                if not self._queue:
                    self._busy = False
