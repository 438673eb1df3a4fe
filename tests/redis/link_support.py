"""Support for the master link tests: a real redis-server, a hostile one, RDB checks.

:class:`RedisMaster` runs ``/usr/bin/redis-server`` on 127.0.0.1 on a free
port with persistence off, in its own directory, and stops it by PID
(SIGTERM, then SIGKILL after 5 s). A missing redis-server fails the test with
a clear message: these tests are never skipped.

:class:`FakeMaster` is the hostile master: it speaks the master's side of the
handshake over a loopback socket, answers PSYNC with ``+FULLRESYNC`` and the
RDB payload it was given, and then sends whatever the test tells it to (what
a real Redis would never send is exactly what is under test).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import hiredis
import pytest

from tests.redis.resp_client import RespClient
from tests.support.processes import memory_bytes

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


class FakeMaster:
    """A Redis master played by the test, on 127.0.0.1 (see the module docstring).

    Every connection gets the handshake's answers (``+OK`` to AUTH and REPLCONF,
    ``+PONG`` to PING; AUTH passwords are kept in :attr:`passwords`), then
    ``+FULLRESYNC <replid> <offset>`` and ``$<len>\\r\\n<rdb>``. The latest
    connection is :attr:`conn`; :meth:`send` and :meth:`send_forever` write to it
    while a thread drains what the replica sends (its ACKs).
    """

    def __init__(self, rdb: bytes, replid: str = "f" * 40, offset: int = 0) -> None:
        self.rdb = rdb
        self.replid = replid
        self.offset = offset
        self.passwords: list[bytes] = []
        self.synced = threading.Event()
        self.stop = threading.Event()
        self.conn: socket.socket | None = None
        self.sent = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        reader = hiredis.Reader()
        with contextlib.suppress(OSError):
            while data := conn.recv(65536):
                reader.feed(data)
                while (command := reader.gets()) is not False:
                    self._answer(conn, command)
        conn.close()

    def _answer(self, conn: socket.socket, command: list[bytes]) -> None:
        name = command[0].upper()
        if name == b"PSYNC":
            conn.sendall(b"+FULLRESYNC %s %d\r\n" % (self.replid.encode(), self.offset))
            conn.sendall(b"$%d\r\n" % len(self.rdb) + self.rdb)
            self.conn = conn
            self.synced.set()
        elif name == b"AUTH":
            self.passwords.append(command[-1])
            conn.sendall(b"+OK\r\n")
        elif name == b"PING":
            conn.sendall(b"+PONG\r\n")
        elif name == b"REPLCONF" and command[1].upper() != b"ACK":
            conn.sendall(b"+OK\r\n")

    def send(self, data: bytes) -> None:
        """Send ``data`` on the replica's connection (after its PSYNC)."""
        assert self.synced.wait(30), "no replica synced"
        assert self.conn is not None
        self.conn.sendall(data)
        self.sent += len(data)

    def send_forever(self, chunk: bytes, most: int) -> None:
        """Send ``chunk`` again and again until the replica hangs up, :attr:`stop`
        is set or ``most`` bytes were sent (a thread's job)."""
        with contextlib.suppress(OSError):
            while not self.stop.is_set() and self.sent < most:
                self.send(chunk)

    def close(self) -> None:
        self.stop.set()
        self._server.close()
        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> FakeMaster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class PeakRss:
    """Samples a process's peak resident memory (VmHWM) until it exits."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def read(self) -> int:
        """The peak so far, in bytes (the last value read once the process is gone)."""
        with contextlib.suppress(OSError, LookupError):
            self.peak = memory_bytes(self.pid, "VmHWM")
        return self.peak

    def _sample(self) -> None:
        while not self._done.wait(0.02):
            self.read()

    def stop(self) -> int:
        self._done.set()
        self._thread.join(5)
        return self.peak
