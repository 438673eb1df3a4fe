"""``LazyMount``: one lazy filesystem's daemon, started and stopped by PID.

``start()`` mounts BACKING on MOUNTPOINT; ``stop()`` unmounts and keeps
everything (a clean shutdown); ``power_cut()`` unmounts and drops everything
not durable (the caller kills the processes using the mount first: the
kernel then hands their dirty mmap pages to the daemon as ordinary writes
on unmount, which the power cut drops too). ``set_cap(n)`` plays a disk of
n bytes (None: the backing disk's own size).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos.rig.lazyfs import control

REPO = Path(__file__).resolve().parents[4]
MOUNT_TIMEOUT = 15.0


def _is_mounted(path: Path) -> bool:
    target = str(path.resolve())
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1] == target for line in mounts)


@dataclass
class LazyMount:
    backing: Path
    mountpoint: Path
    control_path: Path = field(default=Path())
    log_path: Path = field(default=Path())
    names: str = "strict"
    """When name changes become durable: filesystem.NAME_MODELS."""
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        if self.control_path == Path():
            self.control_path = self.backing.with_name(self.backing.name + ".lazyfs.sock")
        if self.log_path == Path():
            self.log_path = self.backing.with_name(self.backing.name + ".lazyfs.log")

    @property
    def mounted(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> LazyMount:
        if self.mounted:
            return self
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.control_path.unlink(missing_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 (the daemon keeps it)
        argv = [sys.executable, "-m", "tests.chaos.rig.lazyfs.daemon", str(self.backing),
                str(self.mountpoint), "--control", str(self.control_path),
                "--names", self.names]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not (_is_mounted(self.mountpoint) and self.control_path.exists()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._kill()
                raise RuntimeError(
                    f"lazyfs did not mount {self.mountpoint}: "
                    + self.log_path.read_text(errors="replace")[-2000:]
                )
            time.sleep(0.02)
        return self

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        return control.call(str(self.control_path), request)

    def stats(self) -> dict[str, Any]:
        return self.call({"op": "stats"})

    def set_cap(self, cap: int | None) -> None:
        self.call({"op": "cap", "bytes": cap})

    def power_cut(self) -> None:
        """Unmount, dropping everything not durable. Nothing may hold the mount."""
        if self.mounted:
            self.call({"op": "arm_power_cut"})
        self.stop()

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            done = subprocess.run(
                ["fusermount3", "-u", str(self.mountpoint)], capture_output=True, check=False
            )
            if done.returncode != 0 and _is_mounted(self.mountpoint):
                raise RuntimeError(
                    f"cannot unmount {self.mountpoint}: {done.stderr.decode(errors='replace')}"
                )
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._kill()
                raise RuntimeError(f"lazyfs for {self.mountpoint} did not exit") from None
        self.proc = None

    def _kill(self) -> None:
        """Last resort (the daemon hung): kill it by PID and detach the dead mount."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], check=False,
                       capture_output=True)  # fmt: skip
        self.proc = None
