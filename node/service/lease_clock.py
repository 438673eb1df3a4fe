"""Each lease's deadline on this node's own monotonic clock (docs/LEASES.md).

Every node keeps one, fed by the state machine's lease hook on the apply thread
(:meth:`LeaseClock.on_applied`): a lease granted or renewed is due ``ttl`` after
this node applied that entry; a lease it did not see renewed (at start-up, after
a state install) is due ``ttl`` after it loaded it. Deadlines are never
replicated nor compared between machines. Only the leader acts on its clock:
it asks :meth:`due` for the leases whose deadline passed and proposes their
expiry, naming the version of each lease's record it saw, so a keepalive applied
in between voids that expiry on every replica alike.

A node that becomes leader first :meth:`promote`\\ s its clock: every deadline
moves to at least one election timeout from now, so no lease expires while its
clients find the new leader. Until then it proposes no expiry.

Memory is bounded by the leases the cluster holds (``--max-leases``): one entry
per lease, a heap of at most a few entries per lease (rebuilt when renewals
pile up stale entries), and the ids of the last :data:`ENDED_REMEMBERED` ended
leases (for the ``lease_expired`` answer).
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import NamedTuple

from node.state.entry_writer import LeaseEvents

ENDED_REMEMBERED = 65_536
RETRY_SECONDS = 1.0
"""How long an expiry proposed for a lease is awaited before it is proposed again."""


class Deadline(NamedTuple):
    at: float
    ttl_ms: int
    version: int


class LeaseClock:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._deadlines: dict[int, Deadline] = {}
        self._heap: list[tuple[float, int, int]] = []  # (when to look, id, version)
        self._proposed: dict[int, float] = {}
        self._ended: OrderedDict[int, None] = OrderedDict()
        self._promoted = False

    def __len__(self) -> int:
        return len(self._deadlines)

    # -- fed by the state machine (apply thread) and the composition root --------

    def load(self, leases: Iterable[tuple[int, int, int]]) -> None:
        """Start over from the state's leases (lease id, ttl ms, record version):
        each due a full TTL from now."""
        now = self._clock()
        with self._lock:
            self._deadlines = {
                lease_id: Deadline(now + ttl_ms / 1000, ttl_ms, version)
                for lease_id, ttl_ms, version in leases
            }
            self._proposed.clear()
            self._rebuild()

    def on_applied(self, events: LeaseEvents) -> None:
        now = self._clock()
        with self._lock:
            for lease_id, ttl_ms, version in events.renewed:
                deadline = Deadline(now + ttl_ms / 1000, ttl_ms, version)
                self._deadlines[lease_id] = deadline
                self._proposed.pop(lease_id, None)
                heapq.heappush(self._heap, (deadline.at, lease_id, version))
            for lease_id in events.ended:
                self._deadlines.pop(lease_id, None)
                self._proposed.pop(lease_id, None)
                self._ended[lease_id] = None
                if len(self._ended) > ENDED_REMEMBERED:
                    self._ended.popitem(last=False)
            if len(self._heap) > 4 * len(self._deadlines) + 1024:
                self._rebuild()

    def promote(self, extension: float) -> None:
        """This node now leads: no deadline sooner than ``extension`` seconds from now,
        and every one at least ``extension`` later than it was; expiries may start."""
        now = self._clock()
        with self._lock:
            self._deadlines = {
                lease_id: d._replace(at=max(d.at, now) + extension)
                for lease_id, d in self._deadlines.items()
            }
            self._proposed.clear()
            self._rebuild()
            self._promoted = True

    def demote(self) -> None:
        with self._lock:
            self._promoted = False

    # -- read by the leader's sweep and the service ---------------------------------

    @property
    def promoted(self) -> bool:
        return self._promoted

    def due(self, limit: int) -> list[tuple[int, int]]:
        """Up to ``limit`` leases (id, record version) whose deadline has passed and
        whose expiry was not proposed in the last :data:`RETRY_SECONDS`."""
        now = self._clock()
        found: list[tuple[int, int]] = []
        with self._lock:
            if not self._promoted:
                return found
            heap = self._heap
            while heap and heap[0][0] <= now and len(found) < limit:
                _, lease_id, version = heapq.heappop(heap)
                deadline = self._deadlines.get(lease_id)
                if deadline is None or deadline.version != version:
                    continue  # ended, or renewed since: a newer entry is in the heap
                if deadline.at > now:  # extended since this entry was pushed
                    heapq.heappush(heap, (deadline.at, lease_id, version))
                    continue
                proposed = self._proposed.get(lease_id)
                if proposed is not None and now - proposed < RETRY_SECONDS:
                    heapq.heappush(heap, (proposed + RETRY_SECONDS, lease_id, version))
                    continue
                self._proposed[lease_id] = now
                heapq.heappush(heap, (now + RETRY_SECONDS, lease_id, version))
                found.append((lease_id, version))
        return found

    def retry_soon(self, lease_ids: Iterable[int]) -> None:
        """An expiry proposed for these was cut short (the entry's budget): look again
        at the next sweep instead of after :data:`RETRY_SECONDS`."""
        now = self._clock()
        with self._lock:
            for lease_id in lease_ids:
                deadline = self._deadlines.get(lease_id)
                if deadline is not None and self._proposed.pop(lease_id, None) is not None:
                    heapq.heappush(self._heap, (now, lease_id, deadline.version))

    def remaining(self, lease_id: int) -> float | None:
        """Seconds before this node would consider the lease expired (0 if past), or
        None for a lease it does not know."""
        deadline = self._deadlines.get(lease_id)
        return None if deadline is None else max(0.0, deadline.at - self._clock())

    def recently_ended(self, lease_id: int) -> bool:
        return lease_id in self._ended

    def _rebuild(self) -> None:
        self._heap = [(d.at, lease_id, d.version) for lease_id, d in self._deadlines.items()]
        heapq.heapify(self._heap)
