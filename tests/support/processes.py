"""Process helpers shared by the test tiers."""

from __future__ import annotations

import os
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (a zombie counts until it is reaped)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def memory_bytes(pid: int, field: str = "VmRSS") -> int:
    """A field of /proc/PID/status in bytes: ``VmRSS`` (resident now) or ``VmHWM`` (the
    peak so far). LookupError if the process has no such line (a zombie)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise LookupError(f"no {field} for pid {pid}")
