"""Linearizability of one key's history of register operations (``check_key``).

Every key is an independent register (linearizability is compositional, so
each key is checked on its own). ``check_key`` considers the key's writes and
compare-and-sets (any outcome but ``fail``) and its ``ok`` reads whose
consistency is ``linearizable``, and runs a Wing & Gong / Lowe style
depth-first search over the minimal operations, with the event list of Lowe's
just-in-time linearization (an operation is placed only while no pending
required operation has returned) and memoization of (set of placed
operations, register value), as in Porcupine. The search itself is in
linearization_search.py; checker.py runs this check with the others.

Semantics of outcomes: ``ok`` happened exactly once between invocation and
completion; ``fail`` certainly had no effect (a ``fail`` cas is not evidence
that its compare was false: it may have been refused); ``unknown`` may have
happened once at any time after its invocation, or never. Reads with outcome
``fail`` or ``unknown`` carry no information. Written values are unique in a
history, so a value names the write that produced it.

Before the search, a precheck reports at once any read (or ``ok`` cas's
expected value) that no write could explain: a value never written, written
only by a failed operation, or only by operations invoked after the read
completed. Three prunings then keep the search small, each safe because any
linearization it skips can be turned into one it keeps:

- a read that can be placed now (it is minimal and saw the current value) is
  placed at once, with no alternative explored: moving a read earlier never
  breaks a linearization, since it changes nothing;
- an ``unknown`` write/cas is placed only right before an operation that
  observes its value (a read of it, or a cas expecting it); were it
  overwritten unobserved, the same order without it would do as well, and
  ``unknown`` operations whose value nothing observes are dropped up front;
- an acknowledged plain write whose value nothing observes is never a choice
  of its own: it is placed for free with the next plain write (only a write
  can follow it anyway), or alone when its return leaves no other way, and
  the search succeeds once only such writes remain (they can go last). All
  unobserved values count as one register value.

A search step places an operation, skips a candidate or backtracks; past
``max_steps`` the verdict is ``too_hard``, never a pass. The memo holds
128-bit Zobrist hashes of the configurations.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tests.chaos.rig.history import (
    Op,
    describe_all,
    is_write,
    may_have_happened,
    precedes,
    single_key,
)
from tests.chaos.rig.linearization_search import Verdict, find_linearization

#: Default bound on the search steps for one key (a step places an operation,
#: skips a candidate or backtracks). A few thousand realistic operations need
#: well under a tenth of this when they are linearizable.
DEFAULT_MAX_STEPS = 5_000_000


@dataclass
class KeyResult:
    """The linearizability verdict for one key.

    ``ops_checked`` counts the operations the check considered (writes and
    cas that may have happened, ``ok`` linearizable reads); ``steps`` is the
    search effort spent. On a ``nonlinearizable`` or ``too_hard`` verdict,
    ``message`` explains and ``excerpt`` holds ``Op.describe()`` lines of the
    operations around the point where the search got stuck, by invocation.
    """

    key: str
    verdict: Verdict
    ops_checked: int = 0
    steps: int = 0
    message: str = ""
    excerpt: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the key's history is linearizable."""
        return self.verdict == "linearizable"


def _linearizability_ops(ops: Iterable[Op]) -> list[Op]:
    """The operations ``check_key`` considers, before pruning."""
    return [
        op
        for op in ops
        if (is_write(op) and may_have_happened(op))
        or (op.kind == "read" and op.outcome == "ok" and op.consistency == "linearizable")
    ]


def _precheck(ops: Sequence[Op], initial: str | None) -> tuple[str, list[str]] | None:
    """Observations no write could explain, found without a search.

    A linearizable read, or an ``ok`` cas's expected value, that is neither the
    initial value nor written by an operation that may have happened before
    the observation completed.
    """
    writers: dict[str | None, list[Op]] = {}
    failed: dict[str | None, list[Op]] = {}
    for op in ops:
        if is_write(op):
            (writers if may_have_happened(op) else failed).setdefault(op.value, []).append(op)
    for op in sorted(ops, key=lambda o: (o.invoke, o.index)):
        if op.outcome != "ok":
            continue
        if op.kind == "read" and op.consistency == "linearizable":
            seen, what = op.result, "read"
        elif op.kind == "cas":
            seen, what = op.expected, "cas expected"
        else:
            continue
        if seen == initial:
            continue
        candidates = writers.get(seen, [])
        if not candidates:
            by_failed = failed.get(seen, [])
            why = "only by an operation that failed" if by_failed else "by no operation"
            return (
                f"#{op.index} {what} {seen!r}, a value written {why}",
                describe_all([op, *by_failed]),
            )
        if all(precedes(op, writer) for writer in candidates):
            return (
                f"#{op.index} {what} {seen!r} before any write of it was invoked",
                describe_all([op, *candidates]),
            )
    return None


def check_key(
    ops: Sequence[Op], initial: str | None = None, *, max_steps: int = DEFAULT_MAX_STEPS
) -> KeyResult:
    """Whether one key's history is linearizable, as a register.

    ``ops`` are the operations of a single key (any order; the irrelevant
    ones, such as weak or failed reads and failed writes, are ignored);
    ``initial`` is the register's value before the history (None: absent).
    Gives up with verdict ``too_hard`` (not a pass) after ``max_steps``
    search steps.
    """
    key = single_key(ops)
    considered = _linearizability_ops(ops)
    found = _precheck(ops, initial)
    if found is not None:
        message, excerpt = found
        return KeyResult(key, "nonlinearizable", len(considered), 0, message, excerpt)
    kept, observed = _kept(considered)
    found_order = find_linearization(kept, initial, observed, max_steps)
    return KeyResult(
        key,
        found_order.verdict,
        len(considered),
        found_order.steps,
        found_order.message,
        found_order.excerpt,
    )


def _kept(considered: list[Op]) -> tuple[list[Op], set[str | None]]:
    """Drop the ``unknown`` writes/cas whose value nothing could observe.

    Returns the operations kept and the values some kept operation observes
    (a read's result, a cas's expected value).
    """
    observed: set[str | None] = set()
    for op in considered:
        if op.outcome == "ok":
            if op.kind == "read":
                observed.add(op.result)
            elif op.kind == "cas":
                observed.add(op.expected)
    optional = [op for op in considered if op.outcome != "ok"]
    kept: set[int] = set()
    changed = True
    while changed:
        changed = False
        for position, op in enumerate(optional):
            if position not in kept and op.value in observed:
                kept.add(position)
                changed = True
                if op.kind == "cas":
                    observed.add(op.expected)
    ops = [op for op in considered if op.outcome == "ok"]
    ops += [op for position, op in enumerate(optional) if position in kept]
    return ops, observed
