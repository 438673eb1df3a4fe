"""The audit on exports written by the node itself (node/audit/jobs.py): three
storages (LMDB and commit log) apply the same entries, one of them an
AuditCut, and each exports at that cut; then the audit compares them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from node.audit.jobs import DONE, RUNNING, AuditExporter
from node.state.commands import AuditCut, Batch, Command, Delete, Put, encode_entry
from node.storage.config import FsyncPolicy, StorageConfig
from node.storage.recovery import NodeStorage, open_storage
from tests.spark.audit_support import audit, audit_checked
from tests.support.state import machine_of

REPLICAS = ("n1", "n2", "n3")
LONG_PREFIX = b"L" * 600


class Node:
    def __init__(self, root: Path, name: str) -> None:
        config = StorageConfig(
            segment_bytes=64 * 1024, fsync=FsyncPolicy.ON_SYNC, lmdb_map_size=16 * 1024 * 1024
        )
        self.storage: NodeStorage = open_storage(root / "data" / name, config)
        self.exporter = AuditExporter(root / "audits", name, self.storage.commit_log)
        machine_of(self.storage).audit_hook = self.exporter.hook

    def apply(self, *commands: Command) -> None:
        index = self.storage.store.applied_index + 1
        machine_of(self.storage).apply(index, encode_entry(Batch(commands, 1_000 + index)))

    def wait(self, audit_id: str) -> None:
        deadline = time.monotonic() + 20
        while True:
            status = self.exporter.status(audit_id)
            if status is not None and status.state != RUNNING:
                assert status.state == DONE, status
                return
            assert time.monotonic() < deadline
            time.sleep(0.01)

    def close(self) -> None:
        self.exporter.close()
        self.storage.close()


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[Node]]:
    made = [Node(tmp_path, name) for name in REPLICAS]
    yield made
    for node in made:
        node.close()


def fill(nodes: list[Node]) -> None:
    for node in nodes:
        node.apply(*(Put(b"k%04d" % i, b"v%d" % i) for i in range(300)))
        node.apply(*(Put(b"k%04d" % i, b"second %d" % i) for i in range(0, 300, 7)))
        node.apply(*(Put(LONG_PREFIX + b"%02d" % i, b"long %d" % i) for i in range(6)))
        node.apply(Delete(b"k0003"), Delete(b"k0010"), Put(b"\xff\xfe", b"last"))


def cut(nodes: list[Node], audit_id: str, splits: tuple[bytes, ...]) -> None:
    for node in nodes:
        node.apply(AuditCut(audit_id, splits))
    for node in nodes:
        node.wait(audit_id)


SPLITS = (LONG_PREFIX[:495], b"k0100", b"k0200")


def test_replicas_that_applied_the_same_entries_pass(nodes: list[Node], tmp_path: Path) -> None:
    fill(nodes)
    cut(nodes, "a1", SPLITS)
    outcome = audit(tmp_path / "audits" / "a1", tmp_path / "out")
    assert outcome.code == 0, outcome.report["reasons"]
    report = outcome.report
    assert report["totals"]["distinct_keys"] == 300 - 2 + 6 + 1
    assert report["buckets"]["count"] == 4
    assert all(r["status"] == "match" for r in report["replay"].values())
    assert report["log_check"]["status"] == "agree"


def test_a_replica_that_applied_another_entry_is_found(
    nodes: list[Node], tmp_path: Path, engine: str
) -> None:
    fill(nodes)
    nodes[1].apply(Put(b"k0150", b"only on n2"), Put(b"k0999", b"new on n2"))
    nodes[0].apply(Put(b"k0150", b"only on n1"), Put(b"k0998", b"new on n1"))
    nodes[2].apply(Put(b"k0150", b"only on n1"), Put(b"k0998", b"new on n1"))
    cut(nodes, "a2", SPLITS)
    outcome = audit_checked(tmp_path / "audits" / "a2", tmp_path, engine)
    assert outcome.code == 1
    report = outcome.report
    findings = {s["key_utf8"]: s["findings"] for s in report["samples"]}
    assert findings == {
        "k0150": [{"class": "value_differs", "replica": "n2"}],
        "k0998": [{"class": "missing", "replica": "n2"}],
        "k0999": [{"class": "extra", "replica": "n2"}],
    }
    # Every state is its own log's replay; the logs differ where n2 wrote otherwise.
    assert all(r["status"] == "match" for r in report["replay"].values())
    log = report["log_check"]
    assert log["status"] == "diverge"
    assert log["divergent_offsets"] == 2
