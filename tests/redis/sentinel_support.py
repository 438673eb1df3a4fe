"""A real Redis Sentinel deployment for tests: a master, a replica and three sentinels.

:func:`run_sentinel_group` starts, on 127.0.0.1 free ports, a master and a
replica (with tests/redis/conftest.py's :func:`run_redis_server`) and three
``redis-sentinel`` processes monitoring the master as :data:`MASTER_NAME` with
a quorum of 2 and short timeouts (down after 1 s, failover timeout 5 s), each
stopped by PID when the block ends. ``password`` protects the master and the
replica (``requirepass`` and ``masterauth``); ``sentinel_password`` the
sentinels (``requirepass``, and ``sentinel sentinel-pass`` for their own talk).

The sentinel binary is ``$RKV_REDIS_SENTINEL`` or ``redis-sentinel`` on the
PATH or /usr/bin/redis-sentinel (the Debian package redis-sentinel, which
``make system-deps`` installs); without it the fixture FAILS.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.redis.conftest import RedisServer, debian_binary, free_port, run_redis_server
from tests.redis.resp_client import RespClient, RespError
from tests.support.cluster import wait_until

MASTER_NAME = "mymaster"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000
START_TIMEOUT = 10.0


def redis_sentinel_binary() -> str:
    return debian_binary("redis-sentinel", "RKV_REDIS_SENTINEL")


@dataclass
class Sentinel:
    port: int
    dir: Path
    process: subprocess.Popen[bytes]
    password: str | None

    def client(self, timeout: float = 10.0) -> RespClient:
        client = RespClient("127.0.0.1", self.port, timeout=timeout)
        if self.password is not None:
            client.execute("AUTH", self.password)
        return client

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(5)


@dataclass
class SentinelGroup:
    """The running deployment; ``servers`` by port, so a test can find the master."""

    sentinels: list[Sentinel]
    servers: dict[int, RedisServer] = field(default_factory=dict)
    password: str | None = None

    def url(self, login: str = "") -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis-sentinel://{login}{hosts}/{MASTER_NAME}"

    def client_of(self, server: RedisServer, timeout: float = 30.0) -> RespClient:
        client = server.client(timeout)
        if self.password is not None:
            client.execute("AUTH", self.password)
        return client

    def master_port(self) -> int:
        """The master's port as a live sentinel names it."""
        for sentinel in self.sentinels:
            if sentinel.process.poll() is not None:
                continue
            try:
                with sentinel.client() as client:
                    reply = client.execute("SENTINEL", "get-master-addr-by-name", MASTER_NAME)
                    return int(reply[1])
            except (OSError, RespError, ConnectionError):
                continue
        raise AssertionError("no sentinel answers")

    def master(self) -> RedisServer:
        return self.servers[self.master_port()]

    def stop_server(self, port: int, sig: int = signal.SIGKILL) -> None:
        """Signal the server at ``port`` by its PID (from ``INFO server``) and wait
        until it no longer answers."""
        with self.client_of(self.servers[port], 5) as client:
            text = client.execute("INFO", "server").decode()
        pid = int(next(line for line in text.splitlines() if line.startswith("process_id:"))[11:])
        os.kill(pid, sig)

        def gone() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return True
            return False

        wait_until(gone, 10, f"the server at {port} to stop")

    def replicas(self) -> list[list[bytes]]:
        """``SENTINEL REPLICAS`` of the first sentinel, as flat field/value lists."""
        with self.sentinels[0].client() as client:
            found: list[list[bytes]] = client.execute("SENTINEL", "REPLICAS", MASTER_NAME)
            return found

    def role(self, server: RedisServer) -> str:
        """ROLE's first word; "" when the connection is closed under it (Sentinel's
        CLIENT KILL TYPE normal on the servers it promotes or demotes)."""
        try:
            with self.client_of(server, 5) as client:
                return bytes(client.execute("ROLE")[0]).decode()
        except (ConnectionError, OSError):
            return ""

    def wait_switched(self, old_port: int, timeout: float = 60.0) -> RedisServer:
        """Wait until every live sentinel names a master other than ``old_port`` and
        that one says it is a master; return it."""

        def switched() -> RedisServer | None:
            ports = set()
            for sentinel in self.sentinels:
                if sentinel.process.poll() is not None:
                    continue
                with sentinel.client() as client:
                    reply = client.execute("SENTINEL", "get-master-addr-by-name", MASTER_NAME)
                    ports.add(int(reply[1]))
            if len(ports) != 1 or old_port in ports:
                return None
            server = self.servers[ports.pop()]
            return server if self.role(server) == "master" else None

        found: RedisServer = wait_until(switched, timeout, "the sentinels' failover", 0.2)
        return found


def _start_sentinel(
    directory: Path, master_port: int, password: str | None, sentinel_password: str | None
) -> Sentinel:
    binary = redis_sentinel_binary()
    directory.mkdir(parents=True, exist_ok=True)
    for _attempt in range(3):
        port = free_port()
        lines = [
            f"port {port}",
            "bind 127.0.0.1",
            "daemonize no",
            f"dir {directory}",
            f"logfile {directory / 'sentinel.log'}",
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2",
            f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}",
            f"sentinel parallel-syncs {MASTER_NAME} 1",
        ]
        if password is not None:
            lines.append(f"sentinel auth-pass {MASTER_NAME} {password}")
        if sentinel_password is not None:
            lines += [
                f"requirepass {sentinel_password}",
                f"sentinel sentinel-pass {sentinel_password}",
            ]
        config = directory / "sentinel.conf"
        config.write_text("\n".join(lines) + "\n")
        process = subprocess.Popen(
            [binary, str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        sentinel = Sentinel(port, directory, process, sentinel_password)
        deadline = time.monotonic() + START_TIMEOUT
        while process.poll() is None and time.monotonic() < deadline:
            try:
                with sentinel.client(1.0) as client:
                    if client.execute("PING") == "PONG":
                        return sentinel
            except (OSError, RespError, ConnectionError):
                time.sleep(0.05)
        sentinel.stop()
    pytest.fail(f"redis-sentinel did not start (see {directory}/sentinel.log)", pytrace=False)


@contextmanager
def run_sentinel_group(
    directory: Path, password: str | None = None, sentinel_password: str | None = None
) -> Iterator[SentinelGroup]:
    """A master, a replica in sync with it, and three sentinels that see both."""
    auth = () if password is None else ("--requirepass", password, "--masterauth", password)
    with ExitStack() as stack:
        master = stack.enter_context(run_redis_server(directory / "master", *auth))
        replica = stack.enter_context(
            run_redis_server(
                directory / "replica", *auth, "--replicaof", "127.0.0.1", str(master.port)
            )
        )
        group = SentinelGroup([], {master.port: master, replica.port: replica}, password)
        for n in range(3):
            sentinel = _start_sentinel(
                directory / f"sentinel{n}", master.port, password, sentinel_password
            )
            group.sentinels.append(sentinel)
            stack.callback(sentinel.stop)

        def ready() -> bool:
            with group.client_of(replica, 5) as client:
                if b"master_link_status:up" not in client.execute("INFO", "replication"):
                    return False
            for sentinel in group.sentinels:
                with sentinel.client() as client:
                    info = dict(_pairs(client.execute("SENTINEL", "MASTER", MASTER_NAME)))
                    if int(info[b"num-slaves"]) < 1 or int(info[b"num-other-sentinels"]) < 2:
                        return False
            return True

        wait_until(ready, 30, "the replica's link and the sentinels' discovery", 0.2)
        yield group


def _pairs(flat: list[bytes]) -> list[tuple[bytes, bytes]]:
    return list(zip(flat[0::2], flat[1::2], strict=True))


def fields(flat: list[bytes]) -> dict[str, str]:
    """A ``SENTINEL REPLICAS`` entry (a flat field/value list) as a dict of str."""
    return {k.decode(): v.decode() for k, v in _pairs(flat)}
