"""Checks a history of register operations (see ``history.py``) for anomalies.

Every key is an independent register, checked on its own. Four checks:

- ``check_key`` (linearizability.py, re-exported here): linearizability of one
  key, over its writes and compare-and-sets (any outcome but ``fail``) and its
  ``ok`` reads whose consistency is ``linearizable``, by a Wing & Gong / Lowe
  style search (described there).
- ``check_stale_reads``: reads served with weaker consistency (``stale``,
  ``leader``) may be old, but never invented: each returned the initial value
  or a value some write/cas that may have happened had begun to write.
- ``check_lost_writes``: against the value of a final linearizable read after
  the cluster healed, no acknowledged write was lost.
- ``check_history`` runs them all, key by key, and returns a ``Report``.

Semantics of outcomes: ``ok`` happened exactly once between invocation and
completion; ``fail`` certainly had no effect; ``unknown`` may have happened
once at any time after its invocation, or never. Reads with outcome ``fail``
or ``unknown`` carry no information. Written values are unique in a history,
so a value names the write that produced it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from tests.chaos.rig.history import (
    Op,
    describe_all,
    is_write,
    may_have_happened,
    precedes,
    single_key,
)
from tests.chaos.rig.linearizability import DEFAULT_MAX_STEPS, KeyResult, check_key
from tests.chaos.rig.linearization_search import EXCERPT_CONCURRENT, EXCERPT_PREFIX, Verdict

__all__ = [
    "ANOMALY_KINDS",
    "DEFAULT_MAX_STEPS",
    "EXCERPT_CONCURRENT",
    "EXCERPT_PREFIX",
    "Anomaly",
    "AnomalyKind",
    "KeyResult",
    "Report",
    "Verdict",
    "check_history",
    "check_key",
    "check_lost_writes",
    "check_stale_reads",
]

AnomalyKind = Literal["nonlinearizable", "impossible_stale_read", "lost_write", "too_hard"]
ANOMALY_KINDS: tuple[AnomalyKind, ...] = (
    "nonlinearizable",
    "impossible_stale_read",
    "lost_write",
    "too_hard",
)


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
        if is_write(op):
            target = writers if may_have_happened(op) else failed
            target.setdefault((op.key, op.value), []).append(op)
    anomalies: list[Anomaly] = []
    for op in ops:
        if op.kind != "read" or op.outcome != "ok" or op.consistency == "linearizable":
            continue
        if op.result == initial:
            continue
        candidates = writers.get((op.key, op.result), [])
        if any(not precedes(op, writer) for writer in candidates):
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
                describe_all([op, *candidates, *failed.get((op.key, op.result), [])]),
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
    key = single_key(ops)
    writes = [op for op in ops if is_write(op)]
    finals = [op for op in writes if may_have_happened(op) and op.value == final_value]
    if final_value != initial and not finals:
        failed = [op for op in writes if op.value == final_value]
        why = "only a failed operation wrote it" if failed else "no operation wrote it"
        return [
            Anomaly(
                "nonlinearizable",
                key,
                f"the final read returned {final_value!r}, but {why}",
                describe_all(failed),
            )
        ]
    anomalies: list[Anomaly] = []
    for op in writes:
        if op.outcome != "ok" or op.value == final_value:
            continue
        if any(final is not op and not precedes(final, op) for final in finals):
            continue
        overwriters = [
            other
            for other in writes
            if other is not op and may_have_happened(other) and not precedes(other, op)
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
                describe_all([op, *finals, *overwriters[:EXCERPT_CONCURRENT]]),
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
            counts["acked_writes"] += sum(
                1 for op in key_ops if is_write(op) and op.outcome == "ok"
            )
            report.anomalies.extend(check_lost_writes(key_ops, final_values[key], initial))
    for anomaly in report.anomalies:
        counts[anomaly.kind] += 1
    report.counts = counts
    return report
