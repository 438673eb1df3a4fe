"""TLS on the HTTP API, against real node processes serving HTTPS with certificates that
`rkv certs create`'s code made: the clients and the CLI with the CA, members calling
each other (a wiped follower's rebuild, a node joining), and the refusals: the wrong
CA, plain HTTP sent to the TLS port."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from http.client import HTTPConnection, HTTPException
from pathlib import Path

import aiohttp
import pytest

from http_api.client import (
    AsyncRkvClient,
    Compare,
    Credentials,
    Op,
    RetryPolicy,
    RkvClient,
    TlsError,
)
from node.cli.cert_authority import CertificatePlan, create_certificates
from tests.support.cluster import ClusterTls, LocalCluster, http, scan_all, wait_until

RKV = Path(sys.executable).with_name("rkv")

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = LocalCluster(
        Path(tmp_path_factory.mktemp("tls")) / "cluster",
        tls=ClusterTls(),
        extra_args=["--tls-handshake-timeout", "1"],
    )
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA that signed none of the cluster's certificates."""
    out = Path(tmp_path_factory.mktemp("other-ca"))
    create_certificates(CertificatePlan(out, ("127.0.0.1",), ("stranger",)))
    return out / "ca.crt"


def rkv(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RKV_")}
    return subprocess.run(
        [str(RKV), *args],
        capture_output=True,
        check=False,
        timeout=60,
        env={**environment, **(env or {})},
    )


def test_nodes_advertise_https_and_serve_only_it(tls_cluster: LocalCluster) -> None:
    leader = tls_cluster.leader()
    status = http("GET", leader.url + "/v1/status").json()
    assert status["leader"]["url"].startswith("https://")
    assert all(m["url"].startswith("https://") for m in status["members"])


def test_python_clients_put_get_scan_txn_watch_over_tls(tls_cluster: LocalCluster) -> None:
    urls = [n.url for n in tls_cluster.nodes]
    credentials = tls_cluster.credentials()
    with RkvClient(urls, credentials=credentials) as client:
        version = client.put("tls/a", "1")
        assert client.get("tls/a").value == b"1"
        client.put("tls/b", "2")
        assert [i.key for i in client.scan("tls/")] == [b"tls/a", b"tls/b"]
        result = client.txn(
            compare=[Compare.version("tls/a", version)],
            success=[Op.put("tls/c", "3"), Op.get("tls/b")],
        )
        assert result.succeeded
        assert client.get("tls/c").value == b"3"

    async def async_side() -> tuple[bytes, dict[str, object]]:
        async with AsyncRkvClient(urls, credentials=credentials) as client:
            start = await client.put("tls/async", "x")
            value = (await client.get("tls/async")).value
        # The change feed over TLS, with the same client context.
        context = tls_cluster.client_context()
        leader = tls_cluster.leader()
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                f"{leader.url}/v1/watch?prefix=tls%2Fasync&from={start}",
                ssl=context,
            ) as response,
        ):
            assert response.status == 200
            line = json.loads(await response.content.readline())
        return value, line

    value, change = asyncio.run(async_side())
    assert value == b"x"
    assert base64.b64decode(str(change["key"])) == b"tls/async"


def test_a_client_with_the_wrong_ca_fails_the_handshake_at_once(
    tls_cluster: LocalCluster, other_ca: Path
) -> None:
    wrong = Credentials(cafile=str(other_ca))
    with (
        RkvClient(tls_cluster.nodes[0].url, credentials=wrong, retry=RetryPolicy()) as client,
        pytest.raises(TlsError) as caught,
    ):
        client.get("tls/a")
    assert caught.value.code == "tls_failed"
    assert "certificate" in str(caught.value)
    # Without any CA the system's are used: they do not know the test CA either.
    with RkvClient(tls_cluster.nodes[0].url) as client, pytest.raises(TlsError):
        client.status()


def test_plain_http_to_the_tls_port_is_refused_cleanly(tls_cluster: LocalCluster) -> None:
    node = tls_cluster.nodes[1]
    for _ in range(3):
        conn = HTTPConnection("127.0.0.1", node.http_port, timeout=10)
        with pytest.raises((ConnectionError, HTTPException)):
            conn.request("GET", "/v1/status")
            conn.getresponse()
        conn.close()
    # A client that starts a handshake and never finishes it is dropped after
    # --tls-handshake-timeout (1 s here): it holds no connection for long.
    with socket.create_connection(("127.0.0.1", node.http_port), timeout=30) as idle:
        idle.sendall(b"\x16\x03\x01\x00")  # the start of a TLS record, then nothing
        assert idle.recv(1) == b""
    # The node still serves, and said nothing alarming about it.
    assert http("GET", node.url + "/readyz").status == 200
    log = node.log_path.read_text(errors="replace")
    assert "Traceback" not in log
    assert "ERROR" not in log


def test_the_cli_over_tls(tls_cluster: LocalCluster, other_ca: Path, tmp_path: Path) -> None:
    url = tls_cluster.nodes[0].url
    ca = str(tls_cluster.ca_file)
    put = rkv("put", "cli/tls", "hello", "--url", url, "--cacert", ca)
    assert put.returncode == 0, put.stderr
    got = rkv("get", "cli/tls", "--url", url, env={"RKV_CACERT": ca})
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == b"hello"
    members = rkv("cluster", "members", "--url", url, "--cacert", ca)
    assert members.returncode == 0, members.stderr
    assert members.stdout.count(b"https://") == 3
    saved = tmp_path / "state.snapshot"
    snapshot = rkv("snapshot", "save", str(saved), "--url", url, "--cacert", ca)
    assert snapshot.returncode == 0, snapshot.stderr
    assert saved.stat().st_size > 0

    # The audit: the cut on the leader, every member's export polled and its files
    # downloaded over HTTPS, compared with the Python engine.
    audit = rkv(
        "audit", "--url", url, "--cacert", ca, "--engine", "python", "--out", str(tmp_path / "a")
    )
    assert audit.returncode == 0, audit.stderr
    assert list((tmp_path / "a" / "exports").glob("*/n*/manifest.json"))

    # The Redis side's rkv client: it reaches the cluster (nothing replicated yet).
    dump = rkv("redis-dump", "--url", url, "--cacert", ca)
    assert b"tls_failed" not in dump.stderr and b"unreachable" not in dump.stderr, dump.stderr
    assert rkv("redis-dump", "--url", url, "--cacert", str(other_ca)).returncode == 3

    wrong = rkv("get", "cli/tls", "--url", url, "--cacert", str(other_ca))
    assert wrong.returncode == 3
    assert b"certificate" in wrong.stderr
    assert b"Traceback" not in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1

    wrong_members = rkv("cluster", "members", "--url", url, "--cacert", str(other_ca))
    assert wrong_members.returncode == 3
    assert b"tls_failed" in wrong_members.stderr
    assert b"Traceback" not in wrong_members.stderr

    plain = rkv("get", "cli/tls", "--url", url.replace("https://", "http://"), "--cacert", ca)
    assert plain.returncode == 3
    assert b"https://" in plain.stderr
    assert b"Traceback" not in plain.stderr

    missing = rkv("get", "cli/tls", "--url", url, "--cacert", str(tmp_path / "nope.crt"))
    assert missing.returncode == 2
    assert b"nope.crt" in missing.stderr
    assert b"Traceback" not in missing.stderr


def test_members_rebuild_and_join_over_tls(tmp_path: Path) -> None:
    """A wiped follower installs the leader's state over HTTPS (the node-to-node
    download), and a new node joins through an https:// URL."""
    cluster = LocalCluster(
        tmp_path / "cluster", tls=ClusterTls(), extra_args=["--raft-compaction-entries", "20"]
    )
    try:
        cluster.start()
        credentials = cluster.credentials()
        with RkvClient([n.url for n in cluster.nodes], credentials=credentials) as client:
            follower = cluster.followers()[0]
            index = cluster.nodes.index(follower)
            cluster.kill(index)
            shutil.rmtree(follower.data_dir)
            last = 0
            for i in range(120):  # past several raft markers: the journal cannot help it
                last = client.put(f"rb/{i:04d}", f"v{i}")
            cluster.start_node(index)
            items = wait_until(
                lambda: _stale_scan(follower.url, last),
                90,
                "the wiped follower to rebuild over TLS",
            )
            assert {i["key"] for i in items} == {b"rb/%04d" % i for i in range(120)}
            log = follower.log_path.read_text(errors="replace")
            assert "caught up" in log

            joined = cluster.add_node("n3", cluster.nodes[0].url)
            cluster.wait_ready(timeout=90, nodes=[joined])
            items = wait_until(lambda: _stale_scan(joined.url, last), 90, "the new node's data")
            assert len(items) == 120
            members = http("GET", cluster.nodes[0].url + "/v1/cluster/members").json()
            assert joined.url in {m["url"] for m in members["members"]}
    finally:
        cluster.stop()


def _stale_scan(url: str, version: int) -> list[dict[str, object]] | None:
    try:
        return scan_all(url, b"rb/", query=f"consistency=stale&min_version={version}") or None
    except (OSError, AssertionError):
        return None
