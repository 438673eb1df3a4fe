"""The raft port and the cluster secret.

pysyncobj unpickles every message that arrives on its raft port. Without a secret,
anyone who can open a TCP connection to that port can run code as the node's user: the
positive control below (a node in --insecure-dev-mode) shows the payload used here really
does run a command. That is exactly why rkv refuses to start without a cluster secret:
with one, pysyncobj authenticates and decrypts every message (Fernet) before it unpickles
anything, and the same payload only gets the connection closed.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import REPO, LocalCluster, NodeProcess, free_ports, http, wait_until


def code_running_pickle(command: str) -> bytes:
    """Pickle bytes (protocol 2) that call os.system(command) when unpickled.

    Built opcode by opcode, so no object with a dangerous __reduce__ exists in this process:
    PROTO 2, GLOBAL 'os system', BINUNICODE command, TUPLE1, REDUCE, STOP.
    """
    arg = command.encode()
    return (
        b"\x80\x02"
        + b"cos\nsystem\n"
        + b"X"
        + struct.pack("<I", len(arg))
        + arg
        + b"\x85"
        + b"R"
        + b"."
    )


def unencrypted_frame(payload: bytes) -> bytes:
    """A message as an unencrypted pysyncobj peer frames it: native 'i' length + zlib data."""
    data = zlib.compress(payload, 3)
    return struct.pack("i", len(data)) + data


@pytest.fixture
def marker_file() -> Iterator[Path]:
    path = Path("/tmp") / f"rkv-raft-security-{uuid.uuid4().hex}"
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def send_payload(node: NodeProcess, marker: Path) -> None:
    frame = unencrypted_frame(code_running_pickle(f"touch {marker}"))
    with socket.create_connection(("127.0.0.1", node.raft_port), timeout=5) as conn:
        conn.sendall(frame)
        # Wait for the node to process it: it closes the connection, or answers nothing.
        conn.settimeout(3)
        try:
            while conn.recv(4096):
                pass
        except (TimeoutError, ConnectionResetError):
            pass


def test_node_refuses_to_start_without_a_secret(tmp_path: Path) -> None:
    http_port, raft_port = free_ports(2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RKV_")}
    env["PYTHONPATH"] = str(REPO)
    command = [
        sys.executable, "-m", "node.cli", "node",
        "--id", "a",
        "--data-dir", str(tmp_path / "data"),
        "--listen", f"127.0.0.1:{http_port}",
        "--raft-listen", f"127.0.0.1:{raft_port}",
    ]  # fmt: skip
    try:
        result = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=20, check=False
        )
    except subprocess.TimeoutExpired as running:
        pytest.fail(f"the node started without a secret (still running after 20 s): {running}")
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert "secret is required" in result.stderr, result.stderr
    assert "--secret-file" in result.stderr, result.stderr
    assert not (tmp_path / "data").exists(), "it touched the data directory before refusing"


def test_unauthenticated_raft_message_runs_nothing_on_a_secured_node(
    cluster: LocalCluster, marker_file: Path
) -> None:
    """With the cluster secret set, a code-running pickle sent to each node's raft port
    runs nothing, and the cluster keeps working."""
    for node in cluster.nodes:
        send_payload(node, marker_file)
    with pytest.raises(TimeoutError):
        wait_until(marker_file.exists, 3, "the marker file (it must never appear)")
    assert not marker_file.exists()

    put = http("PUT", f"{cluster.nodes[0].url}/v1/kv/security/after", body=b"still-works")
    assert put.status == 200, put.body
    for node in cluster.nodes:
        got = http("GET", f"{node.url}/v1/kv/security/after")
        assert got.status == 200 and got.body == b"still-works", (node.node_id, got)


def test_positive_control_the_payload_runs_code_on_an_insecure_node(
    tmp_path: Path, marker_file: Path
) -> None:
    """The same bytes against a one-node cluster in --insecure-dev-mode DO run the command:
    the payload is real, and this is exactly why rkv requires a secret."""
    single = LocalCluster(tmp_path / "insecure", size=1)
    node = single.nodes[0]
    i = node.args.index("--secret-file")
    node.args = [*node.args[:i], *node.args[i + 2 :], "--insecure-dev-mode"]
    try:
        single.start()
        assert "INSECURE dev mode" in node.log_path.read_text(errors="replace")
        send_payload(node, marker_file)
        wait_until(marker_file.exists, 10, "the payload to run on the insecure node")
    finally:
        single.stop()


def test_the_raft_port_listens_on_the_raft_listen_address_only(tmp_path: Path) -> None:
    """--raft-listen 127.0.0.1:P binds that address, not every interface (pysyncobj binds
    0.0.0.0 unless told otherwise): the port must not be reachable at another address of
    the machine, here 127.0.0.2 (all of 127/8 reaches this host)."""
    single = LocalCluster(tmp_path / "one", size=1)
    node = single.nodes[0]
    try:
        single.start()
        socket.create_connection(("127.0.0.1", node.raft_port), timeout=5).close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.2", node.raft_port), timeout=5).close()
    finally:
        single.stop()
