"""What the lock clients did, as a history of operations on one lock and one log key.

The lock workload (lock_workload.py, lock_client.py) records, per operation,
its invocation and its completion, with the same outcomes as history.py:
``ok`` (it happened), ``fail`` (it certainly did not: a 409 ``fenced``, a 4xx)
and ``unknown`` (no answer: it may have happened, at any time after its
invocation). Each client process appends its operations to a JSON-lines file
as they happen (a line at invocation, a line at completion), so a client
killed with SIGKILL leaves its open operation behind as ``unknown``.

Times are seconds since the campaign started on the machine's monotonic
clock (CLOCK_MONOTONIC, shared by every process), so operations of different
processes can be ordered in real time.

Every accepted write appends ``TOKEN:CLIENT:N;`` to the log key: the fencing
token it carried, the writing client (``c2.1``: client 2, incarnation 1) and
that client's write number, so the final value lists the accepted writes in
the order the cluster applied them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO, Literal

LockKind = Literal["grant", "keepalive", "lock", "write", "unlock", "observe"]
Outcome = Literal["ok", "fail", "unknown"]
OBSERVER = "observer"
"""The ``client`` of observations (GET /v1/locks/NAME) made by the workload's parent."""


@dataclass
class LockOp:
    """One operation of one client.

    - grant: ``lease`` is the lease granted (ok);
    - keepalive: of ``lease``; ``code`` is the refusal (``lease_expired``...);
    - lock: with ``lease``; ``token`` is the fencing token granted (ok);
    - write: an append of ``entry()`` to the log key carrying ``token`` (of
      ``lease``), the client's ``n``-th write; ``version`` is the version
      answered (ok), ``code`` the refusal (``fenced``...);
    - unlock: of the holding ``token`` with ``lease``;
    - observe: a linearizable GET of the lock; ``token`` and ``lease`` are the
      holder's (None: nobody held it).
    """

    index: int
    client: str
    kind: LockKind
    lease: int | None = None
    token: int | None = None
    n: int | None = None
    version: int | None = None
    invoke: float = 0.0
    complete: float | None = None
    outcome: Outcome = "unknown"
    code: str = ""
    node: str = ""

    def entry(self) -> str:
        """What a write appends to the log key."""
        return format_entry(self.token or 0, self.client, self.n or 0)

    def describe(self) -> str:
        end = "open" if self.complete is None else f"{self.complete:.4f}"
        what = {
            "grant": f"grant -> lease {self.lease}",
            "keepalive": f"keepalive lease {self.lease}",
            "lock": f"lock with lease {self.lease} -> token {self.token}",
            "write": f"write #{self.n} token {self.token} (lease {self.lease})"
            + (f" -> version {self.version}" if self.version is not None else ""),
            "unlock": f"unlock token {self.token} lease {self.lease}",
            "observe": f"observe holder token {self.token} lease {self.lease}",
        }[self.kind]
        return (
            f"{self.client} {what} {self.outcome}{' ' + self.code if self.code else ''}"
            f" [{self.invoke:.4f}, {end}]{' via ' + self.node if self.node else ''}"
        )


def format_entry(token: int, client: str, n: int) -> str:
    return f"{token}:{client}:{n};"


@dataclass(frozen=True)
class Entry:
    """One accepted write, as read back from the log key."""

    position: int
    token: int
    client: str
    n: int


def parse_log(value: str) -> list[Entry]:
    """The entries of the log key's value, in order. Raises ValueError if malformed."""
    entries = []
    for position, item in enumerate(value.split(";")[:-1]):
        token, client, n = item.split(":")
        entries.append(Entry(position, int(token), client, int(n)))
    if value and not value.endswith(";"):
        raise ValueError(f"the log ends with a partial entry: {value[-40:]!r}")
    return entries


@dataclass
class LockHistory:
    """A thread-safe recorder of one process's operations; with ``path``, each
    invocation and completion is also appended to that JSON-lines file at once."""

    client: str
    started: float
    path: Path | None = None
    ops: list[LockOp] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _out: IO[str] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.path is not None:
            self._out = self.path.open("a", encoding="utf-8")

    def now(self) -> float:
        return time.monotonic() - self.started

    def invoke(self, kind: LockKind, **values: object) -> LockOp:
        with self._lock:
            op = LockOp(len(self.ops), self.client, kind, invoke=self.now(), **values)  # type: ignore[arg-type]
            self.ops.append(op)
            self._write({"event": "invoke", **asdict(op)})
        return op

    def complete(self, op: LockOp, outcome: Outcome, code: str = "", **values: object) -> None:
        with self._lock:
            for name, value in values.items():
                setattr(op, name, value)
            op.outcome = outcome
            op.code = code
            op.complete = None if outcome == "unknown" else self.now()
            self._write({"event": "complete", **asdict(op)})

    def _write(self, line: dict[str, object]) -> None:
        if self._out is not None:
            self._out.write(json.dumps(line) + "\n")
            self._out.flush()

    def close(self) -> None:
        with self._lock:
            if self._out is not None:
                self._out.close()
                self._out = None


_FIELDS = {f.name for f in fields(LockOp)}


def load(lines: Iterable[str]) -> list[LockOp]:
    """The operations of one history file: the last line recorded for each (an
    operation with no completion line stays ``unknown``). A torn last line (the
    process was killed while writing it) is ignored."""
    found: dict[tuple[str, int], LockOp] = {}
    for line in lines:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        op = LockOp(**{k: v for k, v in data.items() if k in _FIELDS})
        found[(op.client, op.index)] = op
    return list(found.values())


def load_files(paths: Iterable[Path]) -> list[LockOp]:
    ops: list[LockOp] = []
    for path in paths:
        with path.open(encoding="utf-8") as lines:
            ops.extend(load(lines))
    return ops
