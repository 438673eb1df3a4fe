"""Waking the requests that wait on a lock (a queued locker, an election observer).

The state machine tells the node which locks an applied entry changed (its lease
hook runs on the apply thread); :meth:`LockWaits.changed` hands the names to the
event loop, where every request waiting on one of them wakes and reads the lock
again. A waiter takes its event *before* it reads the lock, so a change between
the read and the wait wakes it at once. Events exist only while someone waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from contextlib import contextmanager


class LockWaits:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: dict[str, tuple[asyncio.Event, int]] = {}

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def changed(self, names: Iterable[str]) -> None:
        """Any thread: the locks ``names`` changed."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake, tuple(names))

    def _wake(self, names: tuple[str, ...]) -> None:
        for name in names:
            held = self._events.get(name)
            if held is not None:
                held[0].set()
                self._events[name] = (asyncio.Event(), held[1])

    @contextmanager
    def watching(self, name: str) -> Iterator[LockWatch]:
        event, count = self._events.get(name, (None, 0))
        if event is None:
            event = asyncio.Event()
        self._events[name] = (event, count + 1)
        try:
            yield LockWatch(self, name)
        finally:
            event, count = self._events[name]
            if count <= 1:
                del self._events[name]
            else:
                self._events[name] = (event, count - 1)

    def event(self, name: str) -> asyncio.Event:
        return self._events[name][0]


class LockWatch:
    """One waiter's view: :meth:`arm` before reading the lock, then :meth:`wait`."""

    def __init__(self, waits: LockWaits, name: str) -> None:
        self._waits = waits
        self._name = name
        self._event: asyncio.Event | None = None

    def arm(self) -> None:
        self._event = self._waits.event(self._name)

    async def wait(self, timeout: float) -> bool:
        """Whether the lock changed since :meth:`arm` (False: ``timeout`` passed)."""
        event = self._event
        assert event is not None, "arm() before wait()"
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        return True
