"""Log lines a remote peer can provoke, at most one per subject per interval.

Anyone who reaches the raft port can make a node log (a failed handshake, an
oversized frame); without a bound, a loop of such connections would fill the
disk with the log. :class:`ThrottledLog` writes the first line of a kind about
a subject (a peer's host) at once, counts the ones that follow within the
interval, and says how many it held back in the next line it writes. It
tracks a bounded number of subjects; past that, new subjects of a kind share
one budget, so many source addresses cannot multiply the lines either.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

DEFAULT_INTERVAL = 10.0  # seconds between two lines of one kind about one subject
DEFAULT_MAX_SUBJECTS = 256
_ANY_SUBJECT = "*"


class ThrottledLog:
    """Not thread-safe: used from pysyncobj's raft thread only."""

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = DEFAULT_INTERVAL,
        max_subjects: int = DEFAULT_MAX_SUBJECTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._max_subjects = max_subjects
        self._clock = clock
        self._last: dict[tuple[str, str], float] = {}  # (kind, subject) -> when last written
        self._held: dict[tuple[str, str], int] = {}  # lines held back since then

    def report(self, kind: str, subject: str, message: str, *args: object) -> None:
        """Log ``message % args`` as a warning unless a line of ``kind`` about
        ``subject`` was written less than the interval ago (then it is only counted)."""
        now = self._clock()
        key = self._key(kind, subject, now)
        last = self._last.get(key)
        if last is not None and now - last < self._interval:
            self._held[key] = self._held.get(key, 0) + 1
            return
        held = self._held.pop(key, 0)
        self._last[key] = now
        if held:
            message += " (%d more like it held back in the last %.0f s)"
            args = (*args, held, now - last if last is not None else self._interval)
        self._logger.warning(message, *args)

    def _key(self, kind: str, subject: str, now: float) -> tuple[str, str]:
        key = (kind, subject)
        if key in self._last or len(self._last) < self._max_subjects:
            return key
        for old, when in list(self._last.items()):  # forget subjects quiet for a while
            if now - when >= self._interval and not self._held.get(old):
                del self._last[old]
        return key if len(self._last) < self._max_subjects else (kind, _ANY_SUBJECT)
