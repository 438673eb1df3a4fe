"""The server processes the benchmark starts, and their stopping by PID whatever happens.

Each process starts in a session of its own (so a Ctrl-C reaches the harness, which then
stops the servers in order) and its output goes to a log file. ``Processes`` is a
context manager: leaving it, normally or by an exception, sends SIGTERM to every PID it
started, SIGKILL after a grace period, and then the same to whatever is left in each
process's own process group (the children of ``rkv up``, say).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from bench.support import progress

GRACE_S = 10.0


@dataclass
class Server:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def exited(self) -> str | None:
        """None while running, else how it ended and the tail of its log."""
        code = self.process.poll()
        if code is None:
            return None
        return f"{self.name} (pid {self.pid}) exited with code {code}; log tail:\n{self.tail()}"

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join("    " + line for line in text.splitlines()[-lines:])


class Processes:
    def __init__(self) -> None:
        self._servers: list[Server] = []

    def start(self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None):
        progress(f"starting {name}: {shlex.join(argv)} (log {log})")
        with log.open("wb") as out:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        server = Server(name, process, log)
        self._servers.append(server)
        progress(f"started {name}: pid {server.pid}")
        return server

    def stop(self, server: Server) -> None:
        if server in self._servers:
            self._servers.remove(server)
        if server.process.poll() is None:
            progress(f"stopping {server.name} (pid {server.pid})")
            _terminate(server.process)
        _sweep_group(server.pid)

    def stop_all(self) -> None:
        for server in reversed(list(self._servers)):
            self.stop(server)

    def __enter__(self) -> Processes:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        with _signals_ignored():
            self.stop_all()


def _terminate(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(GRACE_S)
    except subprocess.TimeoutExpired:
        progress(f"pid {process.pid} ignored SIGTERM for {GRACE_S:.0f} s: SIGKILL")
        process.kill()
        process.wait()


def _sweep_group(pgid: int) -> None:
    """End what is left of the process group a started process led (its children)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        progress(f"sent {sig.name} to leftover children in process group {pgid}")
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


@contextmanager
def _signals_ignored() -> Iterator[None]:
    """A second Ctrl-C (or a SIGTERM) must not cut the clean-up short."""
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = [signal.signal(sig, signal.SIG_IGN) for sig in signals]
    try:
        yield
    finally:
        for sig, handler in zip(signals, previous, strict=True):
            signal.signal(sig, handler)


def interrupt_on_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt, so every ``with Processes()``
    unwinds (also when started in the background, where SIGINT arrives ignored)."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)
