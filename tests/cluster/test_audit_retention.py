"""Audits under a client that starts them in a loop, on three real node processes:
every node keeps only its newest exports (--audit-keep) and those younger than
--audit-keep-age, deleting the others, but never one still being written; a
second audit while the leader still exports one is refused with 409
audit_running (and `rkv audit` says so and exits non-zero); a member still
exporting when the next cut applies skips that cut and reports why.

An export is held "in progress" for as long as the test needs by a complete-range
log read on that node (GET /v1/log?complete=1), paced by a low --transfer-rate:
it holds the log's rewriting lock, which the export waits for before writing its
log (node/audit/jobs.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from tests.support.cluster import REPO, LocalCluster, NodeProcess, Response, http, wait_until

TRANSFER_RATE = 2500  # bytes/s: the preloaded log (~30 KB) takes ~12 s to read


def start(tmp_path: Path, *args: str) -> Iterator[LocalCluster]:
    running = LocalCluster(tmp_path / "cluster", extra_args=list(args))
    try:
        running.start()
        yield running
    finally:
        running.stop()


def preload(url: str) -> None:
    ops = [{"op": "put", "key": f"k{i:03d}", "value": "v" * 200} for i in range(120)]
    body = json.dumps({"success": ops}).encode()
    response = http("POST", url + "/v1/txn?encoding=utf-8", body=body, timeout=30)
    assert response.status == 200, response.body


def start_audit(url: str, audit_id: str) -> Response:
    body = json.dumps({"audit_id": audit_id, "buckets": 2}).encode()
    return http("POST", url + "/v1/audit", body=body, timeout=30)


def status_of(node: NodeProcess, audit_id: str) -> int:
    return http("GET", f"{node.url}/v1/audit/{audit_id}").status


def export_dir(node: NodeProcess, audit_id: str) -> Path:
    return node.data_dir / "audit" / audit_id / node.node_id


def all_done(cluster: LocalCluster, audit_id: str) -> bool:
    return all(status_of(node, audit_id) == 200 for node in cluster.nodes)


class LogHold:
    """A complete-range log read of ``node`` in a thread: while it runs, an export
    on that node cannot write its log, so it stays in progress."""

    def __init__(self, node: NodeProcess) -> None:
        self.node = node
        self.answer: Response | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        deadline = time.monotonic() + 30
        while True:  # a probe (below) may hold the lock for a moment: try again
            self.answer = http("GET", self.node.url + "/v1/log?from=1&complete=1", timeout=120)
            if self.answer.status != 409 or time.monotonic() > deadline:
                return
            time.sleep(0.01)

    def __enter__(self) -> LogHold:
        self.thread.start()
        # Held once another complete-range read is refused (a probe of one record that
        # got the lock first holds it for a moment only).
        wait_until(
            lambda: http("GET", self.node.url + "/v1/log?from=1&complete=1&limit=1").status == 409,
            30,
            f"the log read to hold {self.node.node_id}'s log",
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.join(120)
        assert self.answer is not None and self.answer.status == 200


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        check=False,
    )


@pytest.fixture
def keep_two(tmp_path: Path) -> Iterator[LocalCluster]:
    yield from start(tmp_path, "--audit-keep", "2", "--transfer-rate", str(TRANSFER_RATE))


def test_every_node_keeps_its_newest_exports_and_skips_a_cut_while_busy(
    keep_two: LocalCluster,
) -> None:
    cluster = keep_two
    leader = cluster.leader()
    preload(leader.url)
    for n in range(1, 5):
        assert start_audit(leader.url, f"a{n}").status == 200
        wait_until(partial(all_done, cluster, f"a{n}"), 60, f"every export of a{n}")
    for node in cluster.nodes:
        # a3's export deleted a1 on each node, a4's a2; the two newest are complete.
        assert [status_of(node, f"a{n}") for n in range(1, 5)] == [404, 404, 200, 200]
        audits = node.data_dir / "audit"
        assert sorted(p.name for p in audits.iterdir() if p.name != "~deleting") == ["a3", "a4"]
        assert (export_dir(node, "a4") / "manifest.json").is_file()
        assert not any((audits / "~deleting" / node.node_id).iterdir())

    # A member still exporting one cut when the next applies skips the next.
    busy = cluster.followers()[0]
    with LogHold(busy):
        assert start_audit(leader.url, "b1").status == 200
        wait_until(lambda: status_of(leader, "b1") == 200, 60, "the leader's export of b1")
        wait_until(lambda: status_of(busy, "b1") == 202, 30, f"{busy.node_id} to apply b1")
        assert start_audit(leader.url, "b2").status == 200  # the leader's own is done
        wait_until(lambda: status_of(leader, "b2") == 200, 60, "the leader's export of b2")
        skipped = wait_until(
            lambda: (r := http("GET", f"{busy.url}/v1/audit/b2")).status == 500 and r,
            30,
            f"{busy.node_id} to skip b2",
        )
        assert skipped.json()["code"] == "audit_export_failed"
        assert "b1 was still being exported" in skipped.json()["message"]
        assert status_of(busy, "b1") == 202  # still in progress, never deleted
    wait_until(lambda: status_of(busy, "b1") == 200, 60, f"{busy.node_id}'s export of b1")
    error = json.loads((export_dir(busy, "b2") / "error.json").read_bytes())
    assert error["code"] == "audit_running"


@pytest.fixture
def keep_briefly(tmp_path: Path) -> Iterator[LocalCluster]:
    yield from start(tmp_path, "--audit-keep-age", "2", "--transfer-rate", str(TRANSFER_RATE))


def test_a_second_audit_is_refused_and_an_export_in_progress_outlives_the_age_limit(
    keep_briefly: LocalCluster,
) -> None:
    cluster = keep_briefly
    leader = cluster.leader()
    preload(leader.url)
    assert start_audit(leader.url, "early").status == 200
    wait_until(lambda: all_done(cluster, "early"), 60, "every export of early")
    slow_dir = export_dir(leader, "slow")
    with LogHold(leader):
        started = start_audit(leader.url, "slow")
        assert started.status == 200, started.body
        refused = start_audit(leader.url, "another")
        assert refused.status == 409, refused.body
        assert refused.json()["code"] == "audit_running"
        assert "slow is still being exported" in refused.json()["message"]
        cli = run_cli("audit", "--url", leader.url, "--timeout", "5", "--quiet")
        assert cli.returncode == 4, cli.stderr
        assert "audit_running" in cli.stderr and "slow is still being exported" in cli.stderr
        snapshot = run_cli("audit", "snapshot", "--url", leader.url)
        assert snapshot.returncode == 1 and "audit_running" in snapshot.stderr
        # The export waits for the log while it grows older than --audit-keep-age and
        # retention passes (one a second) delete the other exports: never it.

        def outlived_the_age_limit() -> bool:
            assert status_of(leader, "slow") == 202, "slow stopped before the test could see"
            old = time.time() - slow_dir.stat().st_mtime > 4
            return old and all(status_of(node, "early") == 404 for node in cluster.nodes)

        wait_until(outlived_the_age_limit, 30, "the other exports to age out")
    wait_until(
        lambda: "audit slow: exported" in leader.log_path.read_text(),
        60,
        "the leader's export of slow to finish",
    )
    log = leader.log_path.read_text()
    assert "audit slow: export stopped" not in log and "audit slow: export failed" not in log
    # Past the age limit, every export is deleted on every node, the finished slow too.
    for node in cluster.nodes:
        wait_until(
            partial(lambda n: status_of(n, "slow") == status_of(n, "early") == 404, node),
            30,
            f"{node.node_id} to delete its old exports",
        )
        assert not (node.data_dir / "audit" / "slow").exists()
