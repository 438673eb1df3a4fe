"""Memory cgroups for node processes: a byte limit, and whether the kernel's OOM killer
fired inside it.

cgroup v1 (``/sys/fs/cgroup/memory/<name>``: ``memory.limit_in_bytes``, the
``oom_kill`` line of ``memory.oom_control``) or v2 (``/sys/fs/cgroup/<name>``:
``memory.max``, the ``oom_kill`` line of ``memory.events``), whichever has the
memory controller and is writable here (root). A group counts a process's
anonymous memory and the page cache it brings in; the kernel reclaims clean cache
before it kills, so a node whose own memory stays under the limit survives data
far larger than it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from pathlib import Path

V1_ROOT = Path("/sys/fs/cgroup/memory")
V2_ROOT = Path("/sys/fs/cgroup")


def unavailable() -> str | None:
    """Why no memory cgroup can be made here; None when one can."""
    if os.geteuid() != 0:
        return "memory cgroups need root"
    if (V1_ROOT / "memory.limit_in_bytes").exists():
        return None if os.access(V1_ROOT, os.W_OK) else f"{V1_ROOT} is not writable"
    controllers = V2_ROOT / "cgroup.controllers"
    if controllers.exists() and "memory" in controllers.read_text().split():
        return None if os.access(V2_ROOT, os.W_OK) else f"{V2_ROOT} is not writable"
    return "no cgroup hierarchy with the memory controller is mounted"


class MemoryCgroup:
    """One group with a memory limit; a command started with :meth:`wrap` runs in it
    from its first instruction (a shell moves itself in, then execs it)."""

    def __init__(self, name: str, limit_bytes: int) -> None:
        self.v1 = (V1_ROOT / "memory.limit_in_bytes").exists()
        self.path = (V1_ROOT if self.v1 else V2_ROOT) / name
        self.limit_bytes = limit_bytes
        self.path.mkdir(exist_ok=True)
        if self.v1:
            (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))
            with contextlib.suppress(OSError):  # absent without swap accounting
                (self.path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
        else:
            (self.path / "memory.max").write_text(str(limit_bytes))
            with contextlib.suppress(OSError):
                (self.path / "memory.swap.max").write_text("0")

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the group (the same PID: the shell execs it)."""
        procs = shlex.quote(str(self.path / "cgroup.procs"))
        return ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *argv]

    def _lines(self, name: str) -> dict[str, int]:
        found: dict[str, int] = {}
        for line in (self.path / name).read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                found[parts[0]] = int(parts[1])
        return found

    def oom_kills(self) -> int:
        """How many processes the OOM killer ended in this group."""
        if self.v1:
            return self._lines("memory.oom_control").get("oom_kill", 0)
        return self._lines("memory.events").get("oom_kill", 0)

    def usage_bytes(self) -> int:
        """Everything charged now: anonymous memory and page cache."""
        name = "memory.usage_in_bytes" if self.v1 else "memory.current"
        return int((self.path / name).read_text())

    def peak_bytes(self) -> int:
        """The most ever charged (anonymous memory and page cache)."""
        name = "memory.max_usage_in_bytes" if self.v1 else "memory.peak"
        try:
            return int((self.path / name).read_text())
        except OSError:
            return self.usage_bytes()

    def anon_bytes(self) -> int:
        """Anonymous memory now (what cannot be reclaimed without swap)."""
        stat = self._lines("memory.stat")
        return stat.get("rss", 0) if self.v1 else stat.get("anon", 0)

    def remove(self, timeout: float = 10.0) -> None:
        """Delete the group once its processes are gone (they are not killed here)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
