"""Pacing a transfer to a byte rate (a member catching up must not take the source's
disk and CPU from its clients)."""

from __future__ import annotations

import time


class Pace:
    """``wait(n)`` before sending ``n`` more bytes blocks until the transfer is no
    faster than ``rate_bytes`` per second since it began (0: never waits)."""

    def __init__(self, rate_bytes: int) -> None:
        self.rate_bytes = rate_bytes
        self._started = time.monotonic()
        self._sent = 0

    def wait(self, size: int) -> None:
        if self.rate_bytes > 0:
            due = self._started + (self._sent + size) / self.rate_bytes
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        self._sent += size
