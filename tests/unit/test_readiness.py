"""Readiness checks: order, the first failure as the reason, exclusions, the disk part."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.errors import InvalidRequest
from node.service.readiness import READY_CHECKS, disk_problem, run_checks

HEALTHY = dict.fromkeys(READY_CHECKS)


def _not_asked() -> str | None:
    raise AssertionError("the disk was asked")


def test_every_check_in_order_and_the_first_failure_is_the_reason() -> None:
    readiness = run_checks({**HEALTHY, "leader": "no leader known"}, lambda: "disk full")
    assert [c.name for c in readiness.checks] == list(READY_CHECKS)
    assert [c.ok for c in readiness.checks] == [False, True, False, True]
    assert not readiness.ready and readiness.reason == "disk full"
    # A failing apply is storage's problem first; the disk is not asked then.
    applying = run_checks({**HEALTHY, "storage": "apply failed"}, _not_asked)
    assert applying.reason == "apply failed"


def test_excluded_checks_do_not_run() -> None:
    readiness = run_checks(
        {**HEALTHY, "leader": "no leader known"}, lambda: "disk full", ["leader", "storage"]
    )
    assert [c.name for c in readiness.checks] == ["not_stalled", "applied"]
    assert readiness.ready and readiness.reason == "ready"
    assert readiness.excluded == ("leader", "storage")


@pytest.mark.parametrize("name", ["", "Leader", "disk", "leader "])
def test_an_unknown_check_is_invalid(name: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        run_checks(HEALTHY, lambda: None, ["leader", name])
    assert caught.value.code == "unknown_check"


def test_the_disk_check(tmp_path: Path) -> None:
    assert disk_problem([tmp_path], 0) is None
    short = disk_problem([tmp_path], 2**62)
    assert short is not None and "--ready-min-free-bytes" in short
    missing = disk_problem([tmp_path / "gone"], 0)
    assert missing is not None and missing.startswith("cannot inspect")
