"""Speaking to a node's raft port from a test: pysyncobj's frames, its handshake, and
the node's memory (for the hostile-peer tests of tests/cluster/test_raft_port_hardening.py).

A frame is a native 4-byte signed length and ``zlib(pickle(message))``, Fernet-encrypted
under the cluster secret. The handshake: the dialer sends a random key; the acceptor
answers ``(that key, its own key)``.
"""

from __future__ import annotations

import os
import socket
import struct
import time
import zlib
from typing import Any

import pysyncobj.pickle as pysyncobj_pickle
from pysyncobj.encryptor import getEncryptor

from tests.support.processes import memory_bytes

LENGTH = struct.Struct("i")
LARGEST_LENGTH = 2**31 - 1  # what a 4-byte signed length can announce: 2 GiB


def encrypted_frame(secret: bytes, message: Any) -> bytes:
    token: bytes = getEncryptor(secret).encrypt_at_time(
        zlib.compress(pysyncobj_pickle.dumps(message), 3), int(time.monotonic())
    )
    return LENGTH.pack(len(token)) + token


def read_frame(sock: socket.socket, secret: bytes) -> Any:
    head = _read_exactly(sock, LENGTH.size)
    token = _read_exactly(sock, LENGTH.unpack(head)[0])
    return pysyncobj_pickle.loads(zlib.decompress(getEncryptor(secret).decrypt(token)))


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the node closed the connection")
        data += chunk
    return data


def authenticate(port: int, secret: bytes, timeout: float = 10.0) -> socket.socket:
    """A connection to the raft port that has passed the handshake's first step (the
    node decrypted our key and answered with its own): it holds the cluster secret."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        ours = os.urandom(32)
        sock.sendall(encrypted_frame(secret, ours))
        echoed, _theirs = read_frame(sock, secret)
    except BaseException:
        sock.close()
        raise
    if echoed != ours:
        sock.close()
        raise AssertionError("the node's answer does not carry our key")
    return sock


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """Wait up to ``timeout`` for the other end to close ``sock`` (EOF or reset)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        sock.settimeout(min(left, 1.0))
        try:
            if not sock.recv(65536):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            continue


def push_until_closed(
    sock: socket.socket, total: int, chunk: int = 1 << 20, timeout: float = 20.0
) -> int:
    """Send up to ``total`` bytes of zeros for at most ``timeout`` seconds; stop when the
    node closes the connection. Returns the bytes the kernel took."""
    block = bytes(chunk)
    sent = 0
    sock.settimeout(5.0)
    deadline = time.monotonic() + timeout
    while sent < total and time.monotonic() < deadline:
        try:
            sent += sock.send(block)
        except (BrokenPipeError, ConnectionResetError):
            break
        except TimeoutError:  # the node reads nothing more: see whether it closed
            break
    return sent


def rss_mib(pid: int) -> float:
    try:
        return memory_bytes(pid) / 2**20
    except LookupError:
        return float("nan")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))
