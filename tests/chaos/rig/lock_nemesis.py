"""Nemeses on the lock clients (lock_workload.py): the holder paused past its TTL,
the holder killed.

- ``pause_client``: SIGSTOP the client holding the lock (any client when nobody
  holds it) for at least its lease's TTL + 2.5 s, so the lease expires and the
  lock passes on; before SIGCONT the lock is observed, so the checker knows the
  token was lost. The resumed client goes on writing with its old token: every
  such write must be refused (409 fenced).
- ``kill_client``: SIGKILL the holder (or any client) and start a new
  incarnation of it; the lock is released when the dead client's lease expires.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from tests.chaos.rig.lock_workload import LockWorkload

PAUSE_BEYOND_TTL = 2.5


def _target(locks: LockWorkload, rng: random.Random) -> tuple[int, str]:
    holder = locks.holder()
    if holder is not None:
        return holder, " (the holder)"
    return rng.randrange(len(locks.clients)), ""


@dataclass
class PauseClient:
    locks: LockWorkload
    name: str = "pause_client"
    lasting: bool = True
    _paused: int | None = None
    _since: float = 0.0

    def inject(self, rng: random.Random) -> str:
        index, role = _target(self.locks, rng)
        client = self.locks.pause(index)
        self._paused, self._since = index, time.monotonic()
        return f"SIGSTOP lock client {client}{role}"

    def heal(self) -> None:
        if self._paused is None:
            return
        time.sleep(max(0.0, self._since + self.locks.ttl + PAUSE_BEYOND_TTL - time.monotonic()))
        self.locks.observe()
        self.locks.resume(self._paused)
        self._paused = None


@dataclass
class KillClient:
    locks: LockWorkload
    name: str = "kill_client"
    lasting: bool = False

    def inject(self, rng: random.Random) -> str:
        index, role = _target(self.locks, rng)
        killed, started = self.locks.kill_and_restart(index)
        return f"kill -9 lock client {killed}{role}, restarted as {started}"

    def heal(self) -> None:
        return None
