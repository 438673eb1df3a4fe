"""Readiness as named checks: what GET /readyz runs, as etcd's /readyz does.

A node is ready when every check passes; ``?exclude=NAME`` leaves a check out.
The checks, in the order they run and report:

- ``storage``: the data directory can take writes: its filesystem is not
  mounted read-only, has at least ``min_free_bytes`` free, and the last apply
  of a raft entry did not fail;
- ``not_stalled``: the state misses no entries (no gap this node failed to
  fill, none being filled behind a raft marker);
- ``leader``: a leader is known and connected;
- ``applied``: the commit index learned at start-up is applied, and at most a
  bounded number of committed entries are not applied yet.

The checks read in-memory state and one statvfs per path: cheap enough for a
probe every second.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from node.errors import InvalidRequest

READY_CHECKS = ("storage", "not_stalled", "leader", "applied")
DEFAULT_MIN_FREE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    problem: str | None
    """Why the check failed; None when it passed."""

    @property
    def ok(self) -> bool:
        return self.problem is None


@dataclass(frozen=True, slots=True)
class Readiness:
    checks: tuple[CheckResult, ...]
    """The checks that ran, in :data:`READY_CHECKS` order."""
    excluded: tuple[str, ...]

    @property
    def ready(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def reason(self) -> str:
        """The first failing check's problem, or "ready"."""
        return next((c.problem for c in self.checks if c.problem is not None), "ready")


def checked_excludes(names: Iterable[str]) -> tuple[str, ...]:
    """The check names to leave out; an unknown one is an InvalidRequest."""
    excluded = tuple(dict.fromkeys(names))
    unknown = [name for name in excluded if name not in READY_CHECKS]
    if unknown:
        raise InvalidRequest(
            f"unknown readiness check {unknown[0]!r:.80}; the checks are "
            + ", ".join(READY_CHECKS),
            code="unknown_check",
        )
    return excluded


def disk_problem(paths: Sequence[Path], min_free_bytes: int) -> str | None:
    """Why one of ``paths``' filesystems cannot take writes, or None."""
    for path in dict.fromkeys(paths):
        try:
            fs = os.statvfs(path)
        except OSError as exc:
            return f"cannot inspect {path}: {exc.strerror}"
        if fs.f_flag & os.ST_RDONLY:
            return f"the filesystem of {path} is mounted read-only"
        free = fs.f_bavail * fs.f_frsize
        if free < min_free_bytes:
            return (
                f"the filesystem of {path} has {free} bytes free, under the "
                f"{min_free_bytes} --ready-min-free-bytes asks for"
            )
    return None


def run_checks(
    consensus_problems: Mapping[str, str | None],
    disk: Callable[[], str | None],
    exclude: Iterable[str] = (),
) -> Readiness:
    """Run the checks not excluded. ``consensus_problems`` holds the consensus
    layer's view by check name (``storage`` there is a failing apply); ``disk``
    adds the filesystem's part of ``storage``."""
    excluded = checked_excludes(exclude)
    results = []
    for name in READY_CHECKS:
        if name in excluded:
            continue
        problem = consensus_problems.get(name)
        if name == "storage" and problem is None:
            problem = disk()
        results.append(CheckResult(name, problem))
    return Readiness(tuple(results), excluded)
