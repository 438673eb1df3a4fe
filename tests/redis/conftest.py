"""Fixtures that run a real ``redis-server`` (the Debian package) for tests.

- :func:`redis_server`: one server per test, its ``--dir`` in ``tmp_path``.
- :func:`redis_server_factory`: starts servers on demand for a whole test
  module (for module-scoped fixtures that build a dataset once); all of them
  are stopped when the module ends.
- :func:`run_redis_server`: the context manager both use.
- :func:`cluster`: a 3-node rkv cluster for the replicator's end-to-end tests,
  its nodes at ``--max-txn-ops 1024`` (:data:`NODE_MAX_TXN_OPS`, a limit well
  below the state machine's 10,000, which the replicator must batch within).

Each server listens on 127.0.0.1 on a free port with persistence off
(``--save '' --appendonly no``; ``SAVE`` still writes ``<dir>/dump.rdb``) and
``DEBUG`` allowed from local connections. It is stopped by PID: SIGTERM, then
SIGKILL if it is still running 5 s later. The server binary is
``$RKV_REDIS_SERVER`` or ``redis-server`` on the PATH or /usr/bin/redis-server;
if there is none the fixture FAILS (the test set-up installs the package: a
missing server is a broken set-up, not a reason to skip).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.redis.resp_client import RespClient, RespError
from tests.support.cluster import LocalCluster

START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
NODE_MAX_TXN_OPS = 1024


class RedisServer(NamedTuple):
    """A running server: where it listens and its data directory."""

    host: str
    port: int
    dir: Path

    def client(self, timeout: float = 30.0) -> RespClient:
        """A new connection (close it, or use it in a ``with``)."""
        return RespClient(self.host, self.port, timeout=timeout)


def redis_server_binary() -> str:
    """The redis-server to run; fails the test when there is none."""
    return debian_binary("redis-server", "RKV_REDIS_SERVER")


def debian_binary(name: str, variable: str) -> str:
    """``$variable``, else ``name`` on the PATH, else /usr/bin/``name`` (the Debian
    package of that name); fails the test when there is none (the test set-up
    installs it: a missing binary is a broken set-up, not a reason to skip)."""
    candidate = os.environ.get(variable) or shutil.which(name) or f"/usr/bin/{name}"
    if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
        pytest.fail(
            f"{name} not found (looked at ${variable}, the PATH and {candidate}): "
            f"install the Debian package {name} (apt-get install {name})",
            pytrace=False,
        )
    return candidate


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _answers_ping(port: int) -> bool:
    try:
        with RespClient("127.0.0.1", port, timeout=1.0) as client:
            return bool(client.execute("PING") == "PONG")
    except (OSError, ConnectionError):
        return False
    except RespError as error:  # -NOAUTH: up, with --requirepass; -LOADING: not yet
        return str(error).startswith("NOAUTH")
    except Exception:
        return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=STOP_TIMEOUT)


@contextmanager
def run_redis_server(directory: Path, *extra_args: str) -> Iterator[RedisServer]:
    """Run a redis-server with ``--dir directory`` (plus ``extra_args``, e.g.
    ``"--rdbcompression", "no"``) until the block exits."""
    binary = redis_server_binary()
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "redis.log"
    for _attempt in range(3):  # a free port may be taken before the server binds it
        port = free_port()
        command = [
            binary,
            "--bind", "127.0.0.1",
            "--port", str(port),
            "--save", "",
            "--appendonly", "no",
            "--dir", str(directory),
            "--dbfilename", "dump.rdb",
            "--daemonize", "no",
            "--logfile", str(log),
            "--enable-debug-command", "local",
            *extra_args,
        ]  # fmt: skip
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + START_TIMEOUT
        while process.poll() is None and time.monotonic() < deadline:
            if _answers_ping(port):
                break
            time.sleep(0.05)
        if process.poll() is None and _answers_ping(port):
            try:
                yield RedisServer("127.0.0.1", port, directory)
            finally:
                _stop(process)
                if process.stderr is not None:
                    process.stderr.close()
            return
        _stop(process)
        stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
        logged = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        if "Address already in use" not in logged + stderr:
            pytest.fail(
                f"redis-server did not answer PING within {START_TIMEOUT} s: "
                f"{' '.join(command)}\nstderr: {stderr}\nlog: {logged}",
                pytrace=False,
            )
    pytest.fail("redis-server could not get a free port in 3 attempts", pytrace=False)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A fresh redis-server for this test, data directory ``tmp_path``."""
    with run_redis_server(tmp_path) as server:
        yield server


@pytest.fixture(scope="module")
def redis_server_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., RedisServer]]:
    """``start(*extra_args) -> RedisServer``: servers that live until the end
    of the test module, each in its own new directory."""
    with ExitStack() as stack:

        def start(*extra_args: str) -> RedisServer:
            directory = tmp_path_factory.mktemp("redis")
            return stack.enter_context(run_redis_server(directory, *extra_args))

        yield start


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A running 3-node rkv cluster whose nodes take NODE_MAX_TXN_OPS ops per transaction."""
    running = LocalCluster(tmp_path / "rkv", extra_args=["--max-txn-ops", str(NODE_MAX_TXN_OPS)])
    try:
        running.start(60)
        yield running
    finally:
        running.stop()
