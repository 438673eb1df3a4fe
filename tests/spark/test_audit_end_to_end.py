"""`rkv audit --url URL` end to end on three real node processes: a cut taken under
a concurrent writer audits PASS (the exports downloaded over HTTP); after one value is
flipped in a stopped follower's LMDB (its version kept), the next audit FAILs naming
exactly that key and replica (the exports read in place from the nodes' shared
--audit-dir with --exports-dir, as the Compose audit service does)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from node.storage.config import StorageConfig
from node.storage.datadir import STATE_DIR
from node.storage.lmdb_store import LmdbStore, StoredValue
from tests.support.cluster import REPO, LocalCluster, http, wait_until

KEYS = 2000
FLIPPED = b"pre/000777"
RKV_AUDIT = [sys.executable, "-m", "node.cli", "audit"]
OPTIONS = ["--buckets", "4", "--timeout", "60"]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The audit directory every node writes into (a shared volume's stand-in)."""
    return tmp_path_factory.mktemp("audit-shared")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, shared: Path) -> Iterator[LocalCluster]:
    running = LocalCluster(
        tmp_path_factory.mktemp("audit-e2e") / "cluster", extra_args=["--audit-dir", str(shared)]
    )
    try:
        running.start()
        yield running
    finally:
        running.stop()


def preload(url: str) -> None:
    for start in range(0, KEYS, 500):
        ops = [
            {"op": "put", "key": f"pre/{i:06d}", "value": f"value-{i:06d}"}
            for i in range(start, start + 500)
        ]
        body = json.dumps({"success": ops}).encode()
        response = http("POST", f"{url}/v1/txn?encoding=utf-8", body=body, timeout=60)
        assert response.status == 200, response.body[:300]


class Writer(threading.Thread):
    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.acked = 0

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                if http("PUT", f"{self.url}/v1/kv/w%2F{n:06d}", body=b"x" * 50).status == 200:
                    self.acked += 1
            except OSError:
                pass


def rkv_audit(
    url: str, out: Path, engine: str = "python", *extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RKV_AUDIT, "--url", url, "--out", str(out), "--engine", engine, *OPTIONS, *extra],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def report_of(out: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    return report


def flip_value(data_dir: Path, key: bytes) -> None:
    """Rewrite ``key``'s value in the stopped node's LMDB, keeping its versions."""
    store = LmdbStore.open(data_dir / STATE_DIR, StorageConfig().lmdb_map_size)
    try:
        stored = store.get(key)
        assert stored is not None
        flipped = StoredValue(stored.version, stored.create_version, b"flipped!")
        store.write([(key, flipped)], store.applied_index, store.applied_offset)
    finally:
        store.close()


def test_rkv_audit_passes_then_names_a_flipped_value(
    cluster: LocalCluster, shared: Path, tmp_path: Path
) -> None:
    leader = cluster.leader()
    preload(leader.url)
    writer = Writer(leader.url)
    writer.start()
    try:
        wait_until(lambda: writer.acked >= 20, 30, "the writer to get going")
        clean = rkv_audit(leader.url, tmp_path / "clean")
    finally:
        writer.stop.set()
        writer.join(timeout=10)
    assert clean.returncode == 0, clean.stderr + clean.stdout
    report = report_of(tmp_path / "clean")
    assert report["status"] == "PASS"
    assert len(report["replicas"]) == 3
    audit_id = report["audit_id"]
    for node in cluster.nodes:
        assert (tmp_path / "clean" / "exports" / audit_id / node.node_id / "manifest.json").exists()

    follower = cluster.followers()[0]
    index = cluster.nodes.index(follower)
    cluster.kill(index, signal.SIGTERM)
    flip_value(follower.data_dir, FLIPPED)
    cluster.start_node(index)
    cluster.wait_ready(60)

    divergent = rkv_audit(
        cluster.leader().url, tmp_path / "divergent", "python", "--exports-dir", str(shared)
    )
    assert divergent.returncode == 1, divergent.stderr + divergent.stdout
    assert not (tmp_path / "divergent" / "exports").exists()  # read in place
    report = report_of(tmp_path / "divergent")
    for replica in report["replicas"]:
        assert Path(replica["export"]).parent == shared / report["audit_id"]
    assert report["status"] == "FAIL"
    assert report["totals"]["divergent_keys"] == 1
    [sample] = report["samples"]
    assert sample["key_utf8"] == FLIPPED.decode()
    assert sample["findings"] == [{"class": "value_differs", "replica": follower.node_id}]


def test_rkv_audit_with_the_spark_engine_agrees_with_python(
    cluster: LocalCluster, spark: Any, tmp_path: Path
) -> None:
    from node.cli.main import main  # noqa: PLC0415
    from spark_tools.audit_run import run_audit  # noqa: PLC0415

    out = tmp_path / "spark"
    code = main(["audit", "--url", cluster.leader().url, "--out", str(out), "--quiet", *OPTIONS])
    assert code in (0, 1)  # 1 after the test above flipped a value
    report = report_of(out)
    assert report["status"] == ("PASS" if code == 0 else "FAIL")
    assert report["engine"]["name"] == "spark"
    [exports] = (out / "exports").iterdir()
    assert run_audit(exports, tmp_path / "python", "python", progress=None) == code
    again = report_of(tmp_path / "python")
    for field in ("engine", "timings", "outputs"):
        report.pop(field), again.pop(field)
    assert report == again
