"""Small helpers shared by the HTTP benchmark: progress, Debian packages, ports, polling."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
LOOPBACK = "127.0.0.1"


class BenchError(Exception):
    """A benchmark step cannot go on; the message says why and what to do."""


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def apt_install(*packages: str) -> bool:
    """Install Debian packages with apt-get (sudo when not root); True if it worked."""
    prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if prefix and shutil.which("sudo") is None:
        progress(f"cannot install {' '.join(packages)}: not root and no sudo")
        return False
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    install = [*prefix, "apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    for attempt in (install, [*prefix, "apt-get", "update", "-q"], install):
        progress(f"running: {' '.join(attempt)}")
        done = subprocess.run(attempt, env=env, stdout=sys.stderr, stderr=sys.stderr, check=False)
        if done.returncode == 0 and attempt is install:
            return True
    return False


def ensure_command(command: str, *packages: str) -> str | None:
    """The path of ``command``, installing ``packages`` with apt-get if it is missing."""
    found = shutil.which(command)
    if found is None:
        progress(f"{command} not found: installing Debian package(s) {', '.join(packages)}")
        apt_install(*packages)
        found = shutil.which(command)
    return found


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on loopback right now."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_port_block(offsets: list[int], first: int = 20_000, last: int = 60_000) -> int:
    """A base port such that base + offset is free for every offset."""
    span = max(offsets) + 1
    candidates: list[int] = [free_ports(1)[0], *range(first, last, span)]
    for base in candidates:
        if base + span < 65_536 and all(port_is_free(base + o) for o in offsets):
            return base
    raise BenchError(f"no base port with free ports at offsets {offsets} on {LOOPBACK}")


def http_request(
    url: str, method: str = "GET", body: Any = None, timeout: float = 2.0
) -> tuple[int, bytes]:
    """(status, body) of one request; JSON-encodes ``body``; (0, b"") if unreachable."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (OSError, ValueError):
        return 0, b""


def http_json(url: str, method: str = "GET", body: Any = None) -> Any:
    """The decoded JSON answer of a 2xx request, or None."""
    status, data = http_request(url, method, body)
    if not 200 <= status < 300:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def wait_until(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    alive: Callable[[], str | None] = lambda: None,
) -> None:
    """Poll ``check`` until true; fail after ``timeout`` s or once ``alive()`` names a problem."""
    progress(f"waiting for {what} (up to {timeout:.0f} s)")
    deadline = time.monotonic() + timeout
    while not check():
        problem = alive()
        if problem is not None:
            raise BenchError(f"while waiting for {what}: {problem}")
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)
    progress(f"ready: {what}")
