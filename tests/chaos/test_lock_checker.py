"""The lock checker on hand-made histories: a valid one passes, each violation is caught."""

from __future__ import annotations

import io
import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from tests.chaos.rig.lock_checker import check_locks
from tests.chaos.rig.lock_history import (
    LockHistory,
    LockKind,
    LockOp,
    format_entry,
    load,
    parse_log,
)

KEY = "chaos-lock/log"


class Builder:
    """Operations with increasing indexes; times are given explicitly."""

    def __init__(self) -> None:
        self.ops: list[LockOp] = []

    def add(
        self, client: str, kind: LockKind, start: float, end: float | None, **values: Any
    ) -> LockOp:
        outcome = values.pop("outcome", "ok" if end is not None else "unknown")
        op = LockOp(
            len(self.ops), client, kind, invoke=start, complete=end, outcome=outcome, **values
        )
        self.ops.append(op)
        return op

    def holding(
        self, client: str, lease: int, token: int, start: float, versions: list[int]
    ) -> list[LockOp]:
        """A lock granted at ``start``, then one acknowledged write per version."""
        self.add(client, "lock", start, start + 0.1, lease=lease, token=token)
        writes = []
        for i, version in enumerate(versions):
            at = start + 0.2 + 0.2 * i
            writes.append(
                self.add(
                    client,
                    "write",
                    at,
                    at + 0.1,
                    lease=lease,
                    token=token,
                    n=version,
                    version=version,
                )
            )
        return writes


def log_of(writes: list[LockOp]) -> str:
    return "".join(w.entry() for w in writes)


def valid() -> tuple[Builder, list[LockOp]]:
    """Two holders one after the other, an unlock, a fenced write, an observation."""
    b = Builder()
    b.add("c0.0", "grant", 0.0, 0.1, lease=100)
    b.add("c1.0", "grant", 0.0, 0.1, lease=101)
    first = b.holding("c0.0", 100, 110, 0.2, [111, 112])
    b.add("c0.0", "unlock", 1.0, 1.1, lease=100, token=110)
    b.add("c1.0", "keepalive", 1.0, 1.05, lease=101)
    second = b.holding("c1.0", 101, 120, 1.2, [121, 122, 123])
    b.add("observer", "observe", 2.0, 2.05, lease=101, token=120)
    # c0 writes again with its old token: refused, not in the log.
    b.add("c0.0", "write", 2.1, 2.2, lease=100, token=110, n=2, outcome="fail", code="fenced")
    # c1's last write got no answer and was not applied: allowed.
    b.add("c1.0", "write", 2.3, None, lease=101, token=120, n=999)
    return b, first + second


def kinds(report: object) -> list[str]:
    return [a.kind for a in report.anomalies]  # type: ignore[attr-defined]


def test_a_valid_history_passes() -> None:
    b, accepted = valid()
    report = check_locks(b.ops, log_of(accepted), KEY)
    assert report.ok, [a.describe() for a in report.anomalies]
    assert report.counts["writes_acked"] == 5
    assert report.counts["writes_fenced"] == 1
    assert report.counts["holders"] == 2


def test_an_unknown_write_present_in_the_log_passes() -> None:
    b, accepted = valid()
    unknown = next(op for op in b.ops if op.n == 999)
    assert check_locks(b.ops, log_of([*accepted, unknown]), KEY).ok


def test_interleaved_holders_are_caught() -> None:
    b, accepted = valid()
    # c0's second write (token 110) lands after c1's first (token 120).
    first, second = accepted[1], accepted[2]
    moved = replace(first, version=125)
    b.ops[b.ops.index(first)] = moved
    order = [accepted[0], second, moved, *accepted[3:]]
    found = kinds(check_locks(b.ops, log_of(order), KEY))
    assert "interleaved" in found


def test_two_clients_writing_with_one_token_are_caught() -> None:
    b = Builder()
    writes = b.holding("c0.0", 100, 110, 0.0, [111])
    b.add("c1.0", "lock", 0.0, 0.1, lease=101, token=110)
    writes.append(b.add("c1.0", "write", 0.5, 0.6, lease=101, token=110, n=112, version=112))
    found = kinds(check_locks(b.ops, log_of(writes), KEY))
    assert "token_reused" in found and "interleaved" in found


def test_a_token_going_backwards_is_caught() -> None:
    b = Builder()
    b.holding("c0.0", 100, 120, 0.0, [])
    # A later grant (invoked after the first completed) with a smaller token.
    b.holding("c1.0", 101, 110, 1.0, [])
    found = kinds(check_locks(b.ops, "", KEY))
    assert found == ["token_backwards"]


def test_an_observation_going_backwards_is_caught() -> None:
    b = Builder()
    b.holding("c0.0", 100, 120, 0.0, [])
    b.add("observer", "observe", 1.0, 1.1, lease=99, token=110)
    assert "token_backwards" in kinds(check_locks(b.ops, "", KEY))


def test_concurrent_grants_in_either_order_pass() -> None:
    b = Builder()
    b.add("c0.0", "lock", 0.0, 1.0, lease=100, token=120)
    b.add("c1.0", "lock", 0.5, 0.6, lease=101, token=110)
    assert check_locks(b.ops, "", KEY).ok


def test_a_lost_acknowledged_write_is_caught() -> None:
    b, accepted = valid()
    report = check_locks(b.ops, log_of(accepted[:2] + accepted[3:]), KEY)
    assert kinds(report) == ["lost_write"]
    assert "120:c1.0:121;" in report.anomalies[0].message


def test_an_absent_log_key_loses_every_acknowledged_write() -> None:
    b, _ = valid()
    assert kinds(check_locks(b.ops, None, KEY)) == ["lost_write"] * 5


def test_a_fenced_write_in_the_log_is_caught() -> None:
    b, accepted = valid()
    fenced = next(op for op in b.ops if op.code == "fenced")
    found = kinds(check_locks(b.ops, log_of([*accepted, fenced]), KEY))
    assert "refused_write_applied" in found
    # Invoked after token 120 was seen, so its token 110 was stale too.
    assert "stale_token_accepted" in found


def test_a_write_with_a_superseded_token_is_caught_by_its_version() -> None:
    b = Builder()
    first = b.holding("c0.0", 100, 110, 0.0, [111])
    second = b.holding("c1.0", 101, 120, 0.0, [121])
    # c0's write, concurrent with c1's grant, was applied after it (version 125 > 120).
    late = b.add("c0.0", "write", 0.1, 2.0, lease=100, token=110, n=125, version=125)
    found = kinds(check_locks(b.ops, log_of([*first, late, *second]), KEY))
    assert "stale_token_accepted" in found


def test_a_write_after_the_lease_was_answered_expired_is_caught() -> None:
    """The paused holder: its keepalive said the lease ended; a later write got in."""
    b = Builder()
    writes = b.holding("c0.0", 100, 110, 0.0, [111])
    b.add("c0.0", "keepalive", 3.0, 3.1, lease=100, outcome="fail", code="lease_expired")
    writes.append(b.add("c0.0", "write", 3.2, 3.3, lease=100, token=110, n=140, version=140))
    assert kinds(check_locks(b.ops, log_of(writes), KEY)) == ["stale_token_accepted"]


def test_a_write_after_an_observation_without_holder_is_caught() -> None:
    b = Builder()
    writes = b.holding("c0.0", 100, 110, 0.0, [111])
    b.add("observer", "observe", 3.0, 3.1)  # nobody holds the lock
    writes.append(b.add("c0.0", "write", 3.2, None, lease=100, token=110, n=140))
    assert kinds(check_locks(b.ops, log_of(writes), KEY)) == ["stale_token_accepted"]


def test_a_write_under_a_token_never_granted_to_its_client_is_caught() -> None:
    b = Builder()
    b.holding("c0.0", 100, 110, 0.0, [])
    forged = b.add("c1.0", "write", 0.5, 0.6, lease=101, token=110, n=111, version=111)
    assert "wrong_holder" in kinds(check_locks(b.ops, log_of([forged]), KEY))


def test_phantom_duplicate_and_unordered_entries_are_caught() -> None:
    b, accepted = valid()
    duplicate = check_locks(b.ops, log_of([*accepted, accepted[-1]]), KEY)
    assert kinds(duplicate) == ["duplicate_write"]
    phantom = check_locks(b.ops, log_of(accepted) + format_entry(120, "c9.0", 1), KEY)
    assert kinds(phantom) == ["phantom_write"]
    swapped = [accepted[0], accepted[1], accepted[3], accepted[2], accepted[4]]
    assert kinds(check_locks(b.ops, log_of(swapped), KEY)) == ["out_of_order"]
    assert kinds(check_locks(b.ops, "110:c0.0", KEY))[0] == "bad_log"


def test_a_killed_clients_history_file_leaves_its_open_operation_unknown(tmp_path: Path) -> None:
    history = LockHistory("c0.0", started=0.0, path=tmp_path / "c0.jsonl")
    done = history.invoke("grant")
    history.complete(done, "ok", lease=100)
    history.invoke("lock", lease=100)  # killed while waiting for the lock
    history.close()
    text = (tmp_path / "c0.jsonl").read_text() + '{"event": "inv'  # a torn last line
    ops = sorted(load(io.StringIO(text)), key=lambda op: op.index)
    assert [(op.kind, op.outcome, op.lease) for op in ops] == [
        ("grant", "ok", 100),
        ("lock", "unknown", 100),
    ]
    assert ops[1].complete is None
    assert json.loads(text.splitlines()[0])["event"] == "invoke"
    assert asdict(ops[0])["complete"] is not None


def test_the_log_parses_in_order() -> None:
    entries = parse_log("110:c0.0:1;120:c1.2:7;")
    assert [(e.position, e.token, e.client, e.n) for e in entries] == [
        (0, 110, "c0.0", 1),
        (1, 120, "c1.2", 7),
    ]
    assert parse_log("") == []
