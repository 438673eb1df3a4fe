"""`rkv up`, the README's run command: a local cluster that keeps its data across restarts."""

from __future__ import annotations

import base64
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from node.cli.local_cluster import RAFT_PORT_OFFSET
from tests.support.cluster import http, wait_until

RKV = Path(sys.executable).with_name("rkv")


def free_base_port(nodes: int) -> int:
    for _ in range(50):
        base = random.randint(20000, 40000)
        ports = [base + i for i in range(nodes)] + [
            base + RAFT_PORT_OFFSET + i for i in range(nodes)
        ]
        try:
            for port in ports:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free port range")


def start_up(data_dir: Path, base: int, *extra: str) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen(
        [str(RKV), "up", "--data-dir", str(data_dir), "--base-port", str(base), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        lines.append(line)
        if "Ctrl-C stops" in line or "not ready" in line or time.monotonic() > deadline:
            break
    return proc, lines


def stop_up(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    return out


def test_rkv_up_prints_endpoints_serves_and_keeps_data(tmp_path: Path) -> None:
    base = free_base_port(3)
    proc, lines = start_up(tmp_path / "data", base)
    try:
        output = "".join(lines)
        assert "ready; leader" in output, output
        for i in range(3):
            assert f"http://127.0.0.1:{base + i}" in output
        # Open on loopback for a first try, and it says so, with how to turn them on.
        assert "auth and TLS are OFF" in output
        assert "--root-password-file" in output and "rkv certs create" in output
        response = http("PUT", f"http://127.0.0.1:{base}/v1/kv/kept", body=b"across restarts")
        assert response.status == 200, response.body
    finally:
        rest = stop_up(proc)
    assert proc.returncode == 0, rest
    assert "stopped" in rest
    secret = (tmp_path / "data" / "cluster.secret").read_text()
    proc, lines = start_up(tmp_path / "data", base)
    try:
        assert "ready; leader" in "".join(lines)
        got = http("GET", f"http://127.0.0.1:{base + 2}/v1/kv/kept")
        assert (got.status, got.body) == (200, b"across restarts")
        assert (tmp_path / "data" / "cluster.secret").read_text() == secret
    finally:
        stop_up(proc)
    assert proc.returncode == 0


def test_rkv_up_with_a_root_password_file_starts_with_auth_on(tmp_path: Path) -> None:
    password_file = tmp_path / "root.password"
    password_file.write_text("up-root-pw\n")
    password_file.chmod(0o600)
    base = free_base_port(3)
    proc, lines = start_up(
        tmp_path / "data", base, f"--node-arg=--root-password-file={password_file}"
    )
    try:
        output = "".join(lines)
        assert "auth is ON" in output and "curl -u root:PASSWORD" in output, output
        url = f"http://127.0.0.1:{base}/v1/kv/k"
        assert http("PUT", url, body=b"v").status in (401, 503)
        root = {"Authorization": "Basic " + base64.b64encode(b"root:up-root-pw").decode()}
        written = wait_until(
            lambda: http("PUT", url, body=b"v", headers=root).status == 200, 30, "auth on"
        )
        assert written
        assert http("PUT", url, body=b"v").status == 401
    finally:
        stop_up(proc)
    assert proc.returncode == 0
