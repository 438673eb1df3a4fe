"""One lock client, a process of its own (so a nemesis can SIGSTOP or SIGKILL it).

    python -m tests.chaos.rig.lock_client --urls U1,U2,U3 --client c0.0 --started T
        --history FILE [--name chaos-lock] [--key chaos-lock/log] [--ttl 2] [--seed N]
        [--ca-file CA]   (headers to send, an Authorization, as JSON in RKV_CHAOS_HEADERS)

It speaks raw HTTP to any node and loops: get a lease (POST /v1/leases) kept
alive by a thread every third of its TTL; queue for the lock (POST
/v1/locks/NAME); once it holds it, append ``TOKEN:CLIENT:N;`` to the log key a
few times, each write carrying ``Rkv-Fencing: NAME=TOKEN`` (an append, or a
txn holding an append), then unlock. One holding in five it lets the lease
lapse instead: it stops the keepalives and goes on writing until a write is
refused, as a holder that does not know it was paused would. It never stops
writing because its own keepalive said the lease ended: the fencing must
refuse those writes. Every operation goes to its history file
(lock_history.py). SIGTERM stops it after the operation in flight.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import ssl
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos.rig.lock_history import LockHistory, LockOp, format_entry
from tests.support.cluster import Response, http

SURELY_NOT_APPLIED = frozenset({"not_applied", "overloaded"})
LEASE_GONE = frozenset({"lease_expired", "lease_not_found"})
LAPSE_SHARE = 0.2
TXN_SHARE = 0.25


@dataclass
class Lease:
    lease_id: int
    lost: threading.Event = field(default_factory=threading.Event)
    """A keepalive or a lock request answered that the lease ended."""
    dropped: threading.Event = field(default_factory=threading.Event)
    """The client stopped keeping it alive."""


def code_of(answer: Response) -> str:
    try:
        return str(answer.json().get("code", ""))
    except (ValueError, AttributeError):
        return ""


class LockClient:
    def __init__(self, args: argparse.Namespace) -> None:
        self.urls: list[str] = args.urls.split(",")
        self.name: str = args.name
        self.key_path = "/v1/kv/" + urllib.parse.quote(args.key, safe="")
        self.key: str = args.key
        self.ttl: int = args.ttl
        self.rng = random.Random(args.seed)
        self.history = LockHistory(args.client, args.started, Path(args.history))
        self.stop = threading.Event()
        self.headers: dict[str, str] = json.loads(os.environ.get("RKV_CHAOS_HEADERS", "{}"))
        self.context = ssl.create_default_context(cafile=args.ca_file) if args.ca_file else None
        self.writes = 0

    # -- HTTP -----------------------------------------------------------------------------

    def send(
        self,
        method: str,
        path: str,
        body: object = None,
        headers: dict[str, str] | None = None,
        timeout: float = 5.0,
    ) -> tuple[Response | str, str]:
        """The answer (or why there is none) and the node asked."""
        url = self.rng.choice(self.urls)
        data = (
            None
            if body is None
            else (body if isinstance(body, bytes) else json.dumps(body).encode())
        )
        sent = {**self.headers, **(headers or {})}
        if body is not None and not isinstance(body, bytes):
            sent["Content-Type"] = "application/json"
        try:
            answer = http(method, url + path, data, sent, timeout, self.context)
            location = answer.headers.get("Location")
            if answer.status in (307, 308) and location:
                answer = http(
                    method, urllib.parse.urljoin(url, location), data, sent, timeout, self.context
                )
        except OSError as exc:
            return f"{type(exc).__name__}: {exc}", url
        return answer, url

    def finish(self, op: LockOp, answer: Response | str, **values: Any) -> str:
        """Record the outcome; return the refusal's code ("" when ok or unknown)."""
        if isinstance(answer, str):
            self.history.complete(op, "unknown", answer)
            return ""
        if answer.status == 200:
            self.history.complete(op, "ok", **values)
            return ""
        code = code_of(answer) or str(answer.status)
        if 400 <= answer.status < 500 or code in SURELY_NOT_APPLIED:
            self.history.complete(op, "fail", code)
            return code
        self.history.complete(op, "unknown", f"{answer.status} {code}")
        return ""

    # -- operations -----------------------------------------------------------------------

    def grant(self) -> Lease | None:
        op = self.history.invoke("grant")
        answer, op.node = self.send("POST", "/v1/leases", {"ttl": self.ttl}, timeout=self.ttl + 3)
        if isinstance(answer, Response) and answer.status == 200:
            lease = Lease(int(answer.json()["id"]))
            self.finish(op, answer, lease=lease.lease_id)
            threading.Thread(target=self.keep_alive, args=(lease,), daemon=True).start()
            return lease
        self.finish(op, answer)
        return None

    def keep_alive(self, lease: Lease) -> None:
        while not (self.stop.is_set() or lease.dropped.is_set()):
            op = self.history.invoke("keepalive", lease=lease.lease_id)
            path = f"/v1/leases/{lease.lease_id}/keepalive"
            answer, op.node = self.send("POST", path, b"", timeout=self.ttl)
            code = self.finish(op, answer)
            if code in LEASE_GONE:
                lease.lost.set()
                return
            pause = self.ttl / 3 if isinstance(answer, Response) and answer.status == 200 else 0.2
            lease.dropped.wait(pause)

    def lock(self, lease: Lease) -> int | None:
        wait = self.rng.choice((1, 2, 3))
        op = self.history.invoke("lock", lease=lease.lease_id)
        path = "/v1/locks/" + urllib.parse.quote(self.name, safe="")
        body = {"lease": lease.lease_id, "timeout": wait}
        answer, op.node = self.send("POST", path, body, timeout=wait + 4)
        if isinstance(answer, Response) and answer.status == 200:
            token = int(answer.json()["token"])
            self.finish(op, answer, token=token)
            return token
        code = self.finish(op, answer)
        if code in LEASE_GONE:
            lease.lost.set()
        elif code != "lock_held":  # no answer, or no leader: not at once again
            self.stop.wait(0.2)
        return None

    def write(self, lease: Lease, token: int) -> str:
        """One fenced append; the refusal's code, "" if accepted or unknown."""
        n = self.writes
        self.writes += 1
        entry = format_entry(token, self.history.client, n)
        op = self.history.invoke("write", lease=lease.lease_id, token=token, n=n)
        fence = {"Rkv-Fencing": f"{self.name}={token}"}
        if self.rng.random() < TXN_SHARE:
            body = {"success": [{"op": "append", "key": self.key, "value": entry}]}
            answer, op.node = self.send("POST", "/v1/txn?encoding=utf-8", body, fence)
        else:
            answer, op.node = self.send("POST", self.key_path + "?op=append", entry.encode(), fence)
        version = None
        if isinstance(answer, Response) and answer.status == 200:
            version = int(answer.json()["version"])
        return self.finish(op, answer, version=version)

    def unlock(self, lease: Lease, token: int) -> None:
        op = self.history.invoke("unlock", lease=lease.lease_id, token=token)
        path = "/v1/locks/" + urllib.parse.quote(self.name, safe="") + f"?lease={lease.lease_id}"
        answer, op.node = self.send("DELETE", path)
        self.finish(op, answer)

    # -- the loop -------------------------------------------------------------------------

    def hold(self, lease: Lease, token: int) -> bool:
        """Write under the lock; False when the lease was left to lapse."""
        lapse = self.rng.random() < LAPSE_SHARE
        if lapse:
            lease.dropped.set()
        planned = 1000 if lapse else self.rng.randint(2, 5)
        for _ in range(planned):
            if self.stop.is_set():
                break
            if self.write(lease, token):  # refused: fenced, most likely
                break
            self.stop.wait(self.rng.uniform(0.05, 0.3))
        return not lapse

    def run(self) -> None:
        lease: Lease | None = None
        try:
            while not self.stop.is_set():
                if lease is None or lease.lost.is_set():
                    if lease is not None:
                        lease.dropped.set()
                    lease = self.grant()
                    if lease is None:
                        self.stop.wait(0.2)
                    continue
                token = self.lock(lease)
                if token is None:
                    continue
                if self.hold(lease, token):
                    self.unlock(lease, token)
                else:
                    lease = None
        finally:
            self.stop.set()
            self.history.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.rig.lock_client")
    parser.add_argument("--urls", required=True)
    parser.add_argument("--client", required=True)
    parser.add_argument("--started", type=float, required=True)
    parser.add_argument("--history", required=True)
    parser.add_argument("--name", default="chaos-lock")
    parser.add_argument("--key", default="chaos-lock/log")
    parser.add_argument("--ttl", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ca-file")
    client = LockClient(parser.parse_args(argv))
    signal.signal(signal.SIGTERM, lambda signum, frame: client.stop.set())
    client.run()


if __name__ == "__main__":
    main()
