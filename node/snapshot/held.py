"""Snapshot views held open for a while after their transfer was cut.

A member downloading another's state (a rebuild) may lose the connection half-way.
Rather than start over, it asks for the rest: the keys after the last one it
received, from the same LMDB read view, so the two parts together are still the
state at exactly one applied index. The source therefore keeps the view of a cut
transfer, under the transfer's id, for ``hold_seconds`` (at most ``max_held`` of
them; the oldest goes first). A held view pins the LMDB pages it sees, so it is
closed at once when a map resize or a state install asks every reader to let go
(its ``interrupted`` event), when it expires, and when the node stops.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import NamedTuple

from node.snapshot.format import SnapshotHeader
from node.storage.lmdb_store import DetachedView

logger = logging.getLogger(__name__)

DEFAULT_HOLD_SECONDS = 60.0


class Held(NamedTuple):
    view: DetachedView
    header: SnapshotHeader
    expires: float


class HeldViews:
    def __init__(self, hold_seconds: float, max_held: int = 2) -> None:
        self.hold_seconds = hold_seconds
        self.max_held = max_held
        self._lock = threading.Lock()
        self._held: dict[str, Held] = {}
        self._closing = False

    def hold(self, transfer_id: str, view: DetachedView, header: SnapshotHeader) -> None:
        """Keep ``view`` (now owned here) for a resume of ``transfer_id``."""
        held = Held(view, header, time.monotonic() + self.hold_seconds)
        with self._lock:
            if self._closing:
                view.close()
                return
            while len(self._held) >= self.max_held:
                oldest = self._held.pop(next(iter(self._held)))  # insertion order
                oldest.view.close()
            self._held[transfer_id] = held
        threading.Thread(
            target=self._watch, args=(transfer_id, held), name="rkv-held-view", daemon=True
        ).start()
        logger.info("holding the view of cut transfer %s for %.0fs", transfer_id, self.hold_seconds)

    def take(self, transfer_id: str) -> Held | None:
        """The held view of ``transfer_id`` (the caller then owns it), if still held."""
        with self._lock:
            held = self._held.pop(transfer_id, None)
        if held is not None and held.view.interrupted.is_set():
            held.view.close()
            return None
        return held

    def close_all(self) -> None:
        with self._lock:
            self._closing = True
            held, self._held = list(self._held.values()), {}
        for item in held:
            item.view.close()

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def _watch(self, transfer_id: str, held: Held) -> None:
        held.view.interrupted.wait(max(0.0, held.expires - time.monotonic()))
        with self._lock:
            if self._held.get(transfer_id) is not held:
                return  # taken by a resume, or closed already
            del self._held[transfer_id]
        held.view.close()
        logger.info("the view of cut transfer %s was let go", transfer_id)
