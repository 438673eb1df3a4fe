"""The history checker on known-good and known-bad histories, random
histories generated from real sequential executions, and a brute-force
cross-check on small random histories."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from tests.chaos.rig.checker import (
    check_history,
    check_key,
    check_lost_writes,
    check_stale_reads,
)
from tests.chaos.rig.history import Kind, Op

KINDS: list[Kind] = ["read", "write", "cas"]


class H:
    """A terse builder of one key's history (times are given explicitly)."""

    def __init__(self, key: str = "k") -> None:
        self.key = key
        self.ops: list[Op] = []

    def _add(self, op: Op) -> Op:
        self.ops.append(op)
        return op

    def write(
        self, p: int, value: str, invoke: float, complete: float | None, outcome: str = "ok"
    ) -> Op:
        return self._add(
            Op(
                len(self.ops),
                p,
                self.key,
                "write",
                value=value,
                invoke=invoke,
                complete=None if outcome == "unknown" else complete,
                outcome=outcome,  # type: ignore[arg-type]
            )
        )

    def cas(
        self,
        p: int,
        expected: str | None,
        value: str,
        invoke: float,
        complete: float | None,
        outcome: str = "ok",
    ) -> Op:
        return self._add(
            Op(
                len(self.ops),
                p,
                self.key,
                "cas",
                value=value,
                expected=expected,
                invoke=invoke,
                complete=None if outcome == "unknown" else complete,
                outcome=outcome,  # type: ignore[arg-type]
            )
        )

    def read(
        self,
        p: int,
        result: str | None,
        invoke: float,
        complete: float | None,
        consistency: str = "linearizable",
        outcome: str = "ok",
    ) -> Op:
        return self._add(
            Op(
                len(self.ops),
                p,
                self.key,
                "read",
                consistency=consistency,
                invoke=invoke,
                complete=None if outcome == "unknown" else complete,
                outcome=outcome,  # type: ignore[arg-type]
                result=result if outcome == "ok" else None,
            )
        )


def verdict(h: H, initial: str | None = None) -> str:
    return check_key(h.ops, initial).verdict


# --- known-good histories ---------------------------------------------------


def test_empty_and_initial_reads() -> None:
    assert check_key([]).ok
    h = H()
    h.read(0, None, 0, 1)
    assert verdict(h) == "linearizable"
    h = H()
    h.read(0, "x0", 0, 1)
    h.write(1, "a", 2, 3)
    h.read(0, "a", 4, 5)
    assert verdict(h, initial="x0") == "linearizable"
    assert verdict(h) == "nonlinearizable"


def test_sequential() -> None:
    h = H()
    h.read(0, None, 0, 1)
    h.write(0, "a", 1, 2)
    h.read(1, "a", 3, 4)
    h.write(1, "b", 5, 6)
    h.read(0, "b", 7, 8)
    h.cas(0, "b", "c", 9, 10)
    h.read(1, "c", 11, 12)
    assert verdict(h) == "linearizable"


@pytest.mark.parametrize("seen", ["a", "b"])
def test_concurrent_writes_read_sees_either(seen: str) -> None:
    h = H()
    h.write(0, "a", 0, 5)
    h.write(1, "b", 1, 6)
    h.read(2, seen, 7, 8)
    h.read(3, seen, 9, 10)
    assert verdict(h) == "linearizable"


def test_concurrent_reads_see_both_orders_of_concurrent_writes() -> None:
    h = H()
    h.write(0, "a", 0, 10)
    h.write(1, "b", 0, 10)
    h.read(2, "a", 1, 2)
    h.read(3, "b", 3, 4)
    h.read(2, "b", 11, 12)
    assert verdict(h) == "linearizable"


@pytest.mark.parametrize("seen", ["a", "b"])
def test_read_concurrent_with_write(seen: str) -> None:
    h = H()
    h.write(0, "a", 0, 1)
    h.write(1, "b", 2, 5)
    h.read(2, seen, 3, 4)
    assert verdict(h) == "linearizable"


@pytest.mark.parametrize("seen", ["a", "b"])
def test_unknown_write_visible_or_not(seen: str) -> None:
    h = H()
    h.write(0, "a", 0, 1)
    h.write(1, "b", 2, None, outcome="unknown")
    h.read(2, seen, 10, 11)
    h.read(2, seen, 100, 101)
    assert verdict(h) == "linearizable"


def test_unknown_write_may_take_effect_long_after() -> None:
    h = H()
    h.write(1, "b", 0, None, outcome="unknown")
    h.write(0, "a", 1, 2)
    h.read(2, "a", 3, 4)
    h.read(2, "b", 50, 51)
    assert verdict(h) == "linearizable"


def test_failed_write_and_read_and_unknown_read_ignored() -> None:
    h = H()
    h.write(0, "a", 0, 1)
    h.write(1, "x", 2, 3, outcome="fail")
    h.read(2, None, 4, 5, outcome="unknown")
    h.read(2, None, 4, 5, outcome="fail")
    h.read(2, "a", 6, 7)
    assert verdict(h) == "linearizable"


def test_cas_chain() -> None:
    h = H()
    h.cas(0, None, "a", 0, 1)
    h.cas(1, "a", "b", 2, 5)
    h.cas(2, "a", "c", 2, 5, outcome="fail")
    h.read(3, "b", 3, 6)
    h.cas(0, "b", "d", 6, 8, outcome="unknown")
    h.cas(1, "d", "e", 7, 9)
    h.read(2, "e", 10, 11)
    assert verdict(h) == "linearizable"


def test_failed_cas_constrains_nothing() -> None:
    # The compare held, yet the cas was refused: fail means no effect only.
    h = H()
    h.write(0, "a", 0, 1)
    h.cas(1, "a", "b", 2, 3, outcome="fail")
    h.read(2, "a", 4, 5)
    assert verdict(h) == "linearizable"


def test_weak_reads_are_not_checked_for_recency() -> None:
    h = H()
    h.write(0, "a", 0, 1)
    h.write(0, "b", 2, 3)
    h.read(1, "a", 4, 5, consistency="stale")
    h.read(1, "a", 6, 7, consistency="leader")
    h.read(1, None, 8, 9, consistency="stale")
    assert verdict(h) == "linearizable"
    assert check_stale_reads(h.ops) == []
    assert check_history(h.ops, {"k": "b"}).ok


def test_touching_intervals_are_concurrent() -> None:
    h = H()
    h.write(0, "a", 0, 1)
    h.write(1, "b", 1, 2)
    h.read(2, "a", 2, 3)
    assert verdict(h) == "linearizable"


# --- known-bad histories ----------------------------------------------------


def test_classic_stale_read() -> None:
    h = H()
    h.write(0, "a", 0, 1)
    h.write(1, "b", 2, 3)
    stale = h.read(2, "a", 4, 5)
    result = check_key(h.ops)
    assert result.verdict == "nonlinearizable"
    assert stale.describe() in result.excerpt
    assert "longest linearizable prefix" in result.message


def test_lost_update_two_cas_from_same_value() -> None:
    h = H()
    h.write(0, "a", 0, 1)
    h.cas(1, "a", "b", 2, 4)
    h.cas(2, "a", "c", 3, 5)
    assert verdict(h) == "nonlinearizable"


def test_cas_whose_compare_cannot_hold() -> None:
    h = H()
    h.write(0, "a", 0, 1)
    h.write(0, "b", 2, 3)
    h.cas(1, "a", "c", 4, 5)
    assert verdict(h) == "nonlinearizable"


def test_read_of_never_written_value() -> None:
    h = H()
    h.write(0, "a", 0, 1)
    h.read(1, "zzz", 2, 3)
    result = check_key(h.ops)
    assert result.verdict == "nonlinearizable"
    assert "by no operation" in result.message


def test_read_of_failed_write() -> None:
    h = H()
    h.write(0, "a", 0, 1, outcome="fail")
    h.read(1, "a", 2, 3)
    result = check_key(h.ops)
    assert result.verdict == "nonlinearizable"
    assert "failed" in result.message


def test_read_from_the_future() -> None:
    h = H()
    h.read(1, "a", 0, 1)
    h.write(0, "a", 2, None, outcome="unknown")
    assert verdict(h) == "nonlinearizable"


def test_read_your_write_violation() -> None:
    h = H()
    h.write(0, "a", 0, 1)
    h.write(1, "b", 2, 3)
    h.read(2, "b", 2.5, 3.5)
    h.read(1, "a", 4, 5)
    assert verdict(h) == "nonlinearizable"


def test_write_unhappening() -> None:
    h = H()
    h.write(0, "a", 0, 1)
    h.write(1, "b", 2, 10)
    h.read(2, "b", 3, 4)
    h.read(2, "a", 5, 6)
    result = check_key(h.ops)
    assert result.verdict == "nonlinearizable"


def test_unknown_write_seen_then_unseen() -> None:
    h = H()
    h.write(0, "a", 0, 1)
    h.write(1, "b", 2, None, outcome="unknown")
    h.read(2, "b", 3, 4)
    h.read(3, "a", 5, 6)
    assert verdict(h) == "nonlinearizable"


def test_concurrent_reads_disagree_on_write_order() -> None:
    # p2 sees a then b, p3 sees b then a: the writes cannot be ordered both ways.
    h = H()
    h.write(0, "a", 0, 10)
    h.write(1, "b", 0, 10)
    h.read(2, "a", 1, 2)
    h.read(2, "b", 3, 4)
    h.read(3, "b", 1, 2)
    h.read(3, "a", 3, 4)
    assert verdict(h) == "nonlinearizable"


def test_stale_reads_may_be_old_but_not_invented() -> None:
    h = H()
    h.write(0, "a", 0, 1)
    h.write(0, "b", 2, 3)
    h.write(0, "x", 4, 5, outcome="fail")
    h.read(1, "a", 10, 11, consistency="stale")
    h.read(1, None, 12, 13, consistency="leader")
    invented = h.read(1, "nope", 14, 15, consistency="stale")
    failed = h.read(1, "x", 16, 17, consistency="leader")
    future = h.read(1, "c", 18, 19, consistency="stale")
    h.write(0, "c", 20, 21)
    anomalies = check_stale_reads(h.ops)
    assert [a.kind for a in anomalies] == ["impossible_stale_read"] * 3
    for anomaly, read in zip(anomalies, [invented, failed, future], strict=True):
        assert read.describe() in anomaly.excerpt
        assert f"#{read.index} " in anomaly.message
    # The linearizability check ignores weak reads altogether.
    assert verdict(h) == "linearizable"
    report = check_history(h.ops)
    assert not report.ok
    assert report.counts["impossible_stale_read"] == 3
    assert report.counts["nonlinearizable"] == 0


def test_stale_read_of_unknown_write_is_allowed() -> None:
    h = H()
    h.write(0, "a", 0, None, outcome="unknown")
    h.read(1, "a", 1, 2, consistency="stale")
    assert check_stale_reads(h.ops) == []


# --- lost writes ------------------------------------------------------------


def test_lost_acknowledged_write() -> None:
    h = H()
    h.write(0, "a", 0, 1)
    lost = h.write(1, "b", 2, 3)
    anomalies = check_lost_writes(h.ops, "a")
    assert [a.kind for a in anomalies] == ["lost_write"]
    assert anomalies[0].excerpt[1] == lost.describe()
    # The final value is the initial one after an acknowledged write.
    assert [a.kind for a in check_lost_writes(h.ops, None)] == ["lost_write"] * 2


def test_not_lost_when_overwritten_or_concurrent() -> None:
    h = H()
    h.write(0, "a", 0, 5)
    h.write(1, "b", 2, 3)
    h.cas(2, "b", "c", 6, 7)
    h.write(3, "d", 8, None, outcome="unknown")
    assert check_lost_writes(h.ops, "d") == []
    assert check_lost_writes(h.ops, "c") == []
    # a may follow b (they overlap), but not c (a completed before c began).
    lost = check_lost_writes(h.ops, "a")
    assert [a.kind for a in lost] == ["lost_write"]
    assert "#2" in lost[0].message


def test_lost_write_despite_a_concurrent_overwriter() -> None:
    # b could have been overwritten by the unknown x, but the final value a
    # was written before b began: a cannot follow b.
    h = H()
    h.write(0, "a", 0, 1)
    h.write(1, "b", 2, 3)
    h.write(2, "x", 2.5, None, outcome="unknown")
    assert [a.kind for a in check_lost_writes(h.ops, "a")] == ["lost_write"]


def test_final_value_never_written() -> None:
    h = H()
    h.write(0, "a", 0, 1)
    h.write(0, "f", 2, 3, outcome="fail")
    assert [a.kind for a in check_lost_writes(h.ops, "zzz")] == ["nonlinearizable"]
    assert [a.kind for a in check_lost_writes(h.ops, "f")] == ["nonlinearizable"]


def test_check_history_lost_write_and_counts() -> None:
    h = H("x")
    h.write(0, "a", 0, 1)
    h.write(1, "b", 2, 3)
    g = H("y")
    g.write(0, "c", 0, 1)
    g.read(1, "c", 2, 3)
    report = check_history([*h.ops, *g.ops], {"x": "a", "y": "c"})
    assert not report.ok
    assert [(a.kind, a.key) for a in report.anomalies] == [("lost_write", "x")]
    assert report.counts["ops"] == 4
    assert report.counts["keys"] == 2
    assert report.counts["acked_writes"] == 3
    assert report.counts["lost_write"] == 1
    assert report.keys["x"].ok and report.keys["y"].ok
    assert "lost_write" in report.summary()
    assert check_history([*h.ops, *g.ops], {"x": "b", "y": "c"}).ok


def test_initial_values() -> None:
    h = H()
    h.cas(0, "init", "a", 0, 1)
    assert verdict(h) == "nonlinearizable"
    assert check_history(h.ops, {"k": "a"}, initial_values={"k": "init"}).ok


def test_too_hard_is_not_a_pass() -> None:
    # Sixteen concurrent writes, each seen by a concurrent read, then two
    # reads that cannot both be right: refuting it means trying the orders
    # of the writes (2**16 subsets), beyond a small budget.
    h = H()
    for i in range(16):
        h.write(i, f"v{i}", 0, 100)
        h.read(100 + i, f"v{i}", 0, 100)
    h.read(0, "v0", 101, 102)
    h.read(1, "v1", 103, 104)
    result = check_key(h.ops, max_steps=10_000)
    assert result.verdict == "too_hard"
    assert not result.ok
    assert result.steps == 10_000
    assert "gave up" in result.message
    report = check_history(h.ops, max_steps=10_000)
    assert [a.kind for a in report.anomalies] == ["too_hard"]
    assert report.counts["too_hard"] == 1
    assert not report.ok
    # Fewer writes: refuted within the default budget.
    small = [op for op in h.ops if op.index >= 20]
    assert check_key(small).verdict == "nonlinearizable"


def test_unobserved_concurrent_writes_are_cheap() -> None:
    h = H()
    for i in range(40):
        h.write(i, f"v{i}", 0, 100)
    h.read(0, "v3", 101, 102)
    h.read(1, "v4", 103, 104)
    result = check_key(h.ops)
    assert result.verdict == "nonlinearizable"
    assert result.steps < 1000
    h.ops.pop()
    assert check_key(h.ops).verdict == "linearizable"


def test_check_key_rejects_several_keys() -> None:
    with pytest.raises(ValueError):
        check_key(
            [
                Op(0, 0, "a", "write", value="x", invoke=0, complete=1, outcome="ok"),
                Op(1, 0, "b", "write", value="y", invoke=0, complete=1, outcome="ok"),
            ]
        )


# --- generated histories ----------------------------------------------------


def generate(
    rng: random.Random,
    n_ops: int,
    n_procs: int,
    key: str = "k",
    p_unknown: float = 0.05,
    p_refused: float = 0.03,
) -> tuple[list[Op], str | None]:
    """A history of a real sequential execution, with random concurrency.

    Each process issues one operation at a time; each operation takes effect
    at a random point inside its interval (an ``unknown`` one, if at all, at
    any later point). The register is run in the order of those points. Weak
    reads return some value the register held before. Returns the ops and
    the final value.
    """
    clock = [rng.uniform(0, 1) for _ in range(n_procs)]
    ops: list[Op] = []
    points: list[float] = []  # when each operation takes effect
    effects: list[bool] = []  # whether it may take effect at all
    for n in range(n_ops):
        p = min(range(n_procs), key=lambda q: clock[q])
        invoke = clock[p] + rng.expovariate(4.0)
        point = invoke + rng.uniform(0, 1)
        complete = point + rng.uniform(0, 1)
        kind: Kind = rng.choices(KINDS, [5, 3, 2])[0]
        op = Op(n, p, key, kind, invoke=invoke, complete=complete, outcome="ok")
        if kind == "read":
            op.consistency = rng.choices(["linearizable", "leader", "stale"], [6, 2, 2])[0]
        effect = True
        r = rng.random()
        if r < p_unknown:
            op.outcome, op.complete = "unknown", None
            effect = rng.random() < 0.5
            point = invoke + rng.uniform(0, 5)
        elif r < p_unknown + p_refused and kind != "read":
            op.outcome = "fail"
            effect = False
        clock[p] = complete
        ops.append(op)
        points.append(point)
        effects.append(effect)
    value: str | None = None
    held: list[str | None] = [None]
    written: list[str] = []
    for n in sorted(range(n_ops), key=lambda n: points[n]):
        op = ops[n]
        if op.kind == "read":
            if op.outcome == "ok":
                op.result = value if op.consistency == "linearizable" else rng.choice(held)
            continue
        op.value = f"v{n}"
        effect = effects[n]
        if op.kind == "cas":
            op.expected = rng.choice([value, value, rng.choice(held), *written[-3:]])
            if op.expected != value:
                effect = False
                if op.outcome == "ok":
                    op.outcome = "fail"
        if effect:
            value = op.value
            held.append(value)
            written.append(value)
    return ops, value


@pytest.mark.parametrize("seed", range(40))
def test_generated_histories_pass(seed: int) -> None:
    rng = random.Random(seed)
    ops, final = generate(rng, rng.randint(20, 300), rng.randint(1, 10))
    report = check_history(ops, {"k": final})
    assert report.ok, report.summary()


def _corruptible(ops: list[Op]) -> list[tuple[Op, Op]]:
    """(linearizable read, write/cas) pairs where the write began after the
    read ended."""
    reads = [op for op in ops if op.kind == "read" and op.outcome == "ok"]
    reads = [op for op in reads if op.consistency == "linearizable"]
    writes = [op for op in ops if op.kind != "read" and op.outcome != "fail"]
    return [
        (r, w) for r in reads for w in writes if r.complete is not None and w.invoke > r.complete
    ]


@pytest.mark.parametrize("seed", range(40))
def test_generated_histories_with_a_read_from_the_future_fail(seed: int) -> None:
    rng = random.Random(1000 + seed)
    ops, _ = generate(rng, rng.randint(20, 300), rng.randint(1, 10))
    pairs = _corruptible(ops)
    assert pairs
    read, write = rng.choice(pairs)
    read.result = write.value
    result = check_key(ops)
    assert result.verdict == "nonlinearizable"
    assert read.describe() in result.excerpt


@pytest.mark.parametrize("seed", range(40))
def test_generated_histories_with_an_overwritten_read_fail(seed: int) -> None:
    """Corrupt a read to a value overwritten before it began: the search
    itself (not the precheck) must refute it."""
    rng = random.Random(2000 + seed)
    ops, _ = generate(rng, rng.randint(20, 300), rng.randint(1, 10))
    acked = [op for op in ops if op.kind != "read" and op.outcome == "ok"]
    reads = [op for op in ops if op.kind == "read" and op.outcome == "ok"]
    reads = [op for op in reads if op.consistency == "linearizable"]
    candidates = [
        (r, old)
        for r in reads
        for old in acked
        for new in acked
        if old.complete is not None
        and new.complete is not None
        and r.complete is not None
        and old.complete < new.invoke
        and new.complete < r.invoke
        and r.result != old.value
    ]
    if not candidates:
        pytest.skip("no acked write overwritten before a read")
    read, old = rng.choice(candidates)
    read.result = old.value
    result = check_key(ops)
    assert result.verdict == "nonlinearizable", result
    assert result.steps > 0
    assert result.excerpt


def test_large_history_checks_quickly() -> None:
    rng = random.Random(7)
    ops, final = generate(rng, 2000, 8)
    result = check_key(ops)
    assert result.verdict == "linearizable", result
    assert check_history(ops, {"k": final}).ok


def test_many_keys_and_unknowns() -> None:
    rng = random.Random(8)
    ops: list[Op] = []
    finals: dict[str, str | None] = {}
    for k in range(5):
        key_ops, final = generate(rng, 400, 10, key=f"k{k}", p_unknown=0.2)
        ops += [replace(op, index=op.index + 10_000 * k) for op in key_ops]
        finals[f"k{k}"] = final
    report = check_history(ops, finals)
    assert report.ok, report.summary()
    assert report.counts["keys"] == 5


# --- brute-force cross-check ------------------------------------------------


def brute_force(ops: list[Op], initial: str | None = None) -> bool:
    """Any order of the required operations and some optional ones that
    respects real time and the register's semantics?"""
    considered = [
        op
        for op in ops
        if (op.kind != "read" and op.outcome != "fail")
        or (op.kind == "read" and op.outcome == "ok" and op.consistency == "linearizable")
    ]
    required = [op for op in considered if op.outcome == "ok"]
    optional = [op for op in considered if op.outcome != "ok"]
    for size in range(len(optional) + 1):
        for chosen in itertools.combinations(optional, size):
            for order in itertools.permutations([*required, *chosen]):
                if _valid(order, initial):
                    return True
    return False


def _valid(order: tuple[Op, ...], initial: str | None) -> bool:
    for a, b in itertools.combinations(order, 2):
        # b is placed after a: b must not have completed before a was invoked.
        if b.complete is not None and b.complete < a.invoke:
            return False
    value = initial
    for op in order:
        if op.kind == "read":
            if op.result != value:
                return False
        elif op.kind == "write":
            value = op.value
        else:
            if op.expected != value:
                return False
            value = op.value
    return True


def random_small_history(rng: random.Random, n: int) -> list[Op]:
    ops: list[Op] = []
    values: list[str | None] = [None]
    for i in range(n):
        kind = rng.choice(["read", "write", "cas"])
        invoke = rng.uniform(0, 10)
        complete = invoke + rng.uniform(0, 4)
        outcome = rng.choices(["ok", "unknown", "fail"], [6, 2, 1])[0]
        op = Op(i, i, "k", kind, invoke=invoke, outcome=outcome)  # type: ignore[arg-type]
        op.complete = None if outcome == "unknown" else complete
        if kind == "read":
            op.consistency = "linearizable"
            op.result = rng.choice(values) if outcome == "ok" else None
        else:
            op.value = f"v{i}"
            if kind == "cas":
                op.expected = rng.choice(values)
            values.append(op.value)
        ops.append(op)
    # Let reads also name values written later in the list.
    for op in ops:
        if op.kind == "read" and op.outcome == "ok" and rng.random() < 0.5:
            op.result = rng.choice(values)
    return ops


def test_agrees_with_brute_force_on_small_random_histories() -> None:
    rng = random.Random(42)
    verdicts = {True: 0, False: 0}
    for _ in range(600):
        ops = random_small_history(rng, rng.randint(1, 6))
        expected = brute_force(ops)
        got = check_key(ops)
        assert got.ok == expected, "\n".join(op.describe() for op in ops)
        verdicts[expected] += 1
    # Both verdicts are well represented.
    assert min(verdicts.values()) > 100, verdicts


def reference_check(ops: list[Op], initial: str | None = None) -> bool:
    """A plain memoized Wing & Gong search, without the checker's prunings:
    place any minimal operation (no unplaced required operation completed
    before it was invoked), until every required one is placed."""
    considered = [
        op
        for op in ops
        if (op.kind != "read" and op.outcome != "fail")
        or (op.kind == "read" and op.outcome == "ok" and op.consistency == "linearizable")
    ]
    required = sum(1 << i for i, op in enumerate(considered) if op.outcome == "ok")
    failed: set[tuple[int, str | None]] = set()

    def search(placed: int, value: str | None) -> bool:
        if placed & required == required:
            return True
        if (placed, value) in failed:
            return False
        pending = [i for i in range(len(considered)) if not placed >> i & 1]
        for i in pending:
            op = considered[i]
            if any(
                required >> j & 1
                and considered[j].complete is not None
                and considered[j].complete < op.invoke  # type: ignore[operator]
                for j in pending
            ):
                continue
            if op.kind == "read":
                if op.result == value and search(placed | 1 << i, value):
                    return True
            elif (op.kind == "write" or op.expected == value) and search(placed | 1 << i, op.value):
                return True
        failed.add((placed, value))
        return False

    return search(0, initial)


def test_agrees_with_a_plain_search_on_generated_and_corrupted_histories() -> None:
    rng = random.Random(4242)
    verdicts = {True: 0, False: 0}
    for _ in range(1500):
        ops, _ = generate(
            rng, rng.randint(4, 24), rng.randint(1, 6), p_unknown=rng.choice([0.05, 0.3])
        )
        values: list[str | None] = [None, *(op.value for op in ops if op.value)]
        for op in ops:
            if rng.random() < 0.1:
                if op.kind == "read" and op.outcome == "ok":
                    op.result = rng.choice(values)
                elif op.kind == "cas":
                    op.expected = rng.choice(values)
            if rng.random() < 0.1 and op.complete is not None:
                op.complete = max(op.invoke, op.complete + rng.uniform(-0.5, 1))
        if rng.random() < 0.3:  # whole-number times: many touching intervals
            for op in ops:
                op.invoke = float(round(op.invoke))
                if op.complete is not None:
                    op.complete = max(op.invoke, float(round(op.complete)))
        expected = reference_check(ops)
        got = check_key(ops)
        assert got.ok == expected, "\n".join(op.describe() for op in ops)
        verdicts[expected] += 1
    assert min(verdicts.values()) > 300, verdicts
