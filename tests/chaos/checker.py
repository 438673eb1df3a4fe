"""Checks a history of register operations (see ``history.py``) for anomalies.

Every key is an independent register (linearizability is compositional, so
each key is checked on its own). Four checks:

- ``check_key``: linearizability of one key, over its writes and
  compare-and-sets (any outcome but ``fail``) and its ``ok`` reads whose
  consistency is ``linearizable``. A Wing & Gong / Lowe style depth-first
  search over the minimal operations, with the event list of Lowe's
  just-in-time linearization (an operation is placed only while no pending
  required operation has returned) and memoization of (set of placed
  operations, register value), as in Porcupine.
- ``check_stale_reads``: reads served with weaker consistency (``stale``,
  ``leader``) may be old, but never invented: each returned the initial value
  or a value some write/cas that may have happened had begun to write.
- ``check_lost_writes``: against the value of a final linearizable read after
  the cluster healed, no acknowledged write was lost.
- ``check_history`` runs them all, key by key, and returns a ``Report``.

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

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from tests.chaos.history import Op

Verdict = Literal["linearizable", "nonlinearizable", "too_hard"]
AnomalyKind = Literal["nonlinearizable", "impossible_stale_read", "lost_write", "too_hard"]
ANOMALY_KINDS: tuple[AnomalyKind, ...] = (
    "nonlinearizable",
    "impossible_stale_read",
    "lost_write",
    "too_hard",
)

#: Default bound on the search steps for one key (a step places an operation,
#: skips a candidate or backtracks). A few thousand realistic operations need
#: well under a tenth of this when they are linearizable.
DEFAULT_MAX_STEPS = 5_000_000

#: How many placed operations before the stuck point a failure excerpt shows.
EXCERPT_PREFIX = 6
#: At most this many operations concurrent with the stuck one are shown.
EXCERPT_CONCURRENT = 12

_READ, _WRITE, _CAS = 0, 1, 2
_KIND_CODE = {"read": _READ, "write": _WRITE, "cas": _CAS}


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


@dataclass
class Anomaly:
    """One problem found in a history, with the operations that show it."""

    kind: AnomalyKind
    key: str
    message: str
    excerpt: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """The anomaly as a few lines of text."""
        lines = [f"{self.kind} on {self.key!r}: {self.message}"]
        lines.extend(f"    {line}" for line in self.excerpt)
        return "\n".join(lines)


@dataclass
class Report:
    """Everything ``check_history`` found.

    ``counts`` has ``ops`` (all operations), ``keys``, ``linearizability_ops``
    (operations considered by ``check_key``), ``stale_reads`` (weak reads
    checked), ``acked_writes`` (acknowledged writes checked against a final
    value) and one entry per anomaly kind. ``keys`` has each key's
    linearizability result.
    """

    anomalies: list[Anomaly] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    keys: dict[str, KeyResult] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no anomaly was found and every key could be decided."""
        return not self.anomalies

    @property
    def checked_ops(self) -> int:
        """How many operations some check examined: those of the
        linearizability checks plus the weak reads."""
        return self.counts.get("linearizability_ops", 0) + self.counts.get("stale_reads", 0)

    def summary(self) -> str:
        """A human-readable account: the counts, then every anomaly."""
        head = ", ".join(f"{name}={value}" for name, value in self.counts.items())
        lines = [("OK" if self.ok else "ANOMALIES") + f": {head}"]
        lines.extend(anomaly.describe() for anomaly in self.anomalies)
        return "\n".join(lines)


def _precedes(first: Op, second: Op) -> bool:
    """True when ``first`` certainly completed before ``second`` was invoked."""
    return first.complete is not None and first.complete < second.invoke


def _may_have_happened(op: Op) -> bool:
    return op.outcome in ("ok", "unknown")


def _writes(op: Op) -> bool:
    return op.kind in ("write", "cas")


def _describe_all(ops: Iterable[Op]) -> list[str]:
    unique = {id(op): op for op in ops}.values()
    return [op.describe() for op in sorted(unique, key=lambda o: (o.invoke, o.index))]


def _single_key(ops: Sequence[Op]) -> str:
    keys = {op.key for op in ops}
    if len(keys) > 1:
        raise ValueError(f"expected the operations of one key, got keys {sorted(keys)}")
    return next(iter(keys)) if keys else ""


def _linearizability_ops(ops: Iterable[Op]) -> list[Op]:
    """The operations ``check_key`` considers, before pruning."""
    return [
        op
        for op in ops
        if (_writes(op) and _may_have_happened(op))
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
        if _writes(op):
            (writers if _may_have_happened(op) else failed).setdefault(op.value, []).append(op)
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
                _describe_all([op, *by_failed]),
            )
        if all(_precedes(op, writer) for writer in candidates):
            return (
                f"#{op.index} {what} {seen!r} before any write of it was invoked",
                _describe_all([op, *candidates]),
            )
    return None


@dataclass
class _Stuck:
    """The deepest point the search reached before getting stuck."""

    depth: int
    placed_tail: list[int]
    value: int
    blocked: int
    concurrent: list[int]


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
    key = _single_key(ops)
    considered = _linearizability_ops(ops)
    found = _precheck(ops, initial)
    if found is not None:
        message, excerpt = found
        return KeyResult(key, "nonlinearizable", len(considered), 0, message, excerpt)
    return _search(key, considered, initial, max_steps)


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


def _search(key: str, considered: list[Op], initial: str | None, max_steps: int) -> KeyResult:
    """The depth-first search (see the module's docstring), on operations
    that passed the precheck."""
    kept, observed = _kept(considered)
    ops = sorted(kept, key=lambda o: (o.invoke, o.index))
    count = len(ops)

    # Register values as small integers: 0 is the initial value, 1 stands
    # for every value nothing observes.
    unobserved = 1
    ids: dict[str | None, int] = {initial: 0}
    labels: list[str] = [repr(initial), "a value no read or cas observes"]

    def value_id(value: str | None) -> int:
        if value != initial and value not in observed:
            return unobserved
        if value not in ids:
            ids[value] = len(labels)
            labels.append(repr(value))
        return ids[value]

    kind = [_KIND_CODE[op.kind] for op in ops]
    # read: the value seen; write/cas: the value written.
    val = [value_id(op.result if op.kind == "read" else op.value) for op in ops]
    # cas: the value expected (-1 for others).
    exp = [value_id(op.expected) if op.kind == "cas" else -1 for op in ops]
    required = [op.outcome == "ok" for op in ops]
    absorbable = [required[i] and kind[i] == _WRITE and val[i] == unobserved for i in range(count)]
    # The memo holds Zobrist hashes of (placed set, value, flag): 128 random
    # bits per operation and per value, XORed, so a configuration costs one
    # small integer whatever the history's length (a false match, which could
    # only turn a pass into a failure, has odds far below 2**-64).
    rng = random.Random(0x5EED)
    op_key = [rng.getrandbits(128) for _ in range(count)]
    value_key = [rng.getrandbits(128) for _ in range(len(labels))]
    flag_key = rng.getrandbits(128)

    # Lowe's event list: calls, and returns of the required operations (an
    # ``unknown`` one never has to be placed). At equal times calls come
    # first, so touching intervals count as concurrent.
    events: list[tuple[float, int, int]] = []
    for i, op in enumerate(ops):
        events.append((op.invoke, 0, i))
        if required[i]:
            end = math.inf if op.complete is None else max(op.complete, op.invoke)
            events.append((end, 1, i))
    events.sort()
    size = len(events) + 1
    nxt = [-1] * size
    prv = [-1] * size
    node_op = [-1] * size
    is_call = [False] * size
    call_node = [-1] * count
    ret_node = [-1] * count
    for position, (_, typ, i) in enumerate(events, start=1):
        node_op[position] = i
        is_call[position] = typ == 0
        prv[position] = position - 1
        nxt[position - 1] = position
        if typ == 0:
            call_node[i] = position
        else:
            ret_node[i] = position
    ret_of = [-1] * size
    for i in range(count):
        ret_of[call_node[i]] = ret_node[i]
    no_absorbed: tuple[int, ...] = ()

    # A frame: the call node placed, the value and flag before it, whether it
    # was a forced read (no alternative to explore when backtracking), and
    # the call nodes of the writes absorbed before it.
    stack: list[tuple[int, int, bool, bool, tuple[int, ...]]] = []
    cache: set[int] = set()
    placed = 0  # Zobrist hash of the placed operations
    value = 0  # the register's value
    # Set after placing an ``unknown`` write/cas: the next operation placed
    # must observe its value.
    must_observe = False
    # Required operations left to place, absorbable writes aside.
    remaining = sum(1 for i in range(count) if required[i] and not absorbable[i])
    steps = 0
    stuck: _Stuck | None = None
    fresh = True  # at a configuration not yet swept for a forced read
    entry = nxt[0]

    while remaining:
        steps += 1
        if steps > max_steps:
            return KeyResult(
                key,
                "too_hard",
                len(considered),
                steps - 1,
                f"search gave up after {max_steps} steps ({count} operations,"
                f" at most {stuck.depth if stuck else 0} placed in a row);"
                " neither proved nor refuted",
                _stuck_excerpt(ops, stuck) if stuck else [],
            )
        blocked = False
        if fresh:
            # Place a read that can be placed now, with no alternative.
            fresh = False
            node = nxt[0]
            while node != -1 and is_call[node]:
                i = node_op[node]
                if kind[i] == _READ and val[i] == value:
                    break
                node = nxt[node]
            else:
                node = -1
            if node != -1:
                i = node_op[node]
                config = placed ^ op_key[i] ^ value_key[value]
                if config in cache:
                    blocked = True
                else:
                    cache.add(config)
                    stack.append((node, value, must_observe, True, no_absorbed))
                    placed ^= op_key[i]
                    must_observe = False
                    # Lift the read's call and return out of the event list.
                    after = nxt[node]
                    nxt[prv[node]] = after
                    prv[after] = prv[node]
                    n = ret_of[node]
                    after = nxt[n]
                    nxt[prv[n]] = after
                    if after != -1:
                        prv[after] = prv[n]
                    remaining -= 1
                    fresh = True
                    continue
            else:
                entry = nxt[0]
        if not blocked:
            if is_call[entry]:
                i = node_op[entry]
                k = kind[i]
                if (
                    k != _READ
                    and not absorbable[i]
                    and ((k == _WRITE and not must_observe) or exp[i] == value)
                ):
                    new_flag = not required[i]
                    new_placed = placed ^ op_key[i]
                    absorbed = no_absorbed
                    if k == _WRITE:
                        absorbed = tuple(_minimal_absorbable(nxt, is_call, node_op, absorbable))
                        for node in absorbed:
                            new_placed ^= op_key[node_op[node]]
                    config = new_placed ^ value_key[val[i]]
                    if new_flag:
                        config ^= flag_key
                    if config not in cache:
                        cache.add(config)
                        stack.append((entry, value, must_observe, False, absorbed))
                        placed = new_placed
                        value = val[i]
                        must_observe = new_flag
                        for node in (*absorbed, entry):
                            after = nxt[node]
                            nxt[prv[node]] = after
                            if after != -1:
                                prv[after] = prv[node]
                            n = ret_of[node]
                            if n != -1:
                                after = nxt[n]
                                nxt[prv[n]] = after
                                if after != -1:
                                    prv[after] = prv[n]
                        if required[i]:
                            remaining -= 1
                        fresh = True
                        continue
                entry = nxt[entry]
                continue
            i = node_op[entry]
            if absorbable[i] and not must_observe:
                # An absorbable write that no write can follow any more in
                # time to absorb it: place it now (and the other minimal
                # ones), leaving an unobserved value; nothing else is left to
                # try here.
                absorbed = tuple(_minimal_absorbable(nxt, is_call, node_op, absorbable))
                new_placed = placed
                for node in absorbed:
                    new_placed ^= op_key[node_op[node]]
                config = new_placed ^ value_key[unobserved]
                if config not in cache:
                    cache.add(config)
                    stack.append((absorbed[0], value, must_observe, True, absorbed[1:]))
                    placed = new_placed
                    value = unobserved
                    for node in (*absorbed[1:], absorbed[0]):
                        _lift(nxt, prv, ret_of, node)
                    fresh = True
                    continue
            # A required operation returned before it could be placed.
            if stuck is None or len(stack) > stuck.depth:
                stuck = _stuck_at(stack, node_op, nxt, is_call, value, entry)
        # Backtrack to the last choice that has an alternative.
        while True:
            if not stack:
                return KeyResult(
                    key,
                    "nonlinearizable",
                    len(considered),
                    steps,
                    _stuck_message(ops, labels, stuck),
                    _stuck_excerpt(ops, stuck) if stuck else [],
                )
            node, value, must_observe, was_forced, absorbed = stack.pop()
            i = node_op[node]
            if required[i] and not absorbable[i]:
                remaining += 1
            # Put back each return, then its call, in the reverse order of
            # lifting.
            for m in (node, *reversed(absorbed)):
                placed ^= op_key[node_op[m]]
                n = ret_of[m]
                if n != -1:
                    nxt[prv[n]] = n
                    after = nxt[n]
                    if after != -1:
                        prv[after] = n
                nxt[prv[m]] = m
                after = nxt[m]
                if after != -1:
                    prv[after] = m
            if not was_forced:
                entry = nxt[node]
                break
    return KeyResult(key, "linearizable", len(considered), steps)


def _lift(nxt: list[int], prv: list[int], ret_of: list[int], node: int) -> None:
    """Unlink an operation's call node, and its return node if any."""
    for n in (node, ret_of[node]):
        if n != -1:
            after = nxt[n]
            nxt[prv[n]] = after
            if after != -1:
                prv[after] = prv[n]


def _minimal_absorbable(
    nxt: list[int], is_call: list[bool], node_op: list[int], absorbable: list[bool]
) -> list[int]:
    """The call nodes of the absorbable writes not placed yet and minimal
    (invoked before the first pending return)."""
    found: list[int] = []
    node = nxt[0]
    while node != -1 and is_call[node]:
        if absorbable[node_op[node]]:
            found.append(node)
        node = nxt[node]
    return found


def _stuck_at(
    stack: list[tuple[int, int, bool, bool, tuple[int, ...]]],
    node_op: list[int],
    nxt: list[int],
    is_call: list[bool],
    value: int,
    blocked_node: int,
) -> _Stuck:
    concurrent: list[int] = []
    node = nxt[0]
    while node != -1 and node != blocked_node:
        if is_call[node]:
            concurrent.append(node_op[node])
        node = nxt[node]
    return _Stuck(
        depth=len(stack),
        placed_tail=[node_op[frame[0]] for frame in stack[-EXCERPT_PREFIX:]],
        value=value,
        blocked=node_op[blocked_node],
        concurrent=concurrent,
    )


def _stuck_message(ops: list[Op], labels: list[str], stuck: _Stuck | None) -> str:
    if stuck is None:
        return "no linearization exists"
    blocked = ops[stuck.blocked]
    if blocked.kind == "read":
        what = f"a read of {blocked.result!r}"
    elif blocked.kind == "cas":
        what = f"a cas expecting {blocked.expected!r}"
    else:
        what = f"a write of {blocked.value!r}"
    others = len([i for i in stuck.concurrent if i != stuck.blocked])
    return (
        f"no linearization: the longest linearizable prefix places {stuck.depth} of"
        f" {len(ops)} operations and leaves the register at {labels[stuck.value]};"
        f" then #{blocked.index}, {what}, cannot be placed before it returns, whichever"
        f" of the {others} operation(s) concurrent with it go first"
    )


def _stuck_excerpt(ops: list[Op], stuck: _Stuck) -> list[str]:
    chosen = [
        *stuck.placed_tail,
        stuck.blocked,
        *[i for i in stuck.concurrent if i != stuck.blocked][:EXCERPT_CONCURRENT],
    ]
    return _describe_all(ops[i] for i in chosen)


def check_stale_reads(ops: Sequence[Op], initial: str | None = None) -> list[Anomaly]:
    """Weak reads (consistency ``stale`` or ``leader``) may be old, not invented.

    Every ``ok`` read whose consistency is not ``linearizable`` must have
    returned ``initial`` (the register could still have been in its initial
    state on a lagging replica) or a value written by a write/cas that may
    have happened (``ok`` or ``unknown``) and was invoked before the read
    completed. ``ops`` may span several keys.
    """
    writers: dict[tuple[str, str | None], list[Op]] = {}
    failed: dict[tuple[str, str | None], list[Op]] = {}
    for op in ops:
        if _writes(op):
            target = writers if _may_have_happened(op) else failed
            target.setdefault((op.key, op.value), []).append(op)
    anomalies: list[Anomaly] = []
    for op in ops:
        if op.kind != "read" or op.outcome != "ok" or op.consistency == "linearizable":
            continue
        if op.result == initial:
            continue
        candidates = writers.get((op.key, op.result), [])
        if any(not _precedes(op, writer) for writer in candidates):
            continue
        if candidates:
            why = "every write of it was invoked after the read completed"
        elif failed.get((op.key, op.result)):
            why = "only a failed operation wrote it"
        else:
            why = "no operation wrote it"
        anomalies.append(
            Anomaly(
                "impossible_stale_read",
                op.key,
                f"#{op.index} {op.consistency} read returned {op.result!r}: {why}",
                _describe_all([op, *candidates, *failed.get((op.key, op.result), [])]),
            )
        )
    return anomalies


def check_lost_writes(
    ops: Sequence[Op], final_value: str | None, initial: str | None = None
) -> list[Anomaly]:
    """No acknowledged write/cas of one key was lost, given its final value.

    ``final_value`` is what a linearizable read returned after the faults
    healed and every operation had ended. The operation F that wrote it must
    be the last to change the register, so every ``ok`` write/cas W other
    than F must be able to precede F: F (``ok`` or ``unknown``) did not
    complete before W was invoked. (In particular some write/cas that may
    have happened did not complete before W was invoked, so it could have
    overwritten W.) A final value that is the initial one can follow no
    acknowledged write (there are no deletes); a final value no operation
    that may have happened wrote is reported as ``nonlinearizable``.
    """
    key = _single_key(ops)
    writes = [op for op in ops if _writes(op)]
    finals = [op for op in writes if _may_have_happened(op) and op.value == final_value]
    if final_value != initial and not finals:
        failed = [op for op in writes if op.value == final_value]
        why = "only a failed operation wrote it" if failed else "no operation wrote it"
        return [
            Anomaly(
                "nonlinearizable",
                key,
                f"the final read returned {final_value!r}, but {why}",
                _describe_all(failed),
            )
        ]
    anomalies: list[Anomaly] = []
    for op in writes:
        if op.outcome != "ok" or op.value == final_value:
            continue
        if any(final is not op and not _precedes(final, op) for final in finals):
            continue
        overwriters = [
            other
            for other in writes
            if other is not op and _may_have_happened(other) and not _precedes(other, op)
        ]
        if finals:
            why = (
                f"the final value {final_value!r} was written by an operation that"
                f" completed before #{op.index} was invoked"
            )
        else:
            why = f"the register ended with its initial value {final_value!r}"
        if overwriters:
            why += (
                f" ({len(overwriters)} other write(s)/cas could have overwritten it,"
                f" but then the final value could not be {final_value!r})"
            )
        anomalies.append(
            Anomaly(
                "lost_write",
                key,
                f"acknowledged {op.kind} #{op.index} of {op.value!r} was lost: {why}",
                _describe_all([op, *finals, *overwriters[:EXCERPT_CONCURRENT]]),
            )
        )
    return anomalies


def check_history(
    ops: Sequence[Op],
    final_values: Mapping[str, str | None] | None = None,
    *,
    initial_values: Mapping[str, str | None] | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
) -> Report:
    """Every check, key by key.

    ``final_values`` maps keys to the value of a final linearizable read
    after healing (keys missing from it skip the lost-write check);
    ``initial_values`` maps keys to their value before the history (default
    None: absent). ``max_steps`` bounds each key's linearizability search.
    """
    by_key: dict[str, list[Op]] = {}
    for op in ops:
        by_key.setdefault(op.key, []).append(op)
    for key in final_values or {}:
        by_key.setdefault(key, [])
    report = Report()
    counts: dict[str, int] = {
        "ops": len(ops),
        "keys": len(by_key),
        "linearizability_ops": 0,
        "stale_reads": 0,
        "acked_writes": 0,
    }
    counts.update(dict.fromkeys(ANOMALY_KINDS, 0))
    for key in sorted(by_key):
        key_ops = by_key[key]
        initial = (initial_values or {}).get(key)
        result = check_key(key_ops, initial, max_steps=max_steps)
        report.keys[key] = result
        counts["linearizability_ops"] += result.ops_checked
        if result.verdict != "linearizable":
            report.anomalies.append(Anomaly(result.verdict, key, result.message, result.excerpt))
        counts["stale_reads"] += sum(
            1
            for op in key_ops
            if op.kind == "read" and op.outcome == "ok" and op.consistency != "linearizable"
        )
        report.anomalies.extend(check_stale_reads(key_ops, initial))
        if final_values is not None and key in final_values:
            counts["acked_writes"] += sum(1 for op in key_ops if _writes(op) and op.outcome == "ok")
            report.anomalies.extend(check_lost_writes(key_ops, final_values[key], initial))
    for anomaly in report.anomalies:
        counts[anomaly.kind] += 1
    report.counts = counts
    return report
