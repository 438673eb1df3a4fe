"""What clients did, as a history of operations on registers (keys).

Every operation is recorded at invocation and at completion. Its outcome is
``ok`` (the server said it happened), ``fail`` (the server said it did not:
a failed compare-and-set, a 4xx, a 503 ``not_applied``) or ``unknown`` (a
timeout, a lost connection, ``unknown_outcome``: it may or may not have
happened, at any time after its invocation). Written values are unique per
history, so a read names the write it saw.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

Kind = Literal["read", "write", "cas"]
Outcome = Literal["ok", "fail", "unknown"]


@dataclass
class Op:
    """One operation on one key.

    - read: ``result`` is the value seen (None: the key was absent);
    - write: sets ``value``;
    - cas: sets ``value`` if the current value is ``expected`` (None: absent).
    ``consistency`` tags reads (linearizable, leader, stale); writes use "".
    ``complete`` is None while the operation is open (or never answered).
    """

    index: int
    process: int
    key: str
    kind: Kind
    value: str | None = None
    expected: str | None = None
    consistency: str = ""
    node: str = ""
    invoke: float = 0.0
    complete: float | None = None
    outcome: Outcome = "unknown"
    result: str | None = None
    error: str = ""

    def describe(self) -> str:
        if self.kind == "read":
            what = f"read[{self.consistency}] -> {self.result!r}"
        elif self.kind == "write":
            what = f"write {self.value!r}"
        else:
            what = f"cas {self.expected!r} -> {self.value!r}"
        end = "open" if self.complete is None else f"{self.complete:.4f}"
        return (
            f"#{self.index} p{self.process} {self.key} {what} {self.outcome}"
            f" [{self.invoke:.4f}, {end}] via {self.node}{' ' + self.error if self.error else ''}"
        )


@dataclass
class History:
    """A thread-safe recorder of operations, in invocation order."""

    ops: list[Op] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def invoke(self, process: int, key: str, kind: Kind, **fields: object) -> Op:
        with self._lock:
            op = Op(len(self.ops), process, key, kind, invoke=self.now(), **fields)  # type: ignore[arg-type]
            self.ops.append(op)
        return op

    def complete(
        self, op: Op, outcome: Outcome, result: str | None = None, error: str = ""
    ) -> None:
        op.outcome = outcome
        op.result = result
        op.error = error
        op.complete = None if outcome == "unknown" else self.now()

    def now(self) -> float:
        return time.monotonic() - self.started

    def by_key(self) -> dict[str, list[Op]]:
        keys: dict[str, list[Op]] = {}
        for op in self.ops:
            keys.setdefault(op.key, []).append(op)
        return keys

    def dump(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as out:
            for op in self.ops:
                out.write(json.dumps(asdict(op)) + "\n")


def load(lines: Iterable[str]) -> list[Op]:
    return [Op(**json.loads(line)) for line in lines if line.strip()]


# -- relations between operations, for the checks (checker.py, linearizability.py) --------


def precedes(first: Op, second: Op) -> bool:
    """True when ``first`` certainly completed before ``second`` was invoked."""
    return first.complete is not None and first.complete < second.invoke


def may_have_happened(op: Op) -> bool:
    return op.outcome in ("ok", "unknown")


def is_write(op: Op) -> bool:
    """A write or a compare-and-set."""
    return op.kind in ("write", "cas")


def describe_all(ops: Iterable[Op]) -> list[str]:
    """``Op.describe()`` of each distinct operation, by invocation."""
    unique = {id(op): op for op in ops}.values()
    return [op.describe() for op in sorted(unique, key=lambda o: (o.invoke, o.index))]


def single_key(ops: Sequence[Op]) -> str:
    """The key of operations that must all be on one key ("" for none)."""
    keys = {op.key for op in ops}
    if len(keys) > 1:
        raise ValueError(f"expected the operations of one key, got keys {sorted(keys)}")
    return next(iter(keys)) if keys else ""
