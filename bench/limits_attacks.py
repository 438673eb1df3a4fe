"""The hostile clients of issue 15, for bench/limits.py: the ones that send requests in a
loop are here, the ones that hold connections in bench/limits_floods.py; ``ATTACKS``
names them all in the order the bench runs them.

An attack runs in a process of its own (``AttackProcess``), so its work never takes
the well-behaved client's interpreter lock, against one node until told to stop; it
bounds what it sends and holds, closes everything, and returns a tally of what the node
answered ("413 txn_result_too_large": 120, "most held at once": 1008, ...), so the
report shows that each attack really ran.
"""

from __future__ import annotations

import base64
import gzip
import itertools
import json
import multiprocessing
import os
import socket
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.queues import Queue
from urllib.parse import quote

from bench.limits_floods import (
    connection_flood,
    raft_garbage,
    slowloris,
    stuck_snapshots,
    watch_flood,
)
from bench.limits_wire import (
    JSON,
    Flag,
    Http,
    Target,
    loop_in_threads,
    outcome,
    raise_open_files_limit,
    raw_exchange,
    sources,
)
from http_api.request_size import MIN_BODY_LIMIT
from node.keyspace import DEFAULT_MAX_VALUE_BYTES

TXN_THREADS = 4
TXN_GETS = 1000
SCANNERS = 8
BODY_THREADS = 2
MALFORMED_THREADS = 4
BOMB_THREADS = 2
MEMBER_THREADS = 4
STOP_TIMEOUT_S = 90.0


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def txn_result(target: Target, stop: Flag, ready: Flag) -> Counter[str]:
    """POST /v1/txn with a put and TXN_GETS gets of the 64 KiB value (64 MiB of results)."""
    ops = [{"op": "put", "key": _b64(b"limits/attack/written"), "value": _b64(b"x")}]
    ops += [{"op": "get", "key": _b64(target.big_key.encode())}] * TXN_GETS
    body = json.dumps({"success": ops}).encode()
    ready.set()
    return loop_in_threads(
        target, stop, TXN_THREADS, lambda http: http.send("POST", "/v1/txn", body, JSON)
    )


def scans(target: Target, stop: Flag, ready: Flag) -> Counter[str]:
    """SCANNERS readers, each paging through the 64 x 1 MiB values with limit=64."""
    first = f"/v1/kv?prefix={quote(target.scan_prefix, safe='')}&limit=64"

    def scan(http: Http) -> str:
        path, items = first, 0
        while not stop.is_set():
            status, body = http.request("GET", path)
            if status != 200:
                return outcome(status, body) if status else f"socket: {body.decode()}"
            page = json.loads(body)
            items += len(page["items"])
            if page["next"] is None:
                return f"200: a whole scan of {items} items"
            path = f"{first}&start_after={quote(page['next'], safe='')}"
        return "200: a scan cut short by the end of the attack"

    ready.set()
    return loop_in_threads(target, stop, SCANNERS, scan)


def in_turn(
    target: Target, stop: Flag, threads: int, cases: dict[str, Callable[[Http], str]]
) -> Counter[str]:
    """``threads`` threads sending ``cases`` in turn, each on a new connection (as a
    stranger sends them); the tally is by case and answer."""
    turns = itertools.cycle(cases.items())
    lock = threading.Lock()

    def send(http: Http) -> str:
        with lock:
            name, case = next(turns)
        try:
            return f"{name}: {case(http)}"
        finally:
            http.close()

    return loop_in_threads(target, stop, threads, send)


def big_bodies(target: Target, stop: Flag, ready: Flag) -> Counter[str]:
    """POST /v1/txn bodies at the node's body limit (16 MiB at its defaults), in turn: a
    huge array in an unknown field (read and parsed whole), one byte over the limit."""
    junk = b'{"success":[],"junk":[' + b"0," * ((MIN_BODY_LIMIT - 64) // 2) + b"0]}"
    over = b'{"junk":"' + b"x" * (MIN_BODY_LIMIT - 10) + b'"}'
    ready.set()
    return in_turn(
        target,
        stop,
        BODY_THREADS,
        {
            "unknown field": lambda http: http.send("POST", "/v1/txn", junk, JSON),
            "over the limit": lambda http: http.send("POST", "/v1/txn", over, JSON),
        },
    )


def big_txn(target: Target, stop: Flag, ready: Flag) -> Counter[str]:
    """A valid POST /v1/txn just under the body limit: puts of values at the value limit
    (the same keys each time), in a loop."""
    value = _b64(os.urandom(DEFAULT_MAX_VALUE_BYTES - 1024))
    puts = (MIN_BODY_LIMIT - 4096) // (len(value) + 100)
    ops = [
        {"op": "put", "key": _b64(f"limits/attack/bulk/{i}".encode()), "value": value}
        for i in range(puts)
    ]
    body = json.dumps({"success": ops}).encode()
    ready.set()
    return in_turn(
        target,
        stop,
        BODY_THREADS,
        {f"{puts} puts of 1 MiB": lambda http: http.send("POST", "/v1/txn", body, JSON)},
    )


def malformed(target: Target, stop: Flag, ready: Flag) -> Counter[str]:
    """In turn: an unknown charset, a body that is not the gzip it says, JSON nested
    100,000 deep, a 70,000-byte request line, a garbage request line, random bytes."""
    small = b'{"success": []}'
    deep = b"[" * 100_000 + b"]" * 100_000
    source = sources(1)[0]
    charset = {"Content-Type": "application/json; charset=bogus"}
    ready.set()
    return in_turn(
        target,
        stop,
        MALFORMED_THREADS,
        {
            "bad charset": lambda http: http.send("POST", "/v1/txn", small, charset),
            "bad gzip": lambda http: http.send(
                "POST", "/v1/txn", small, JSON | {"Content-Encoding": "gzip"}
            ),
            "deep JSON": lambda http: http.send("POST", "/v1/txn", deep, JSON),
            "long line": lambda http: http.send("GET", "/v1/kv/" + "k" * 70_000),
            "garbage line": lambda _: raw_exchange(target, source, b"HELLO THERE\r\n\r\n"),
            "random bytes": lambda _: raw_exchange(target, source, os.urandom(4096)),
        },
    )


def gzip_bomb(target: Target, stop: Flag, ready: Flag) -> Counter[str]:
    """PUT a value whose gzip body (about 64 KiB) inflates to 64 MiB of zeros."""
    bomb = gzip.compress(bytes(64 * 1024 * 1024), 9)
    headers = {"Content-Encoding": "gzip"}
    ready.set()
    return in_turn(
        target,
        stop,
        BOMB_THREADS,
        {"64 MiB in gzip": lambda http: http.send("PUT", "/v1/kv/limits/attack/gz", bomb, headers)},
    )


def member_spam(target: Target, stop: Flag, ready: Flag) -> Counter[str]:
    """POST /v1/cluster/members with made-up ids whose raft address is, in turn, a port
    nobody listens on and one that accepts and never answers."""
    silent = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while len(accepted) < 1000:
            try:
                accepted.append(silent.accept()[0])
            except OSError:
                return

    with socket.create_server(("127.0.0.1", 0)) as probe:
        nowhere = probe.getsockname()[1]  # free once closed
    addresses = itertools.cycle([f"127.0.0.1:{nowhere}", f"127.0.0.1:{silent.getsockname()[1]}"])
    numbers = itertools.count()
    lock = threading.Lock()

    def add(http: Http) -> str:
        with lock:
            n, address = next(numbers), next(addresses)
        member = {"id": f"ghost-{n}", "raft_address": address, "url": "http://127.0.0.1:1"}
        return http.send("POST", "/v1/cluster/members", json.dumps(member).encode(), JSON)

    threading.Thread(target=accept, daemon=True).start()
    ready.set()
    try:
        return loop_in_threads(target, stop, MEMBER_THREADS, add)
    finally:
        silent.close()
        for sock in accepted:
            sock.close()


@dataclass(frozen=True)
class Attack:
    name: str
    what: str
    run: Callable[[Target, Flag, Flag], Counter[str]]


ATTACKS = {
    a.name: a
    for a in [
        Attack("txn_result", f"txn: a put + {TXN_GETS} gets of 64 KiB, {TXN_THREADS} in a loop",
               txn_result),
        Attack("scans", f"{SCANNERS} readers scanning 64 x 1 MiB values, limit=64", scans),
        Attack("connection_flood", "idle connections up to the caps, and new ones on and on",
               connection_flood),
        Attack("slowloris", "200 connections sending a request head a byte a second", slowloris),
        Attack("watch_flood", "as many /v1/watch streams on the client's keys as allowed",
               watch_flood),
        Attack("stuck_snapshots", "GET /v1/snapshot readers that never read (4 KiB buffer)",
               stuck_snapshots),
        Attack("big_bodies", f"16 MiB POST /v1/txn bodies refused, {BODY_THREADS} in a loop",
               big_bodies),
        Attack("big_txn", f"valid ~16 MiB txns of 1 MiB puts, {BODY_THREADS} in a loop", big_txn),
        Attack("malformed", f"malformed requests, {MALFORMED_THREADS} in a loop", malformed),
        Attack("gzip_bomb", f"64 MiB of zeros as a gzip body, {BOMB_THREADS} in a loop",
               gzip_bomb),
        Attack("raft_garbage", "raft port: 2 GiB frame headers + garbage; silent connections",
               raft_garbage),
        Attack("member_spam", f"POST /v1/cluster/members, made-up ids, {MEMBER_THREADS} in a loop",
               member_spam),
    ]
}  # fmt: skip


def _child(name: str, target: Target, stop: Flag, ready: Flag, out: Queue[dict[str, int]]) -> None:
    raise_open_files_limit()
    try:
        tally = ATTACKS[name].run(target, stop, ready)
    except Exception as exc:  # reported in the row, the bench goes on
        tally = Counter({f"the attack failed: {type(exc).__name__}: {exc}": 1})
    out.put(dict(tally))


class AttackProcess:
    """One attack in a child process: ``start`` returns once it holds what it came for
    (or after ``ready_timeout`` s), ``finish`` stops it and returns its tally."""

    def __init__(self, name: str, target: Target) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._ready = context.Event()
        self._out: Queue[dict[str, int]] = context.Queue()
        self._process = context.Process(
            target=_child,
            args=(name, target, self._stop, self._ready, self._out),
            name=f"attack-{name}",
        )

    def start(self, ready_timeout: float) -> bool:
        self._process.start()
        return self._ready.wait(ready_timeout)

    def finish(self) -> dict[str, int]:
        self._stop.set()
        try:
            tally = self._out.get(timeout=STOP_TIMEOUT_S)
        except Exception:  # queue.Empty: it did not stop in time
            tally = {f"the attack did not stop within {STOP_TIMEOUT_S:.0f} s": 1}
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        return tally
