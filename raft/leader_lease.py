"""Check-quorum and the leader's lease: what a leader knows of its own leadership.

The leader numbers every append_entries it sends (``rkv_sent``) and notes when it
sent it; a follower echoes the number of the message it answers. The send time of
the newest message a member answered is when that member last heard this leader,
for sure. Sorting those times (the leader's own is now) the majority-th newest,
``confirmed``, is a moment at which a majority still followed this leader.

- **Lease.** A follower starts no election (and, with pre-vote, grants no
  pre-vote) until the minimum election timeout has passed since it last heard a
  leader. So until ``confirmed + min_timeout`` no other leader can have been
  elected, and this leader may serve ``consistency=leader`` reads from its own
  state. Outside its lease (just elected, a majority silent, or a transfer under
  way) such a read takes the linearizable path instead of answering stale.
- **Check-quorum.** A leader whose ``confirmed`` is older than ``step_down_after``
  (the maximum election timeout by default) steps down: a leader cut off from the
  majority stops acting as one within an election timeout, instead of pysyncobj's
  fixed fallback timeout.

A transfer of leadership (``timeout_now``) lets its target campaign at once, without
waiting for a timeout: the lease ends when the leader sends it.

Clocks: one monotonic clock on each machine; the lease assumes the members'
clocks advance at about the same rate over a second (no wall-clock agreement).

Everything here runs on the raft thread.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Hashable
from typing import Any

SENT = "rkv_sent"
_KEPT = 4096
"""Send times remembered (the newest); an answer to an older message counts as none."""


class LeaderLease:
    def __init__(
        self,
        *,
        min_timeout: float,
        step_down_after: float,
        clock: Callable[[], float],
    ) -> None:
        self._min_timeout = min_timeout
        self._step_down_after = step_down_after
        self._clock = clock
        self._next = 1
        self._sent: deque[tuple[int, float]] = deque(maxlen=_KEPT)
        self._heard: dict[Hashable, float] = {}
        self._since = clock()
        self._revoked = False
        self.until = -float("inf")
        """Until when (on ``clock``) this leader may serve reads from its own state; read
        from any thread (one float, replaced whole)."""
        self.step_downs = 0

    def stamp(self) -> int:
        """The number of an append_entries sent now."""
        number = self._next
        self._next += 1
        self._sent.append((number, self._clock()))
        return number

    @property
    def step_down_after(self) -> float:
        return self._step_down_after

    def on_answer(
        self, node: Hashable, message: dict[str, Any], voters: Collection[Hashable]
    ) -> None:
        """A member answered an append_entries; the lease runs on from what it says."""
        number = message.get(SENT)
        if not isinstance(number, int):
            return
        sent = self._sent_at(number)
        if sent is not None and sent > self._heard.get(node, -float("inf")):
            self._heard[node] = sent
            if not self._revoked:
                self.until = self.confirmed(voters) + self._min_timeout

    def lost(self, node: Hashable, voters: Collection[Hashable]) -> None:
        """The connection to ``node`` closed: it may campaign at once (pre-vote lets a
        member whose leader's connection closed ask without waiting), so what it
        answered no longer extends the lease."""
        if self._heard.pop(node, None) is not None and not self._revoked:
            self.until = min(self.until, self.confirmed(voters) + self._min_timeout)

    def became_leader(self) -> None:
        self._heard.clear()
        self._since = self._clock()
        self._revoked = False
        self.until = -float("inf")

    def resumed(self) -> None:
        """The leader's raft thread was held and sent nothing meanwhile: the
        step-down deadline counts from now (the lease itself is unchanged: it runs
        from what was answered)."""
        self._since = self._clock()

    def revoke(self) -> None:
        """A transfer is under way: no more lease reads until the next leadership."""
        self._revoked = True
        self.until = -float("inf")

    def confirmed(self, voters: Collection[Hashable]) -> float:
        """The newest moment at which a majority (this leader included) followed it."""
        times = sorted((self._heard.get(node, -float("inf")) for node in voters), reverse=True)
        needed = (len(voters) + 1) // 2  # others needed besides this leader
        if needed == 0:
            return self._clock()
        return times[needed - 1]

    def holds(self) -> bool:
        """Whether this leader may answer a read from its own state now."""
        return self._clock() < self.until

    def must_step_down(self, voters: Collection[Hashable]) -> bool:
        """A majority has not answered anything sent in the last ``step_down_after``."""
        last = max(self.confirmed(voters), self._since)
        return self._clock() > last + self._step_down_after

    def _sent_at(self, number: int) -> float | None:
        sent = self._sent
        if not sent or number < sent[0][0] or number > sent[-1][0]:
            return None
        # Numbers are consecutive: the entry's position follows from the first one.
        found_number, at = sent[number - sent[0][0]]
        return at if found_number == number else None
