"""What the attacks of bench/limits.py send with: the attacked node (``Target``), a
keep-alive HTTP connection from a chosen source address (``Http``), raw exchanges,
and the short text naming what the node answered ("413 txn_result_too_large").

Client addresses: every address in 127.0.0.0/8 reaches loopback, so an attack binds its
sockets to 127.0.0.2, 127.0.0.3, ... to be several clients (the node caps connections
and watches per address); the well-behaved client keeps 127.0.0.1 to itself.
"""

from __future__ import annotations

import json
import resource
import select
import socket
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.client import HTTPConnection, HTTPException
from typing import Protocol
from urllib.parse import urlsplit

JSON = {"Content-Type": "application/json"}
Headers = dict[str, str] | None


class Flag(Protocol):
    """What an attack needs of a multiprocessing (or threading) Event."""

    def is_set(self) -> bool: ...
    def set(self) -> None: ...
    def wait(self, timeout: float | None = None) -> bool: ...


@dataclass(frozen=True)
class Target:
    """The attacked node and the keys the bench prepared on it."""

    url: str  # http://127.0.0.1:PORT
    raft_address: str  # 127.0.0.1:PORT
    big_key: str  # holds a 64 KiB value
    scan_prefix: str  # 64 keys of 1 MiB values
    watch_prefix: str  # the well-behaved client's keys

    @property
    def address(self) -> tuple[str, int]:
        parts = urlsplit(self.url)
        assert parts.hostname is not None and parts.port is not None
        return parts.hostname, parts.port

    @property
    def raft(self) -> tuple[str, int]:
        host, _, port = self.raft_address.rpartition(":")
        return host, int(port)


def sources(count: int) -> list[str]:
    """``count`` client addresses other than 127.0.0.1: 127.0.0.2, 127.0.0.3, ..."""
    return [f"127.0.{(i + 2) // 256}.{(i + 2) % 256}" for i in range(count)]


def raise_open_files_limit() -> None:
    """Soft open-files limit up to the hard one: a flood holds more than 1024 sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def outcome(status: int, body: bytes) -> str:
    """ "<status> <code>" for a JSON error body, else "<status>"."""
    try:
        code = json.loads(body).get("code")
    except (ValueError, AttributeError):
        code = None
    return f"{status} {code}" if isinstance(code, str) else str(status)


def head_outcome(answer: bytes) -> str:
    """The outcome of a raw HTTP answer (status line, head, maybe a JSON body)."""
    if not answer:
        return "closed without an answer"
    line = answer.split(b"\r\n", 1)[0].split()
    if len(line) < 2 or not line[1].isdigit():
        return f"not HTTP: {answer[:30]!r}"
    return outcome(int(line[1]), answer.partition(b"\r\n\r\n")[2])


def connect(address: tuple[str, int], source: str, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(address, timeout=timeout, source_address=(source, 0))


def read_until_closed(sock: socket.socket, most: int = 1 << 20) -> bytes:
    """What arrives until the peer closes (or ``most`` bytes, or the socket's timeout)."""
    answer = b""
    try:
        while len(answer) < most and (chunk := sock.recv(65536)):
            answer += chunk
    except OSError:
        pass
    return answer


def raw_exchange(target: Target, source: str, data: bytes) -> str:
    """Send ``data`` on a new connection and name the node's answer."""
    try:
        with connect(target.address, source, timeout=10) as sock:
            sock.sendall(data)
            return head_outcome(read_until_closed(sock))
    except OSError as exc:
        return f"socket: {type(exc).__name__}"


def readable(socks: list[socket.socket], timeout: float) -> list[socket.socket]:
    """Those of ``socks`` with something to read (or closed), waiting up to ``timeout`` s
    (poll, not select: a flood's descriptors pass 1024)."""
    if not socks:
        threading.Event().wait(timeout)
        return []
    poller = select.poll()
    by_fd = {}
    for sock in socks:
        poller.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
        by_fd[sock.fileno()] = sock
    return [by_fd[fd] for fd, _ in poller.poll(timeout * 1000)]


class Http:
    """One keep-alive HTTP connection to the target from ``source``, reopened after a
    failure or an answer that closes it."""

    def __init__(self, target: Target, source: str, timeout: float = 30.0) -> None:
        self._address = target.address
        self._source = source
        self._timeout = timeout
        self._conn: HTTPConnection | None = None

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        """(status, body), or (0, the exception's name) when the socket failed."""
        try:
            if self._conn is None:
                host, port = self._address
                self._conn = HTTPConnection(
                    host, port, timeout=self._timeout, source_address=(self._source, 0)
                )
            self._conn.request(method, path, body=body, headers=headers or {})
            response = self._conn.getresponse()
            data = response.read()
            if response.will_close:
                self.close()
            return response.status, data
        except (OSError, HTTPException) as exc:
            self.close()
            return 0, type(exc).__name__.encode()

    def send(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> str:
        status, data = self.request(method, path, body, headers)
        return outcome(status, data) if status else f"socket: {data.decode()}"

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def loop_in_threads(
    target: Target, stop: Flag, threads: int, once: Callable[[Http], str]
) -> Counter[str]:
    """``threads`` threads, each with its own connection from 127.0.0.2, calling ``once``
    until ``stop``; the tally of what ``once`` returned."""
    tallies: list[Counter[str]] = [Counter() for _ in range(threads)]

    def run(tally: Counter[str]) -> None:
        http = Http(target, sources(1)[0])
        try:
            while not stop.is_set():
                tally[once(http)] += 1
        finally:
            http.close()

    workers = [threading.Thread(target=run, args=(t,), daemon=True) for t in tallies]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(tallies, Counter())
