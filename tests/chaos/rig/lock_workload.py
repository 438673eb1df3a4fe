"""The lock workload: client processes contending for one lock, and what it needs
around them (start, pause, kill, restart, stop, observe the lock, check).

Each client (lock_client.py) runs as a process of its own, so the nemeses of
lock_nemesis.py can SIGSTOP a holder past its lease's TTL or SIGKILL it; a
killed client restarts as a new incarnation (``c2.1`` after ``c2.0``) with a
new history file. An observer thread here reads the lock (a linearizable GET
/v1/locks/NAME) every half second, recording the holder: those observations
let the checker see a holder lose the lock. At the end, after every client
stopped and the cluster healed, a linearizable read of the log key gives the
accepted writes in order, and lock_checker.py checks everything.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from tests.chaos.rig.lock_checker import LockReport, check_locks
from tests.chaos.rig.lock_history import OBSERVER, LockHistory, LockOp, load, load_files
from tests.support.cluster import REPO, http

LOCK_NAME = "chaos-lock"
LOG_KEY = "chaos-lock/log"
OBSERVE_EVERY = 0.5
STOP_GRACE = 20.0


@dataclass
class ClientProcess:
    index: int
    incarnation: int
    proc: subprocess.Popen[bytes]
    history: Path
    paused: bool = False

    @property
    def name(self) -> str:
        return f"c{self.index}.{self.incarnation}"


class LockWorkload:
    """``clients`` lock clients against ``urls``; history files and client logs in
    ``directory``; times relative to ``started`` (the campaign history's). ``headers``
    and ``ca_file``: what the clients present to a secured cluster."""

    def __init__(
        self,
        urls: list[str],
        directory: Path,
        started: float,
        *,
        clients: int = 4,
        ttl: int = 2,
        seed: int = 0,
        headers: dict[str, str] | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.urls = urls
        self.directory = directory
        self.ttl = ttl
        self.seed = seed
        self.headers = dict(headers or {})
        self.ca_file = ca_file
        self.history = LockHistory(OBSERVER, started)
        self.clients: list[ClientProcess] = []
        self.histories: list[Path] = []
        self._count = clients
        self._incarnations = [0] * clients
        self._rng = random.Random(seed)
        self._stop = threading.Event()
        self._observer = threading.Thread(target=self._observe_loop, daemon=True)

    # -- client processes -----------------------------------------------------------------

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.clients = [self._spawn(i) for i in range(self._count)]
        self._observer.start()

    def _spawn(self, index: int) -> ClientProcess:
        incarnation = self._incarnations[index]
        self._incarnations[index] += 1
        name = f"c{index}.{incarnation}"
        history = self.directory / f"{name}.jsonl"
        self.histories.append(history)
        argv = [
            sys.executable, "-m", "tests.chaos.rig.lock_client",
            "--urls", ",".join(self.urls), "--client", name,
            "--started", repr(self.history.started), "--history", str(history),
            "--name", LOCK_NAME, "--key", LOG_KEY, "--ttl", str(self.ttl),
            "--seed", str(self.seed * 1000 + index * 100 + incarnation),
        ]  # fmt: skip
        if self.ca_file:
            argv += ["--ca-file", self.ca_file]
        env = {**os.environ, "PYTHONPATH": str(REPO), "RKV_CHAOS_HEADERS": json.dumps(self.headers)}
        with (self.directory / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        return ClientProcess(index, incarnation, proc, history)

    def pause(self, index: int) -> str:
        client = self.clients[index]
        os.kill(client.proc.pid, signal.SIGSTOP)
        client.paused = True
        return client.name

    def resume(self, index: int) -> None:
        client = self.clients[index]
        os.kill(client.proc.pid, signal.SIGCONT)
        client.paused = False

    def kill_and_restart(self, index: int) -> tuple[str, str]:
        client = self.clients[index]
        client.proc.kill()
        client.proc.wait(timeout=30)
        self.clients[index] = self._spawn(index)
        return client.name, self.clients[index].name

    def holder(self) -> int | None:
        """The index of the running client whose lease holds the lock now, if any."""
        seen = self.observe()
        if seen.outcome != "ok" or seen.lease is None:
            return None
        for client in self.clients:
            try:
                with client.history.open(encoding="utf-8") as lines:
                    ops = load(lines)
            except OSError:
                continue
            if any(op.kind == "grant" and op.lease == seen.lease for op in ops):
                return client.index
        return None

    def stop(self) -> None:
        """Stop the observer and every client: SIGCONT the paused, SIGTERM, SIGKILL
        whatever has not ended after STOP_GRACE seconds."""
        self._stop.set()
        for client in self.clients:
            if client.paused:
                self.resume(client.index)
            if client.proc.poll() is None:
                client.proc.terminate()
        for client in self.clients:
            try:
                client.proc.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                client.proc.kill()
                client.proc.wait()
        if self._observer.is_alive():
            self._observer.join(timeout=10)

    # -- observations and the final check -------------------------------------------------

    def observe(self) -> LockOp:
        """A linearizable read of the lock, recorded in the history."""
        url = self._rng.choice(self.urls)
        op = self.history.invoke("observe", node=url)
        path = f"{url}/v1/locks/{urllib.parse.quote(LOCK_NAME, safe='')}"
        try:
            answer = http("GET", path, timeout=5)
        except OSError as exc:
            self.history.complete(op, "unknown", f"{type(exc).__name__}")
            return op
        if answer.status != 200:
            self.history.complete(op, "fail", f"{answer.status}")
            return op
        holder = answer.json().get("holder")
        if holder is None:
            self.history.complete(op, "ok")
        else:
            self.history.complete(op, "ok", lease=int(holder["lease"]), token=int(holder["token"]))
        return op

    def _observe_loop(self) -> None:
        while not self._stop.wait(OBSERVE_EVERY):
            self.observe()

    def ops(self) -> list[LockOp]:
        return [*self.history.ops, *load_files(p for p in self.histories if p.exists())]

    def final_value(self, url: str) -> str | None:
        path = f"{url}/v1/kv/{urllib.parse.quote(LOG_KEY, safe='')}?consistency=linearizable"
        answer = http("GET", path, timeout=30)
        if answer.status == 404:
            return None
        if answer.status != 200:
            raise AssertionError(f"the final read of {LOG_KEY} answered {answer.status}")
        return answer.body.decode()

    def check(self, url: str) -> LockReport:
        """Every check of lock_checker.py, against a final read on ``url``."""
        return check_locks(self.ops(), self.final_value(url), LOG_KEY)

    def dump(self, path: Path) -> None:
        """Every operation of every process, one JSON object a line."""
        with path.open("w", encoding="utf-8") as out:
            for op in sorted(self.ops(), key=lambda o: o.invoke):
                out.write(json.dumps(op.__dict__) + "\n")
