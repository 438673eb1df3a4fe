"""Progress lines on a stream (stderr): what is done, how many keys, how fast."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TextIO

INTERVAL_SECONDS = 2.0


class Progress:
    """Writes ``audit: ...`` lines; ``tick`` lines at most every INTERVAL_SECONDS.

    Thread-safe: the Spark engine reports from a polling thread.
    """

    def __init__(
        self,
        stream: TextIO | None,
        interval: float = INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._phase = ""
        self._unit = ""
        self._counted = "keys"
        self._total = 0
        self._start = clock()
        self._last = self._start

    def line(self, text: str) -> None:
        if self._stream is None:
            return
        with self._lock:
            self._stream.write(f"audit: {text}\n")
            self._stream.flush()

    def start(self, phase: str, total: int, unit: str, counted: str = "keys") -> None:
        """A phase of ``total`` units (buckets, files, logs) begins; it counts ``counted``."""
        with self._lock:
            self._phase, self._total, self._unit = phase, total, unit
            self._counted = counted
            self._start = self._last = self._clock()

    def _text(self, done: int, keys: int | None) -> str:
        elapsed = max(self._clock() - self._start, 1e-9)
        text = f"{self._phase}: {done}/{self._total} {self._unit}"
        if keys is not None:
            text += f", {keys:,} {self._counted}, {keys / elapsed:,.0f} {self._counted}/s"
        return text + f" ({elapsed:.1f} s)"

    def tick(self, done: int, keys: int | None = None) -> None:
        now = self._clock()
        if now - self._last < self._interval:
            return
        self._last = now
        self.line(self._text(done, keys))

    def finish(self, done: int, keys: int | None = None) -> None:
        self.line(self._text(done, keys))
