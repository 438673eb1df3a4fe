"""Retention of audit exports and one export at a time, on real storage with the
real state machine and exporter: the newest exports are kept and older ones
deleted, never one being written or downloaded, a deletion cut short by a crash
never leaves something that reads as an export, and a cut applied while another
export runs is refused."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import node.audit.export as audit_export
import node.audit.jobs as audit_jobs
from node.audit.export import ERROR_NAME, MANIFEST_NAME, export_directory
from node.audit.jobs import DONE, FAILED, RUNNING, AuditExporter, AuditStatus
from node.audit.retention import (
    TRASH_NAME,
    Downloads,
    RetentionPolicy,
    move_to_trash,
    trash_directory,
)
from node.state.commands import AuditCut, Batch, Command, Put, encode_entry
from node.storage.lmdb_store import DetachedView
from node.storage.recovery import NodeStorage
from tests.support.state import machine_of

DAY = 24 * 3600


def apply(storage: NodeStorage, *commands: Command) -> None:
    machine = machine_of(storage)
    results = machine.apply(machine.applied_index + 1, encode_entry(Batch(commands, 5)))
    assert all(r.ok for r in results), results


def make_exporter(storage: NodeStorage, path: Path, policy: RetentionPolicy) -> AuditExporter:
    exporter = AuditExporter(path, "n1", storage.commit_log, policy)
    machine_of(storage).audit_hook = exporter.hook
    return exporter


@pytest.fixture
def audits(tmp_path: Path) -> Path:
    return tmp_path / "audits"


def wait_status(exporter: AuditExporter, audit_id: str, timeout: float = 20.0) -> AuditStatus:
    deadline = time.monotonic() + timeout
    while True:
        status = exporter.status(audit_id)
        if status is not None and status.state != RUNNING:
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.01)


def audit(storage: NodeStorage, exporter: AuditExporter, audit_id: str) -> None:
    apply(storage, AuditCut(audit_id, ()))
    assert wait_status(exporter, audit_id).state == DONE


def age(exporter: AuditExporter, audit_id: str, seconds: float) -> None:
    """Make the export look ``seconds`` old."""
    then = time.time() - seconds
    os.utime(export_directory(exporter.audit_dir, audit_id, "n1"), (then, then))


@pytest.fixture
def paused(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Exports stop before writing their state until the second event is set."""
    reached, go = threading.Event(), threading.Event()
    real = audit_export.write_state

    def held(view: DetachedView, *args: Any, **kwargs: Any) -> Any:
        reached.set()
        assert go.wait(20)
        return real(view, *args, **kwargs)

    monkeypatch.setattr(audit_jobs, "write_state", held)
    yield reached, go
    go.set()


def test_each_export_keeps_the_newest_and_deletes_the_rest(
    storage: NodeStorage, audits: Path
) -> None:
    exporter = make_exporter(storage, audits, RetentionPolicy(keep=2))
    try:
        apply(storage, *(Put(b"k%03d" % i, b"v") for i in range(50)))
        for n in range(1, 5):
            audit(storage, exporter, f"a{n}")
        # a3's start deleted a1, a4's a2: the two newest stay, complete.
        assert exporter.status("a1") is None and exporter.status("a2") is None
        assert not (audits / "a1").exists() and not (audits / "a2").exists()
        for kept in ("a3", "a4"):
            status = exporter.status(kept)
            assert status is not None and status.state == DONE
        assert not any(trash_directory(audits, "n1").iterdir())
        # The id of a deleted audit may be used again.
        audit(storage, exporter, "a1")
        assert exporter.status("a3") is None
    finally:
        exporter.close()


def test_the_age_limit_deletes_old_exports_and_other_nodes_are_left_alone(
    storage: NodeStorage, audits: Path
) -> None:
    exporter = make_exporter(storage, audits, RetentionPolicy(keep=5, keep_age_seconds=3600))
    try:
        audit(storage, exporter, "old")
        audit(storage, exporter, "new")
        other = export_directory(audits, "old", "n2")  # a shared volume: n2's export
        other.mkdir()
        (other / MANIFEST_NAME).write_text("{}")
        age(exporter, "old", 2 * 3600)
        assert exporter.prune() == ["old"]
        assert exporter.status("old") is None and exporter.status("new") is not None
        assert (other / MANIFEST_NAME).is_file()
        assert exporter.prune() == []
    finally:
        exporter.close()


def test_an_export_being_written_is_never_deleted(
    storage: NodeStorage, audits: Path, paused: tuple[threading.Event, threading.Event]
) -> None:
    reached, go = paused
    exporter = make_exporter(storage, audits, RetentionPolicy(keep=1, keep_age_seconds=60))
    try:
        apply(storage, AuditCut("slow", ()))
        assert reached.wait(10)
        age(exporter, "slow", DAY)
        assert exporter.prune() == []
        go.set()
        assert wait_status(exporter, "slow").state == DONE
    finally:
        exporter.close()


def test_an_export_being_downloaded_is_kept_until_the_grace_period_ends(
    storage: NodeStorage, audits: Path
) -> None:
    exporter = make_exporter(storage, audits, RetentionPolicy(keep=1, keep_age_seconds=60))
    try:
        audit(storage, exporter, "read")
        age(exporter, "read", DAY)
        with exporter.hold("read"):
            assert exporter.prune() == []
        assert exporter.prune() == []  # within the grace period after the download
    finally:
        exporter.close()
    downloads = Downloads(grace_seconds=0.05)
    with downloads.hold("x"), downloads.hold("x"):
        assert downloads.held() == {"x"}
    deadline = time.monotonic() + 5
    while downloads.held():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_deletion_cut_short_never_leaves_an_export_that_reads_as_one(
    storage: NodeStorage, audits: Path
) -> None:
    exporter = make_exporter(storage, audits, RetentionPolicy(keep=1))
    try:
        audit(storage, exporter, "gone")
        # A crash right after the rename: the export is out of sight, whole or not.
        moved = move_to_trash(audits, "gone", "n1")
        (moved / MANIFEST_NAME).unlink()  # ... and half removed
        assert exporter.status("gone") is None
        assert sorted(p.name for p in audits.iterdir()) == ["gone", TRASH_NAME]
        assert not any((audits / "gone").iterdir())
        # The next pass (at start-up, or the next export) finishes the job.
        assert exporter.prune() == []
        assert not moved.exists() and not (audits / "gone").exists()
    finally:
        exporter.close()


def test_a_cut_applied_while_an_export_runs_is_refused_on_this_node(
    storage: NodeStorage, audits: Path, paused: tuple[threading.Event, threading.Event]
) -> None:
    reached, go = paused
    exporter = make_exporter(storage, audits, RetentionPolicy())
    try:
        apply(storage, AuditCut("first", ()))
        assert reached.wait(10)
        assert exporter.running() == ["first"]
        apply(storage, AuditCut("second", ()))
        refused = exporter.status("second")
        assert refused is not None and refused.state == FAILED
        assert refused.error is not None and "first was still being exported" in refused.error
        error_file = export_directory(audits, "second", "n1") / ERROR_NAME
        deadline = time.monotonic() + 10
        while not error_file.exists():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert json.loads(error_file.read_bytes())["code"] == "audit_running"
        go.set()
        assert wait_status(exporter, "first").state == DONE
        assert exporter.running() == []
    finally:
        exporter.close()
