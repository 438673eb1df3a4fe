"""Phase one: read every export file once, verify it and summarise it.

A bucket file yields its count, its ordered digest (checked against the
manifest) and its order-free fingerprint; a log yields its record count.
Both engines run these same functions, one task per file (the Spark engine
in its executors), so damage is found and worded identically.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from spark_tools.export_reading import (
    ExportDamaged,
    LogItem,
    StateFile,
    add_fingerprints,
    fingerprint,
    read_log,
)


class StateScanTask(NamedTuple):
    replica: int
    bucket: int
    path: str
    raft_index: int
    applied_offset: int
    expected_count: int
    expected_digest: str
    low: bytes | None
    """The bucket's first possible sort key (None: no lower bound)."""
    high: bytes | None
    """The next bucket's first sort key (None: no upper bound)."""


class StateScan(NamedTuple):
    replica: int
    bucket: int
    keys: int
    digest: str
    fingerprint: int
    error: str | None


class LogScanTask(NamedTuple):
    replica: int
    path: str
    applied_offset: int
    expected_records: int | None


class LogScan(NamedTuple):
    replica: int
    records: int
    error: str | None


def scan_state(task: StateScanTask) -> StateScan:
    """Verify one bucket file against its manifest entry and summarise it."""
    state = StateFile(Path(task.path))
    total = 0
    count = 0
    try:
        for item in state.items():
            if count == 0 and task.low is not None and item.sort_key < task.low:
                raise ExportDamaged(f"{task.path}: key {item.key!r} is below its bucket's range")
            if task.high is not None and item.sort_key >= task.high:
                raise ExportDamaged(f"{task.path}: key {item.key!r} is beyond its bucket's range")
            total = add_fingerprints(total, fingerprint(item.key, item.version, item.value_sha))
            count += 1
        header = state.header
        assert header is not None
        if (header.applied_index, header.applied_offset) != (task.raft_index, task.applied_offset):
            raise ExportDamaged(
                f"{task.path}: the file is at raft index {header.applied_index} offset "
                f"{header.applied_offset}, its manifest at {task.raft_index} "
                f"offset {task.applied_offset}"
            )
        if count != task.expected_count:
            raise ExportDamaged(
                f"{task.path}: {count} keys, the manifest says {task.expected_count}"
            )
        digest = state.digest.hexdigest()
        if digest != task.expected_digest:
            raise ExportDamaged(f"{task.path}: its digest is not the manifest's")
    except ExportDamaged as exc:
        return StateScan(task.replica, task.bucket, count, "", 0, str(exc))
    return StateScan(task.replica, task.bucket, count, digest, total, None)


def scan_log(task: LogScanTask, sink: Callable[[LogItem], None] | None = None) -> LogScan:
    """Verify one log export (each item also goes to ``sink``) and count its records."""
    records = 0
    try:
        for item in read_log(Path(task.path), task.applied_offset):
            records += 1
            if sink is not None:
                sink(item)
        if task.expected_records is not None and records != task.expected_records:
            raise ExportDamaged(
                f"{task.path}: {records} records, the manifest says {task.expected_records}"
            )
    except ExportDamaged as exc:
        return LogScan(task.replica, records, str(exc))
    return LogScan(task.replica, records, None)


ScanTask = StateScanTask | LogScanTask
ScanResult = StateScan | LogScan


def run_scan_task(task: ScanTask) -> ScanResult:
    if isinstance(task, StateScanTask):
        return scan_state(task)
    return scan_log(task)
