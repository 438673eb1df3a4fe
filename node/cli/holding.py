"""What `rkv lease keepalive`, `rkv lock` and `rkv elect` share: commands that hold
something (a lease, a lock, a leadership) until they are stopped.

They stop on Ctrl-C (KeyboardInterrupt) and on SIGTERM or SIGHUP
(:class:`Stopped`, raised in the main thread by :func:`stop_on_signals`), and
show a lock holder or an election's leader as one line (or one JSON object).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from http_api.client import LockHolder

EXIT_LOST = 3
"""What was held (a lease, a lock, a leadership) was lost."""
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(Exception):
    """A signal asked the command to stop (SIGTERM, SIGHUP); ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Stopped` in the main thread."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signum)

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def holder_json(name: str, holder: LockHolder | None) -> dict[str, Any]:
    if holder is None:
        return {"name": name, "leader": None}
    return {
        "name": holder.name,
        "value": holder.value,
        "token": holder.token,
        "lease": holder.lease_id,
        "since_ms": holder.since_ms,
    }


def leader_line(name: str, holder: LockHolder | None) -> str:
    """``leader NAME: VALUE (token T, lease L)``, or ``no leader of NAME``."""
    if holder is None:
        return f"no leader of {name}"
    return f"leader {holder.name}: {holder.value} (token {holder.token}, lease {holder.lease_id})"
