"""The attacks of bench/limits.py that hold what the node gives them: connections, slow
request heads, watch streams, snapshot exports, raft connections.

Each runs until ``stop`` is set, sets ``ready`` once it holds what it came for (the
bench measures from then on), holds no more than its stated bound, and closes every
socket before it returns the tally of what it saw.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
from collections import Counter
from urllib.parse import quote

from bench.limits_wire import (
    Flag,
    Target,
    connect,
    head_outcome,
    read_until_closed,
    readable,
    sources,
)
from node.cli.settings import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
    DEFAULT_MAX_WATCHES,
    DEFAULT_MAX_WATCHES_PER_ADDRESS,
)

MiB = 1024 * 1024
FLOOD_ADDRESSES = DEFAULT_MAX_CONNECTIONS // DEFAULT_MAX_CONNECTIONS_PER_ADDRESS + 2
FLOOD_MOST_HELD = DEFAULT_MAX_CONNECTIONS + 400
SLOW_CONNECTIONS = 200
SLOW_HEAD = b"GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Slow: "
WATCH_ADDRESSES = DEFAULT_MAX_WATCHES // DEFAULT_MAX_WATCHES_PER_ADDRESS + 1
SNAPSHOT_READERS = 8
RAFT_GARBAGE_CONNECTIONS = 4
RAFT_GARBAGE_BYTES = 64 * MiB  # sent on one connection before it starts a new one
RAFT_ANNOUNCED = 2**31 - 1  # the frame length announced: 2 GiB
RAFT_SILENT_CONNECTIONS = 200


def _close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()
    socks.clear()


def _refusal(sock: socket.socket) -> str:
    """What a held socket that became readable says: a refusal, or the node's close."""
    sock.settimeout(1)
    answer = read_until_closed(sock, 65536)
    return head_outcome(answer) if answer else "closed by the node"


def connection_flood(target: Target, stop: Flag, ready: Flag) -> Counter[str]:
    """Idle connections from several addresses until the node refuses them, held; and
    new ones opened on and on, each answered (a refusal) and closed."""
    tally: Counter[str] = Counter()
    held: list[socket.socket] = []
    addresses = sources(FLOOD_ADDRESSES)
    opened = most = 0
    try:
        while not stop.is_set():
            try:
                sock = connect(target.address, addresses[opened % len(addresses)], timeout=2)
            except OSError as exc:
                tally[f"connect: {type(exc).__name__}"] += 1
                stop.wait(0.05)
                continue
            opened += 1
            if readable([sock], 0.02):  # refused at once: the node answers on connect
                tally[_refusal(sock)] += 1
                sock.close()
            elif len(held) < FLOOD_MOST_HELD:
                held.append(sock)
            else:
                sock.close()
            if opened % 100 == 0:
                for late in readable(held, 0):
                    tally[_refusal(late)] += 1
                    held.remove(late)
                    late.close()
                most = max(most, len(held))
            if any(k.startswith("503") for k in tally) or opened > FLOOD_MOST_HELD:
                ready.set()
    finally:
        _close_all(held)
    tally["connections opened"] = opened
    tally["most held at once"] = most
    return tally


def slowloris(target: Target, stop: Flag, ready: Flag) -> Counter[str]:
    """SLOW_CONNECTIONS connections, each sending a request head one byte a second."""
    tally: Counter[str] = Counter()
    source = sources(1)[0]
    sent: dict[socket.socket, int] = {}

    def open_one() -> None:
        try:
            sent[connect(target.address, source)] = 0
        except OSError as exc:
            tally[f"connect: {type(exc).__name__}"] += 1

    try:
        for _ in range(SLOW_CONNECTIONS):
            open_one()
        ready.set()
        while not stop.wait(1.0):
            for sock in readable(list(sent), 0):
                tally[f"cut by the node: {_refusal(sock)}"] += 1
                del sent[sock]
                sock.close()
                open_one()
            for sock, position in list(sent.items()):
                try:
                    sock.send(SLOW_HEAD[position : position + 1] or b"a")
                    sent[sock] = position + 1
                    tally["bytes sent"] += 1
                except OSError:
                    tally["cut by the node: send failed"] += 1
                    del sent[sock]
                    sock.close()
                    open_one()
    finally:
        tally["connections at the end"] = len(sent)
        _close_all(list(sent))
    return tally


def watch_flood(target: Target, stop: Flag, ready: Flag) -> Counter[str]:
    """As many GET /v1/watch streams on the well-behaved client's keys as the node
    allows (from several addresses), read as they come; one more tried every second."""
    tally: Counter[str] = Counter()
    held: list[socket.socket] = []
    addresses = sources(WATCH_ADDRESSES)
    request = f"GET /v1/watch?prefix={quote(target.watch_prefix, safe='')} HTTP/1.1\r\n"
    request += "Host: x\r\n\r\n"

    def open_one(source: str) -> str:
        try:
            sock = connect(target.address, source)
            sock.sendall(request.encode())
            head = b""
            while b"\r\n\r\n" not in head and (chunk := sock.recv(4096)):
                head += chunk
        except OSError as exc:
            return f"socket: {type(exc).__name__}"
        if head.startswith(b"HTTP/1.1 200"):
            held.append(sock)
            return "200 watching"
        sock.close()  # a refusal's small JSON body came with its head
        return head_outcome(head)

    try:
        tries = DEFAULT_MAX_WATCHES + 2 * WATCH_ADDRESSES
        for i in range(tries):
            if stop.is_set():
                break
            tally[open_one(addresses[i % len(addresses)])] += 1
        ready.set()
        tally["most held at once"] = len(held)
        while not stop.is_set():
            for _ in range(5):
                for sock in readable(held, 0.2):
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        data = b""
                    tally["bytes read"] += len(data)
                    if not data:
                        tally["closed by the node"] += 1
                        held.remove(sock)
                        sock.close()
            tally[open_one(addresses[0])] += 1
    finally:
        _close_all(held)
    return tally


def stuck_snapshots(target: Target, stop: Flag, ready: Flag) -> Counter[str]:
    """SNAPSHOT_READERS GET /v1/snapshot requests with a 4 KiB receive buffer; one that
    is answered 200 then reads nothing; one refused is replaced."""
    tally: Counter[str] = Counter()
    waiting: list[socket.socket] = []
    stuck: list[socket.socket] = []
    source = sources(1)[0]

    def open_one() -> None:
        sock = socket.socket()
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(5)
            sock.bind((source, 0))
            sock.connect(target.address)
            sock.sendall(b"GET /v1/snapshot HTTP/1.1\r\nHost: x\r\n\r\n")
            waiting.append(sock)
        except OSError as exc:
            tally[f"socket: {type(exc).__name__}"] += 1
            sock.close()

    try:
        while not stop.is_set():
            while len(waiting) + len(stuck) < SNAPSHOT_READERS:
                open_one()
            for sock in readable(waiting, 0.2):
                waiting.remove(sock)
                try:
                    head = sock.recv(64, socket.MSG_PEEK)
                except OSError:
                    head = b""
                if head.startswith(b"HTTP/1.1 200"):
                    stuck.append(sock)  # and never read again
                    tally["200, then read nothing"] += 1
                    ready.set()
                else:
                    sock.settimeout(0.5)
                    tally[head_outcome(read_until_closed(sock, 65536))] += 1
                    sock.close()
    finally:
        _close_all(waiting)
        _close_all(stuck)
    return tally


def raft_garbage(target: Target, stop: Flag, ready: Flag) -> Counter[str]:
    """RAFT_SILENT_CONNECTIONS connections to the raft port that never authenticate, and
    RAFT_GARBAGE_CONNECTIONS sending a frame header announcing 2 GiB then random bytes
    (RAFT_GARBAGE_BYTES a connection, then a new one)."""
    tally: Counter[str] = Counter()
    lock = threading.Lock()
    silent: list[socket.socket] = []
    source = sources(1)[0]
    chunk = os.urandom(65536)

    def count(what: str, n: int = 1) -> None:
        with lock:
            tally[what] += n

    def garbage() -> None:
        while not stop.is_set():
            sent = 0
            try:
                with connect(target.raft, source) as sock:
                    sock.sendall(struct.pack("i", RAFT_ANNOUNCED))
                    while sent < RAFT_GARBAGE_BYTES and not stop.is_set():
                        sock.sendall(chunk)
                        sent += len(chunk)
                if sent >= RAFT_GARBAGE_BYTES:
                    count(f"garbage connections that sent all {RAFT_GARBAGE_BYTES // MiB} MiB")
            except OSError as exc:
                count(f"garbage connections ended: {type(exc).__name__}")
                stop.wait(0.1)
            count("garbage MiB sent", sent // MiB)

    def open_silent() -> None:
        try:
            silent.append(connect(target.raft, source))
        except OSError as exc:
            count(f"silent connect: {type(exc).__name__}")

    threads = [
        threading.Thread(target=garbage, daemon=True) for _ in range(RAFT_GARBAGE_CONNECTIONS)
    ]
    try:
        for thread in threads:
            thread.start()
        ready.set()  # the silent ones come slowly: the raft port accepts about 10 a second
        while len(silent) < RAFT_SILENT_CONNECTIONS and not stop.is_set():
            open_silent()
        while not stop.wait(1.0):
            for sock in readable(silent, 0):
                count(f"silent closed by the node: {_refusal(sock)}")
                silent.remove(sock)
                sock.close()
                open_silent()
        for thread in threads:
            thread.join()
    finally:
        count("silent connections at the end", len(silent))
        _close_all(silent)
    return tally
