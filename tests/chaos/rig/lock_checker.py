"""Checks a lock history (lock_history.py) and the log key read back at the end.

The cluster's promise (docs/LEASES.md): each new holder of a lock gets a
fencing token greater than every earlier one (the offset of the record that
made it holder), and a write carrying ``Rkv-Fencing: NAME=TOKEN`` is applied
only while NAME is held with exactly TOKEN. Fencing tokens and key versions
are both record offsets, so they can be compared.

A *sighting* of a token is a lock granted (``ok``) or a holder observed by a
linearizable GET. The checks:

- ``token_reused``: one token seen held by two different leases.
- ``token_backwards``: a sighting that completed before another was invoked
  has a greater token (tokens granted strictly increase in grant order).
- ``interleaved``: in the log, an entry's token is lower than an earlier
  entry's, or two clients' entries share a token.
- ``wrong_holder``: an accepted write whose token was never granted to its
  client.
- ``stale_token_accepted``: an accepted write carried a token that was no
  longer the holder's when it was applied: a greater token was seen before
  the write was invoked or (for an acknowledged write) between the token and
  the write's version; or before the write was invoked, an observation showed
  another holder (or none) after the token was granted, its unlock was
  acknowledged, or a keepalive of its lease answered ``lease_expired``.
- ``refused_write_applied``: a write answered as refused is in the log;
  ``phantom_write``: an entry no write made; ``duplicate_write``: an entry
  twice; ``out_of_order``: acknowledged writes in the log not in the order of
  their versions.
- ``lost_write``: an acknowledged write missing from the log.
- ``bad_log``: the log key's value cannot be parsed.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from tests.chaos.rig.lock_history import Entry, LockOp, parse_log

LockAnomalyKind = Literal[
    "token_reused",
    "token_backwards",
    "interleaved",
    "wrong_holder",
    "stale_token_accepted",
    "refused_write_applied",
    "phantom_write",
    "duplicate_write",
    "out_of_order",
    "lost_write",
    "bad_log",
]
LEASE_ENDED = frozenset({"lease_expired"})
"""Keepalive refusals that prove the lease ended (``lease_not_found`` may also come
from a node that has not applied the grant yet)."""


@dataclass
class LockAnomaly:
    """One problem, shaped like checker.Anomaly (kind, key, message, excerpt)."""

    kind: LockAnomalyKind
    key: str
    message: str
    excerpt: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return "\n".join([f"{self.kind} on {self.key!r}: {self.message}", *self.excerpt])


@dataclass
class LockReport:
    anomalies: list[LockAnomaly] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.anomalies


def _sightings(ops: Iterable[LockOp]) -> list[LockOp]:
    return [
        op
        for op in ops
        if op.outcome == "ok" and op.token is not None and op.kind in ("lock", "observe")
    ]


def _excerpt(ops: Iterable[LockOp | None]) -> list[str]:
    unique = {id(op): op for op in ops if op is not None}.values()
    return [op.describe() for op in sorted(unique, key=lambda o: o.invoke)]


class _EarlierMax:
    """The greatest token among sightings that completed before a given time."""

    def __init__(self, sightings: Sequence[LockOp]) -> None:
        done = sorted((op for op in sightings if op.complete is not None), key=_completed)
        self._ends = [_completed(op) for op in done]
        self._best: list[LockOp] = []
        for op in done:
            if not self._best or (op.token or 0) > (self._best[-1].token or 0):
                self._best.append(op)
            else:
                self._best.append(self._best[-1])

    def before(self, moment: float) -> LockOp | None:
        i = bisect.bisect_left(self._ends, moment)
        return self._best[i - 1] if i else None


def _completed(op: LockOp) -> float:
    return op.complete if op.complete is not None else float("inf")


def check_tokens(ops: Sequence[LockOp], key: str) -> list[LockAnomaly]:
    """``token_reused`` and ``token_backwards`` over every sighting."""
    sightings = _sightings(ops)
    anomalies: list[LockAnomaly] = []
    holders: dict[int, LockOp] = {}
    for op in sightings:
        assert op.token is not None
        first = holders.setdefault(op.token, op)
        if first.lease != op.lease:
            anomalies.append(
                LockAnomaly(
                    "token_reused",
                    key,
                    f"token {op.token} held by lease {first.lease} and by lease {op.lease}",
                    _excerpt([first, op]),
                )
            )
    earlier = _EarlierMax(sightings)
    for op in sightings:
        before = earlier.before(op.invoke)
        if before is not None and (before.token or 0) > (op.token or 0):
            anomalies.append(
                LockAnomaly(
                    "token_backwards",
                    key,
                    f"token {op.token} seen after token {before.token} had been",
                    _excerpt([before, op]),
                )
            )
    return anomalies


def _keep_earliest(found: dict[int, LockOp], key: int, op: LockOp) -> None:
    if key not in found or _completed(op) < _completed(found[key]):
        found[key] = op


def _loss_times(ops: Sequence[LockOp]) -> tuple[dict[int, LockOp], dict[int, LockOp]]:
    """For each token, the first operation completed showing it was no longer held
    (an observation of another holder or none, invoked after the token's grant
    completed; its acknowledged unlock); for each lease, the first keepalive that
    answered it ended."""
    grants: dict[int, LockOp] = {}
    token_lost: dict[int, LockOp] = {}
    lease_ended: dict[int, LockOp] = {}
    for op in ops:
        if op.kind == "lock" and op.outcome == "ok" and op.token is not None:
            _keep_earliest(grants, op.token, op)
        elif op.kind == "unlock" and op.outcome == "ok" and op.token is not None:
            _keep_earliest(token_lost, op.token, op)
        elif op.kind == "keepalive" and op.code in LEASE_ENDED and op.lease is not None:
            _keep_earliest(lease_ended, op.lease, op)
    observations = [op for op in ops if op.kind == "observe" and op.outcome == "ok"]
    for token, grant in grants.items():
        for seen in observations:
            if seen.token != token and _completed(grant) < seen.invoke:
                _keep_earliest(token_lost, token, seen)
    return token_lost, lease_ended


def check_writes(ops: Sequence[LockOp], log: Sequence[Entry], key: str) -> list[LockAnomaly]:
    """Every check of the writes against the log key's entries (see the module)."""
    anomalies: list[LockAnomaly] = []
    writes = {(op.client, op.n): op for op in ops if op.kind == "write"}
    granted = {
        (op.client, op.token)
        for op in ops
        if op.kind == "lock" and op.outcome == "ok" and op.token is not None
    }
    sightings = _sightings(ops)
    earlier = _EarlierMax(sightings)
    tokens = sorted({op.token for op in sightings if op.token is not None})
    token_lost, lease_ended = _loss_times(ops)
    seen: dict[tuple[str, int], Entry] = {}
    owner: dict[int, str] = {}
    top: Entry | None = None
    last_acked: tuple[Entry, LockOp] | None = None
    for entry in log:
        write = writes.get((entry.client, entry.n))
        where = f"log entry {entry.position} {entry.token}:{entry.client}:{entry.n}"
        if (entry.client, entry.n) in seen:
            anomalies.append(LockAnomaly("duplicate_write", key, f"{where} appears twice"))
            continue
        seen[(entry.client, entry.n)] = entry
        if write is None:
            anomalies.append(LockAnomaly("phantom_write", key, f"{where}: no client wrote it"))
            continue
        if write.token != entry.token:
            anomalies.append(
                LockAnomaly(
                    "phantom_write",
                    key,
                    f"{where}: the write carried token {write.token}",
                    _excerpt([write]),
                )
            )
            continue
        if write.outcome == "fail":
            anomalies.append(
                LockAnomaly(
                    "refused_write_applied",
                    key,
                    f"{where} was answered {write.code or 'refused'} but is in the log",
                    _excerpt([write]),
                )
            )
        if (entry.client, entry.token) not in granted:
            anomalies.append(
                LockAnomaly(
                    "wrong_holder",
                    key,
                    f"{where}: token {entry.token} was never granted to {entry.client}",
                    _excerpt([write, *(s for s in sightings if s.token == entry.token)]),
                )
            )
        if top is not None and entry.token < top.token:
            anomalies.append(
                LockAnomaly(
                    "interleaved",
                    key,
                    f"{where} follows entry {top.position} with the greater token {top.token}",
                    _excerpt([write, writes.get((top.client, top.n))]),
                )
            )
        elif owner.setdefault(entry.token, entry.client) != entry.client:
            anomalies.append(
                LockAnomaly(
                    "interleaved",
                    key,
                    f"{where}: token {entry.token} also wrote for {owner[entry.token]}",
                    _excerpt([write]),
                )
            )
        if top is None or entry.token > top.token:
            top = entry
        anomalies.extend(_stale(entry, write, where, key, earlier, tokens, token_lost, lease_ended))
        if write.outcome == "ok" and write.version is not None:
            if last_acked is not None and (last_acked[1].version or 0) >= write.version:
                anomalies.append(
                    LockAnomaly(
                        "out_of_order",
                        key,
                        f"{where} (version {write.version}) follows entry "
                        f"{last_acked[0].position} (version {last_acked[1].version})",
                        _excerpt([last_acked[1], write]),
                    )
                )
            last_acked = (entry, write)
    for (client, n), write in writes.items():
        if write.outcome == "ok" and (client, n) not in seen:
            anomalies.append(
                LockAnomaly(
                    "lost_write",
                    key,
                    f"acknowledged write {write.entry()!r} is not in the log",
                    _excerpt([write]),
                )
            )
    return anomalies


def _stale(
    entry: Entry,
    write: LockOp,
    where: str,
    key: str,
    earlier: _EarlierMax,
    tokens: list[int],
    token_lost: dict[int, LockOp],
    lease_ended: dict[int, LockOp],
) -> list[LockAnomaly]:
    """``stale_token_accepted`` for one accepted write."""
    found: list[LockAnomaly] = []

    def stale(why: str, evidence: LockOp | None) -> None:
        found.append(
            LockAnomaly("stale_token_accepted", key, f"{where}: {why}", _excerpt([write, evidence]))
        )

    newer = earlier.before(write.invoke)
    if newer is not None and (newer.token or 0) > entry.token:
        stale(f"token {newer.token} had been seen before the write was invoked", newer)
    if write.outcome == "ok" and write.version is not None:
        i = bisect.bisect_right(tokens, entry.token)
        if i < len(tokens) and tokens[i] < write.version:
            stale(f"token {tokens[i]} was made holder before version {write.version}", None)
    lost = token_lost.get(entry.token)
    if lost is not None and _completed(lost) < write.invoke:
        stale("the token had been seen no longer held before the write was invoked", lost)
    ended = lease_ended.get(write.lease or 0)
    if ended is not None and _completed(ended) < write.invoke:
        stale(f"lease {write.lease} had been answered ended before the write was invoked", ended)
    return found


def check_locks(ops: Sequence[LockOp], final_value: str | None, key: str) -> LockReport:
    """Every check; ``final_value`` is a linearizable read of the log key after
    healing and after every client stopped (None: the key is absent)."""
    report = LockReport()
    try:
        log = parse_log(final_value or "")
    except ValueError as exc:
        report.anomalies.append(LockAnomaly("bad_log", key, str(exc)))
        log = []
    report.anomalies.extend(check_tokens(ops, key))
    report.anomalies.extend(check_writes(ops, log, key))
    writes = [op for op in ops if op.kind == "write"]
    report.counts = {
        "ops": len(ops),
        "holders": len({op.token for op in ops if op.kind == "lock" and op.outcome == "ok"}),
        "leases": sum(1 for op in ops if op.kind == "grant" and op.outcome == "ok"),
        "leases_ended": sum(1 for op in ops if op.kind == "keepalive" and op.code in LEASE_ENDED),
        "observations": sum(1 for op in ops if op.kind == "observe" and op.outcome == "ok"),
        "writes_acked": sum(1 for op in writes if op.outcome == "ok"),
        "writes_fenced": sum(1 for op in writes if op.code == "fenced"),
        "writes_unknown": sum(1 for op in writes if op.outcome == "unknown"),
        "log_entries": len(log),
        "anomalies": len(report.anomalies),
    }
    return report
