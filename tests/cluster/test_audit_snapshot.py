"""The consistency audit's cut on three real node processes: under a concurrent
writer, POST /v1/audit makes every node export the same raft index, applied
offset, key count and bucket digests while writes keep succeeding; a file
downloaded from a node equals the one on its disk; the log replays to the
state; refusals; and `rkv audit snapshot --wait`.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from node.snapshot.file import SnapshotReader, verify_snapshot
from node.storage.log_feed import RecordDecoder
from node.storage.record import Record, RecordOp
from tests.support.cluster import REPO, LocalCluster, NodeProcess, http, wait_until

PRELOAD_KEYS = 40_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = LocalCluster(tmp_path_factory.mktemp("audit") / "cluster")
    try:
        running.start()
        yield running
    finally:
        running.stop()


def preload(url: str) -> None:
    """PRELOAD_KEYS keys of 200 bytes, 1000 per transaction."""
    for start in range(0, PRELOAD_KEYS, 1000):
        ops = [
            {"op": "put", "key": f"pre/{i:06d}", "value": f"{i:06d}" + "v" * 194}
            for i in range(start, start + 1000)
        ]
        body = json.dumps({"success": ops}).encode()
        response = http("POST", f"{url}/v1/txn?encoding=utf-8", body=body, timeout=60)
        assert response.status == 200, response.body[:300]


class Writer(threading.Thread):
    """Writes w/<n> to the leader one after another until stopped; remembers when each
    write was acknowledged (ms) and every failure."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.acked: list[float] = []
        self.failures: list[str] = []

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                response = http("PUT", f"{self.url}/v1/kv/w%2F{n:06d}", body=b"x" * 100)
            except OSError as exc:
                self.failures.append(repr(exc))
                continue
            if response.status == 200:
                self.acked.append(time.time() * 1000)
            else:
                self.failures.append(f"{response.status} {response.body[:200]!r}")


def export_of(node: NodeProcess, audit_id: str) -> dict[str, Any] | None:
    response = http("GET", f"{node.url}/v1/audit/{audit_id}")
    if response.status == 200:
        manifest: dict[str, Any] = response.json()
        return manifest
    assert response.status in (202, 404), (node.node_id, response.status, response.body)
    return None


def read_records(data: bytes, source: str) -> list[Record]:
    decoder = RecordDecoder(source, 64 * 1024 * 1024)
    records = decoder.feed(data)
    decoder.finish()
    return records


def test_every_node_exports_the_same_cut_while_writes_go_on(cluster: LocalCluster) -> None:
    leader = cluster.leader()
    preload(leader.url)
    writer = Writer(leader.url)
    writer.start()
    try:
        wait_until(lambda: len(writer.acked) >= 20, 30, "the writer to get going")
        # Asked on a follower: 307 to the leader, as membership changes are.
        follower = cluster.followers()[0]
        body = json.dumps({"audit_id": "cut-1", "buckets": 8}).encode()
        redirected = http("POST", f"{follower.url}/v1/audit", body=body)
        assert redirected.status == 307, redirected.body
        assert redirected.headers["Location"] == f"{leader.url}/v1/audit"
        response = http("POST", redirected.headers["Location"], body=body, timeout=30)
        assert response.status == 200, response.body
        started = response.json()
        assert started["audit_id"] == "cut-1" and len(started["split_points"]) == 7
        manifests: dict[str, dict[str, Any]] = {}

        def all_done() -> bool:
            for node in cluster.nodes:
                if node.node_id not in manifests:
                    found = export_of(node, "cut-1")
                    if found is not None:
                        manifests[node.node_id] = found
            return len(manifests) == len(cluster.nodes)

        wait_until(all_done, 120, "every node's export")
        acked_at_end = len(writer.acked)
        wait_until(lambda: len(writer.acked) > acked_at_end + 10, 30, "more writes")
    finally:
        writer.stop.set()
        writer.join(30)
    assert writer.failures == []

    first = manifests[leader.node_id]
    for node_id, manifest in manifests.items():
        assert manifest["replica"] == node_id
        for field in (
            "raft_index",
            "applied_offset",
            "key_count",
            "buckets",
            "split_points",
            "bucket_counts",
            "bucket_digests",
            "log_records",
        ):
            assert manifest[field] == first[field], (node_id, field)
    assert first["raft_index"] == started["raft_index"]
    assert first["split_points"] == started["split_points"]
    assert first["buckets"] == 8 and first["key_count"] > PRELOAD_KEYS  # + writes, members
    # Writes were acknowledged while the exports were being written, and after the cut.
    during = [
        t
        for m in manifests.values()
        for t in writer.acked
        if m["created_ms"] <= t <= m["created_ms"] + m["seconds"] * 1000
    ]
    assert during, [(m["created_ms"], m["seconds"]) for m in manifests.values()]
    status = http("GET", f"{leader.url}/v1/status").json()
    assert status["applied_offset"] > first["applied_offset"]

    # A follower's files, downloaded, equal its files on disk; its log replays to its state.
    node = next(n for n in cluster.nodes if n is not leader)
    directory = node.data_dir / "audit" / "cut-1" / node.node_id
    manifest = manifests[node.node_id]
    state: dict[bytes, tuple[int, int, bytes]] = {}
    for name in [*manifest["files"]["state"], manifest["files"]["log"], "manifest.json"]:
        download = http("GET", f"{node.url}/v1/audit/cut-1/files/{name}", timeout=60)
        assert download.status == 200, (name, download.body[:200])
        assert download.body == (directory / name).read_bytes(), name
    for name in manifest["files"]["state"]:
        header = verify_snapshot(directory / name)
        assert (header.applied_index, header.applied_offset) == (
            manifest["raft_index"],
            manifest["applied_offset"],
        )
        with open(directory / name, "rb") as f:
            for record, _ in SnapshotReader(f, name).records():
                state[record.key] = (record.offset, record.create_version, record.value)
    assert len(state) == manifest["key_count"]
    replayed: dict[bytes, tuple[int, int, bytes]] = {}
    log = read_records((directory / "log.rkvlog").read_bytes(), "log.rkvlog")
    assert len(log) == manifest["log_records"]
    for record in log:
        if record.op is RecordOp.PUT:
            replayed[record.key] = (record.offset, record.create_version, record.value)
        else:
            replayed.pop(record.key, None)
    assert replayed == state
    assert base64.b64decode(manifest["split_points"][0]) in (key[:495] for key in state)


def test_refusals(cluster: LocalCluster) -> None:
    leader = cluster.leader()
    node = cluster.nodes[0]
    missing = http("GET", f"{node.url}/v1/audit/no-such-audit")
    assert (missing.status, missing.json()["code"]) == (404, "audit_not_found")
    bad_id = http("GET", f"{node.url}/v1/audit/bad%20id")
    assert (bad_id.status, bad_id.json()["code"]) == (400, "invalid_audit_id")
    for body, code in (
        (b'{"buckets": 0}', "invalid_buckets"),
        (b'{"buckets": 5000}', "invalid_buckets"),
        (b'{"audit_id": "../x"}', "invalid_audit_id"),
        (b"{oops", "invalid_request"),
    ):
        refused = http("POST", f"{leader.url}/v1/audit", body=body)
        assert (refused.status, refused.json()["code"]) == (400, code), body
        assert refused.json()["message"]
    started = http("POST", f"{leader.url}/v1/audit", body=b'{"audit_id": "r-1", "buckets": 2}')
    assert started.status == 200, started.body
    again = http("POST", f"{leader.url}/v1/audit", body=b'{"audit_id": "r-1"}')
    assert (again.status, again.json()["code"]) == (409, "audit_exists")
    # One audit at a time (node/audit/jobs.py): the next test's must not find r-1 running.
    for member in cluster.nodes:
        wait_until(partial(export_of, member, "r-1"), 60, f"{member.node_id}'s export")
    for name in ("bucket-00002.rkvsnap", "..%2Fr-1%2Fmanifest.json", "node.log"):
        absent = http("GET", f"{node.url}/v1/audit/r-1/files/{name}")
        assert (absent.status, absent.json()["code"]) == (404, "audit_file_not_found"), name


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        check=False,
    )


def test_the_cli_takes_a_cut_and_waits_for_every_node(cluster: LocalCluster) -> None:
    follower = cluster.followers()[0]
    done = run_cli(
        "audit", "snapshot", "--url", follower.url, "--id", "cli-1", "--buckets", "4", "--wait"
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    audit_id, raft_index = lines[0].split()
    assert audit_id == "cli-1" and int(raft_index) > 0
    for node in cluster.nodes:
        assert any(line.startswith(f"{node.node_id}: raft_index {raft_index} ") for line in lines)
    assert lines[-1] == f"bucket digests: identical on {len(cluster.nodes)} nodes"
    assert Path(cluster.nodes[0].data_dir / "audit" / "cli-1").is_dir()

    again = run_cli("audit", "snapshot", "--url", follower.url, "--id", "cli-1")
    assert again.returncode == 1 and "audit_exists" in again.stderr
    usage = run_cli("audit", "snapshot", "--buckets", "0")
    assert usage.returncode == 2
    unreachable = run_cli("audit", "snapshot", "--url", "http://127.0.0.1:9", "--timeout", "2")
    assert unreachable.returncode == 3
    # No action: the whole audit (node/cli/audit_all.py, tests/spark/test_audit_end_to_end.py).
    no_action = run_cli("audit", "--url", "http://127.0.0.1:9", "--timeout", "2")
    assert no_action.returncode == 4 and "unreachable" in no_action.stderr
    assert run_cli("audit", "--buckets", "0").returncode == 2
    no_dir = run_cli("audit", "--exports-dir", "/nonexistent/rkv-audits")
    assert no_dir.returncode == 2 and "no such directory" in no_dir.stderr
    bad_host = run_cli("audit", "--url", "http://no such host:8001")
    assert bad_host.returncode == 2 and "bad host" in bad_host.stderr
