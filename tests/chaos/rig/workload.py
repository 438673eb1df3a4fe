"""Clients that contend on a few keys through the public HTTP API, recording a history.

Each worker thread loops: pick a key, a node (any: followers forward writes)
and an operation (reads at every consistency level, writes, compare-and-sets
as a txn comparing the value), send it, and record what came back:

- 200 -> ok (a txn whose compare failed -> fail: it had no effect);
- a refusal that certainly did not apply (4xx, 503 ``not_applied`` or
  ``overloaded``) -> fail;
- anything else (a timeout, a lost connection, 503 ``unknown_outcome``,
  ``no_leader``...) -> unknown. The worker then continues as a new process
  (Jepsen's rule: a process has one operation in flight at a time).
"""

from __future__ import annotations

import json
import random
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.chaos.rig.history import History, Op
from tests.support.cluster import Response, http

SURELY_NOT_APPLIED = frozenset({"not_applied", "overloaded"})


@dataclass
class WorkloadConfig:
    keys: int = 5
    workers: int = 6
    read_share: float = 0.5
    cas_share: float = 0.2
    request_timeout: float = 3.0
    consistencies: tuple[tuple[str, float], ...] = (
        ("linearizable", 0.7),
        ("leader", 0.1),
        ("stale", 0.2),
    )


def key_name(i: int) -> str:
    return f"chaos/r{i}"


def _code(response: Response) -> str:
    try:
        return str(response.json().get("code", ""))
    except ValueError:
        return ""


@dataclass
class Workload:
    """``urls()`` gives the nodes to use right now (a killed node's URL just fails)."""

    urls: Callable[[], list[str]]
    config: WorkloadConfig
    seed: int
    history: History = field(default_factory=History)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _values: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        for worker in range(self.config.workers):
            thread = threading.Thread(
                target=self._run, args=(worker, random.Random(self.seed * 1000 + worker)),
                name=f"chaos-worker-{worker}", daemon=True,
            )  # fmt: skip
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.config.request_timeout * 3 + 5)

    def _unique(self, process: int) -> str:
        with self._lock:
            self._values += 1
            return f"v{process}-{self._values}"

    def _run(self, worker: int, rng: random.Random) -> None:
        process = worker
        while not self._stop.is_set():
            op = self.step(process, rng)
            if op.outcome == "unknown":
                process += self.config.workers

    def step(self, process: int, rng: random.Random) -> Op:
        key = key_name(rng.randrange(self.config.keys))
        urls = self.urls()
        url = urls[rng.randrange(len(urls))]
        roll = rng.random()
        if roll < self.config.read_share:
            levels, weights = zip(*self.config.consistencies, strict=True)
            consistency = rng.choices(levels, weights)[0]
            return self.read(process, key, url, consistency)
        if roll < self.config.read_share + self.config.cas_share:
            expected = self._guess(key, rng)
            return self.cas(process, key, url, expected, self._unique(process))
        return self.write(process, key, url, self._unique(process))

    def _guess(self, key: str, rng: random.Random) -> str | None:
        """A likely current value: the last value this history saw or wrote for the key."""
        for op in reversed(self.history.ops[-200:]):
            if op.key == key and op.outcome == "ok":
                return op.result if op.kind == "read" else op.value
        return None if rng.random() < 0.5 else "never-written"

    def _send(self, method: str, url: str, body: bytes | None = None) -> Response | str:
        try:
            return http(method, url, body, timeout=self.config.request_timeout)
        except OSError as exc:  # refused, reset, timed out
            return f"{type(exc).__name__}: {exc}"

    def read(self, process: int, key: str, url: str, consistency: str) -> Op:
        op = self.history.invoke(process, key, "read", consistency=consistency, node=url)
        path = f"{url}/v1/kv/{urllib.parse.quote(key, safe='')}?consistency={consistency}"
        answer = self._send("GET", path)
        if isinstance(answer, str):
            self.history.complete(op, "unknown", error=answer)
        elif answer.status == 200:
            self.history.complete(op, "ok", answer.body.decode())
        elif answer.status == 404 and _code(answer) == "not_found":
            self.history.complete(op, "ok", None)
        else:
            self.history.complete(op, "fail", error=f"{answer.status} {_code(answer)}")
        return op

    def write(self, process: int, key: str, url: str, value: str) -> Op:
        op = self.history.invoke(process, key, "write", value=value, node=url)
        answer = self._send(
            "PUT", f"{url}/v1/kv/{urllib.parse.quote(key, safe='')}", value.encode()
        )
        self._finish_write(op, answer)
        return op

    def cas(self, process: int, key: str, url: str, expected: str | None, value: str) -> Op:
        op = self.history.invoke(process, key, "cas", value=value, expected=expected, node=url)
        compare: dict[str, object] = {"key": key}
        if expected is None:
            compare["exists"] = False
        else:
            compare["value"] = expected
        body = {"compare": [compare], "success": [{"op": "put", "key": key, "value": value}]}
        answer = self._send("POST", f"{url}/v1/txn?encoding=utf-8", json.dumps(body).encode())
        if not isinstance(answer, str) and answer.status == 200 and not answer.json()["succeeded"]:
            self.history.complete(op, "fail", error="compare failed")
            return op
        self._finish_write(op, answer)
        return op

    def _finish_write(self, op: Op, answer: Response | str) -> None:
        if isinstance(answer, str):
            self.history.complete(op, "unknown", error=answer)
        elif answer.status == 200:
            self.history.complete(op, "ok")
        elif 400 <= answer.status < 500 or _code(answer) in SURELY_NOT_APPLIED:
            self.history.complete(op, "fail", error=f"{answer.status} {_code(answer)}")
        else:
            self.history.complete(op, "unknown", error=f"{answer.status} {_code(answer)}")


def final_reads(history: History, url: str, keys: int) -> dict[str, str | None]:
    """A linearizable read of every key after healing, recorded in the history."""
    finals: dict[str, str | None] = {}
    for i in range(keys):
        key = key_name(i)
        op = Workload(lambda: [url], WorkloadConfig(), 0, history).read(
            -1, key, url, "linearizable"
        )
        if op.outcome != "ok":
            raise AssertionError(f"final read of {key} failed: {op.describe()}")
        finals[key] = op.result
    return finals
