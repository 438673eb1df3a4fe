"""GET /v1/snapshot on a follower, restored into a fresh data dir that a single node
(a 1-member cluster) then serves: every key with its version and create version."""

from __future__ import annotations

import functools
import io
import os
import shutil
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from node.cli.snapshot import restore_snapshot_command, save_snapshot
from node.snapshot.file import SnapshotReader, verify_snapshot
from tests.support.cluster import (
    REPO,
    LocalCluster,
    free_ports,
    http,
    scan_all,
    wait_until,
)


def write_keys(url: str) -> tuple[dict[bytes, bytes], int]:
    """Puts, overwrites and deletes through ``url``; the expected values and the last
    version written."""
    expected: dict[bytes, bytes] = {}
    last = 0

    def put(key: bytes, value: bytes) -> None:
        nonlocal last
        path = urllib.parse.quote(key, safe="")
        response = http("PUT", f"{url}/v1/kv/{path}", body=value)
        assert response.status == 200, response.body
        expected[key] = value
        last = response.json()["version"]

    for i in range(120):
        put(b"snap/%03d" % i, b"value %d" % i)
    for i in range(0, 120, 4):
        put(b"snap/%03d" % i, b"overwritten %d" % i)
    put(b"bin/\x00\xff\x01", b"\x00binary\xff")
    put(b"long/" + b"L" * 700, b"a long key")
    for i in (1, 2, 3):
        response = http("DELETE", f"{url}/v1/kv/snap%2F{i:03d}")
        assert response.status == 200, response.body
        expected.pop(b"snap/%03d" % i)
        last = response.json()["version"]
    return expected, last


def state(url: str, query: str = "") -> dict[bytes, tuple[int, int, bytes]]:
    return {
        item["key"]: (item["version"], item["create_version"], item["value"])
        for item in scan_all(url, b"", query=query)
    }


def same_state(url: str, query: str, want: dict[bytes, tuple[int, int, bytes]]) -> bool:
    return state(url, query) == want


@contextmanager
def single_node(data_dir: Path, log_path: Path) -> Iterator[str]:
    """`rkv node` alone on ``data_dir``: no --peer (a 1-member cluster), dev mode."""
    http_port, raft_port = free_ports(2)
    args = [
        "--id", "solo",
        "--data-dir", str(data_dir),
        "--listen", f"127.0.0.1:{http_port}",
        "--raft-listen", f"127.0.0.1:{raft_port}",
        "--insecure-dev-mode",
    ]  # fmt: skip
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "node.cli", "node", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    url = f"http://127.0.0.1:{http_port}"
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def ready(url: str) -> bool:
    try:
        return http("GET", url + "/readyz", timeout=2).status == 200
    except OSError:
        return False


def test_snapshot_from_a_follower_restores_into_a_single_node_cluster(
    cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    leader = cluster.leader()
    expected, last = write_keys(leader.url)
    before = state(leader.url)
    assert {key: value for key, (_, _, value) in before.items()} == expected
    follower = cluster.followers()[0]
    wait_until(
        lambda: state(follower.url, f"consistency=stale&min_version={last}") == before,
        30,
        "the follower to apply every write",
    )

    direct = http("GET", follower.url + "/v1/snapshot", timeout=30)
    assert direct.status == 200
    assert direct.headers["Content-Type"] == "application/octet-stream"
    assert "Content-Length" not in direct.headers  # streamed as it is read
    assert SnapshotReader(io.BytesIO(direct.body), "GET /v1/snapshot").header.record_count == len(
        expected
    )
    assert int(direct.headers["Rkv-Snapshot-Offset"]) >= last
    assert int(direct.headers["Rkv-Snapshot-Index"]) > 0

    path = tmp_path / "backup.snapshot"
    assert save_snapshot(follower.url, path) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"saved snapshot of {len(expected)} keys at raft index ")
    header = verify_snapshot(path)
    assert header.record_count == len(expected)
    assert header.applied_offset >= last
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]

    restored = tmp_path / "restored"
    assert restore_snapshot_command(path, restored) == 0
    assert capsys.readouterr().out.startswith(f"restored {len(expected)} keys")
    with single_node(restored, tmp_path / "solo.log") as url:
        wait_until(lambda: ready(url), 30, "the single node to elect itself")
        status = http("GET", url + "/v1/status").json()
        assert status["role"] == "leader"
        assert status["applied_offset"] == header.applied_offset
        assert state(url) == before  # linearizable: through the new raft log
        for key, (version, create, value) in list(before.items())[:5]:
            quoted = urllib.parse.quote(key, safe="")
            got = http("GET", f"{url}/v1/kv/{quoted}")
            assert got.status == 200 and got.body == value
            assert got.headers["Rkv-Version"] == str(version)
            assert got.headers["Rkv-Create-Version"] == str(create)
        # The new cluster takes writes; versions continue after the snapshot's offset.
        put = http("PUT", url + "/v1/kv/after-restore", body=b"new")
        assert put.status == 200, put.body
        assert put.json()["version"] == header.applied_offset + 1
        assert http("GET", url + "/v1/kv/snap%2F000").body == before[b"snap/000"][2]

    # The same through the real `rkv` command line.
    rkv = Path(sys.executable).with_name("rkv")
    saved = tmp_path / "cli.snapshot"

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(rkv), *argv], capture_output=True, text=True, timeout=120, check=False
        )

    done = run("snapshot", "save", str(saved), "--url", follower.url)
    assert done.returncode == 0 and "saved snapshot of" in done.stdout, done.stderr
    done = run("snapshot", "restore", str(saved), "--data-dir", str(tmp_path / "cli-restored"))
    assert done.returncode == 0 and "restored" in done.stdout, done.stderr
    again = run("snapshot", "restore", str(saved), "--data-dir", str(tmp_path / "cli-restored"))
    assert again.returncode == 1 and "Traceback" not in again.stderr, again.stderr


class _CutHandler(BaseHTTPRequestHandler):
    """Serves ``body`` with its full Content-Length but stops sending half-way."""

    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body[: len(self.body) // 2])
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_truncated_download_is_refused(
    cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    leader = cluster.leader()
    write_keys(leader.url)
    body = http("GET", leader.url + "/v1/snapshot", timeout=30).body

    # A download cut short by the server: save_snapshot refuses it, leaves no file.
    _CutHandler.body = body
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CutHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        target = tmp_path / "cut.snapshot"
        status = save_snapshot(f"http://127.0.0.1:{server.server_address[1]}", target)
        assert status != 0
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert not target.exists()
        assert list(tmp_path.iterdir()) == [tmp_path / "cluster"]
    finally:
        server.shutdown()
        server.server_close()

    # A truncated file (however it came about): restore refuses it, writes nothing.
    for cut in (10, len(body) // 2, len(body) - 1):
        truncated = tmp_path / f"truncated-{cut}.snapshot"
        truncated.write_bytes(body[:cut])
        data_dir = tmp_path / f"restore-{cut}"
        assert restore_snapshot_command(truncated, data_dir) == 1
        err = capsys.readouterr().err
        assert "truncated" in err and err.count("\n") == 1
        assert not data_dir.exists()


def test_keep_raft_index_rebuilds_a_lost_member_of_the_same_cluster(tmp_path: Path) -> None:
    """A member whose data dir is lost is rebuilt from a snapshot with its raft index
    kept: its fresh raft journal gets the leader's marker (small raft compaction),
    the entries after the snapshot are pulled or replayed, and it converges."""
    cluster = LocalCluster(tmp_path / "cluster", extra_args=["--raft-compaction-entries", "20"])
    try:
        cluster.start()
        leader = cluster.leader()
        write_keys(leader.url)
        path = tmp_path / "member.snapshot"
        assert save_snapshot(cluster.followers()[1].url, path) == 0
        lost = cluster.followers()[0]
        index = cluster.nodes.index(lost)
        cluster.kill(index)
        for k in range(60):  # written while the member is down, after the snapshot
            assert http("PUT", f"{leader.url}/v1/kv/later%2F{k}", body=b"%d" % k).status == 200
        shutil.rmtree(lost.data_dir)
        assert restore_snapshot_command(path, lost.data_dir, keep_raft_index=True) == 0
        cluster.start_node(index)
        last = http("PUT", f"{leader.url}/v1/kv/final", body=b"f").json()["version"]
        want = state(leader.url)

        def converged() -> bool:
            try:
                return state(lost.url, f"consistency=stale&min_version={last}") == want
            except (OSError, AssertionError):
                return False

        wait_until(converged, 60, "the rebuilt member to converge")
        status = lost.status()
        assert status is not None and status["stalled"] is None
        assert status["applied_offset"] >= last
    finally:
        cluster.stop()


def test_one_snapshot_seeds_every_member_of_a_new_three_node_cluster(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    write_keys(cluster.leader().url)
    # A lease and a key attached to it: lease state is records, restored like keys.
    granted = http("POST", f"{cluster.leader().url}/v1/leases", body=b'{"ttl": 600}')
    assert granted.status == 200, granted.body
    lease = granted.json()["id"]
    attached = http("PUT", f"{cluster.leader().url}/v1/kv/leased?lease={lease}", body=b"x")
    assert attached.status == 200, attached.body
    before = state(cluster.leader().url)
    path = tmp_path / "seed.snapshot"
    follower = cluster.followers()[0]
    wait_until(
        functools.partial(same_state, follower.url, "consistency=stale", before),
        30,
        "the follower to apply the lease",
    )
    assert save_snapshot(follower.url, path) == 0
    seeded = LocalCluster(tmp_path / "seeded")
    for node in seeded.nodes:
        assert restore_snapshot_command(path, node.data_dir) == 0
    try:
        seeded.start()
        leader = seeded.leader()
        assert state(leader.url) == before
        info = http("GET", f"{leader.url}/v1/leases/{lease}?encoding=utf-8")
        assert info.status == 200 and info.json()["keys"] == ["leased"], info.body
        revoked = http("DELETE", f"{leader.url}/v1/leases/{lease}")
        assert revoked.status == 200 and revoked.json()["deleted_keys"] == 1, revoked.body
        last = 0
        for k in range(30):
            response = http("PUT", f"{leader.url}/v1/kv/new%2F{k}", body=b"x")
            assert response.status == 200, response.body
            last = response.json()["version"]
        want = state(leader.url)
        query = f"consistency=stale&min_version={last}"
        for node in seeded.nodes:
            wait_until(
                functools.partial(same_state, node.url, query, want),
                30,
                f"{node.node_id} to apply every write",
            )
    finally:
        seeded.stop()
