"""Support for the master link tests: a real redis-server and RDB checks.

:class:`RedisMaster` runs ``/usr/bin/redis-server`` on 127.0.0.1 on a free
port with persistence off, in its own directory, and stops it by PID
(SIGTERM, then SIGKILL after 5 s). A missing redis-server fails the test with
a clear message: these tests are never skipped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.redis.resp_client import RespClient

REDIS_SERVER = "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisMaster:
    """A redis-server process for one test."""

    def __init__(self, directory: Path, *extra: str) -> None:
        server = REDIS_SERVER if os.path.exists(REDIS_SERVER) else shutil.which("redis-server")
        if server is None:
            pytest.fail(
                f"redis-server is required by the Redis replication tests and is not installed"
                f" (looked for {REDIS_SERVER} and on PATH): apt-get install redis-server"
            )
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.password: str | None = None
        args = [
            server,
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.dir),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--logfile", str(self.dir / "redis.log"),
            # No PINGs in the stream unless a test asks for them: exact sequences.
            "--repl-ping-replica-period", "3600",
            "--repl-diskless-sync", "no",
            # Stop at once on SIGTERM, without waiting for lagging replicas.
            "--shutdown-on-sigterm", "nosave now",
            *extra,
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with RespClient("127.0.0.1", self.port, timeout=2) as client:
                    if client.execute("PING") == "PONG":
                        return
            except OSError:
                time.sleep(0.02)
        self.stop()
        log = self.dir / "redis.log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        pytest.fail(f"redis-server on port {self.port} did not start:\n{tail}")

    def client(self) -> RespClient:
        client = RespClient("127.0.0.1", self.port, timeout=30)
        if self.password is not None:
            client.execute("AUTH", self.password)
        return client

    def url(self, login: str = "") -> str:
        return f"redis://{login}127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGCONT)  # in case a test stopped it
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()


def info(client: RespClient, section: str = "replication") -> dict[str, str]:
    text = client.execute("INFO", section)
    assert isinstance(text, bytes)
    fields: dict[str, str] = {}
    for line in text.decode().splitlines():
        if ":" in line and not line.startswith("#"):
            key, _, value = line.partition(":")
            fields[key] = value
    return fields


def replicas(client: RespClient) -> list[dict[str, str]]:
    """The master's replicas as INFO lists them (ip, port, state, offset, lag)."""
    found = []
    for key, value in info(client).items():
        if key.startswith("slave") and key[5:].isdigit():
            found.append(dict(part.split("=", 1) for part in value.split(",")))
    return found


def master_offset(client: RespClient) -> int:
    return int(info(client)["master_repl_offset"])


def stable_master_offset(client: RespClient, quiet: float = 0.3) -> int:
    """master_repl_offset once it has not moved for ``quiet`` seconds."""
    offset = master_offset(client)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = master_offset(client)
        if now == offset:
            return offset
        offset = now
    raise AssertionError("the master's replication offset never settled")


def wait_for(condition: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        time.sleep(0.02)


def _crc64_table() -> list[int]:
    # CRC-64/Jones as Redis uses it: reflected, polynomial 0xad93d23594c935a9
    # (0x95ac9329ac4bc9b5 bit-reversed), initial value 0, no final xor.
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x95AC9329AC4BC9B5 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC64 = _crc64_table()


def crc64(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc = _CRC64[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc


assert crc64(b"123456789") == 0xE9C6D914C4B8D9CA  # Redis's crc64 self-test value


def check_rdb(payload: bytes) -> None:
    """A complete RDB file: magic, version, EOF opcode and a valid checksum."""
    assert payload[:5] == b"REDIS" and payload[5:9].isdigit(), payload[:16]
    assert len(payload) > 18
    assert payload[-9] == 0xFF, "no EOF opcode before the checksum"
    assert int.from_bytes(payload[-8:], "little") == crc64(payload[:-8]), "bad RDB checksum"
