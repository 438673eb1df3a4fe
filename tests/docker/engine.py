"""A private Docker engine for the container tier (docs/DOCKER.md).

``start_engine`` runs ``dockerd`` with its own data root, exec root, pidfile
and socket under the cache directory (``$RKV_DOCKER_CACHE``, default
/var/cache/rkv-docker-test), so images and build layers survive between runs
and nothing is shared with a system engine. It raises ``EngineUnavailable``
with the reason when no engine can be started (not root, no dockerd, or
dockerd dies or never answers); the caller skips the tier with that reason.
``Engine.stop`` stops it by PID (SIGTERM, then SIGKILL with its containerd).

Flags: ``--bridge none`` keeps the engine off the host's default ``docker0``
bridge (builds use ``--network host``; compose creates its own networks). If
the engine does not come up with the default storage driver (overlay2), it is
tried again with ``vfs``, then also without iptables.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import pid_alive

DEFAULT_CACHE = Path("/var/cache/rkv-docker-test")
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
FALLBACK_FLAGS: tuple[tuple[str, ...], ...] = (
    (),
    ("--storage-driver", "vfs"),
    ("--storage-driver", "vfs", "--iptables=false", "--ip-masq=false"),
)


class EngineUnavailable(Exception):
    """No Docker engine can be started here; the message says why."""


def cache_dir() -> Path:
    return Path(os.environ.get("RKV_DOCKER_CACHE") or DEFAULT_CACHE)


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for folder in ("/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin"):
        candidate = Path(folder) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _stop_pid(pid: int, timeout: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.2)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class Engine:
    """A running dockerd of ours and the ``docker`` client pointed at it."""

    root: Path
    docker_binary: str
    process: subprocess.Popen[bytes] | None = None
    flags: tuple[str, ...] = ()

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def pidfile(self) -> Path:
        return self.root / "dockerd.pid"

    @property
    def log_path(self) -> Path:
        return self.root / "dockerd.log"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": f"unix://{self.socket}"}

    def docker(
        self, *args: str, check: bool = True, timeout: float = 300.0, input: bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``docker ARGS`` against this engine; raise with its output when ``check`` fails."""
        result = subprocess.run(
            [self.docker_binary, *args],
            env=self.env,
            capture_output=True,
            timeout=timeout,
            input=input,
            check=False,
        )
        done = subprocess.CompletedProcess(
            result.args,
            result.returncode,
            result.stdout.decode(errors="replace"),
            result.stderr.decode(errors="replace"),
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"docker {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            )
        return done

    def image_exists(self, name: str) -> bool:
        return self.docker("image", "inspect", name, check=False).returncode == 0

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop dockerd by PID; its containerd too if dockerd had to be killed."""
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        containerd_pid = _read_pid(self.root / "exec" / "containerd" / "containerd.pid")
        if containerd_pid is not None and pid_alive(containerd_pid):
            _stop_pid(containerd_pid, 10)
        self.process = None
        _unmount_under(self.root / "exec")


def _unmount_under(folder: Path) -> None:
    """dockerd leaves its network namespace files (exec/netns/*) mounted: unmount them."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return
    prefix = str(folder) + "/"
    for line in mounts:
        fields = line.split()
        if len(fields) > 1 and fields[1].startswith(prefix):
            subprocess.run(["umount", fields[1]], capture_output=True, check=False, timeout=30)


def _stop_leftover(root: Path) -> None:
    """A dockerd of ours that a crashed run left behind (the caller holds the cache lock)."""
    pid = _read_pid(root / "dockerd.pid")
    if pid is None or not pid_alive(pid):
        return
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return
    if "dockerd" in cmdline and str(root) in cmdline:
        _stop_pid(pid, STOP_TIMEOUT)


def _launch(engine: Engine, dockerd: str, flags: tuple[str, ...]) -> str | None:
    """Start dockerd with ``flags``; None once it answers, else why it did not."""
    root = engine.root
    args = [
        dockerd,
        "--data-root", str(root / "data"),
        "--exec-root", str(root / "exec"),
        "--pidfile", str(engine.pidfile),
        "--host", f"unix://{engine.socket}",
        "--bridge", "none",
        "--log-level", "warn",
        *flags,
    ]  # fmt: skip
    with open(engine.log_path, "wb") as log:
        engine.process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    engine.flags = flags
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if engine.process.poll() is not None:
            engine.process = None
            return f"dockerd {' '.join(flags)} exited: {engine.log_tail()}"
        if engine.docker("version", check=False, timeout=10).returncode == 0:
            return None
        time.sleep(0.5)
    engine.stop()
    return f"dockerd {' '.join(flags)} did not answer in {START_TIMEOUT:.0f} s: {engine.log_tail()}"


def start_engine(root: Path) -> Engine:
    """Start our dockerd under ``root`` or raise EngineUnavailable with the reason."""
    if os.geteuid() != 0:
        raise EngineUnavailable("starting a private dockerd needs root (CI runs as root)")
    dockerd = _binary("dockerd")
    docker = _binary("docker")
    if dockerd is None or docker is None:
        raise EngineUnavailable(
            "dockerd or the docker client is not installed (make system-deps installs docker.io)"
        )
    root.mkdir(parents=True, exist_ok=True)
    _stop_leftover(root)
    engine = Engine(root, docker)
    problems = []
    for flags in FALLBACK_FLAGS:
        problem = _launch(engine, dockerd, flags)
        if problem is None:
            return engine
        problems.append(problem)
    raise EngineUnavailable("no Docker engine could be started: " + " | ".join(problems))
