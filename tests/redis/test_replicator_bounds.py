"""`rkv redis-replicate` end to end against what a master (or anyone in between) can
send: a never-ending bulk string and a decompression bomb from a hostile master
(tests/redis/link_support.py: FakeMaster, on loopback), a backlog past the spool's cap
and a password kept off the command line with a real redis-server. Each bound stops
the replicator with the setting named, exit status 1, in bounded memory, with nothing
committed past the last good checkpoint."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from replication.redis.link.resp import encode_command
from tests.redis import rdb_fixtures as fx
from tests.redis.conftest import RedisServer, run_redis_server
from tests.redis.link_support import FakeMaster, PeakRss
from tests.redis.replica_support import (
    Replicator,
    assert_same,
    checkpoint,
    master_offset,
    rkv_dump,
    wait_caught_up,
)
from tests.redis.resp_client import RespClient
from tests.support.cluster import LocalCluster, http, wait_until

MB = 1_000_000
SEED = fx.RdbWriter(10).select_db(0).key(0, b"seed", fx.string(b"1")).finish()


def _replicator(master: FakeMaster, cluster: LocalCluster, log: Path, *extra: str) -> Replicator:
    replicator = Replicator(RedisServer("127.0.0.1", master.port, log.parent), cluster, log, *extra)
    replicator.source = master.url()
    return replicator


def _dumped(cluster: LocalCluster) -> dict[str, object]:
    return {record["key"]: record["value"] for record in rkv_dump(cluster)}


@pytest.mark.timeout(300)
def test_a_never_ending_bulk_string_stops_the_replicator_in_bounded_memory(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    with FakeMaster(SEED) as master:
        replicator = _replicator(master, cluster, tmp_path / "replicator.log")
        try:
            replicator.start()
            good = b"".join(
                encode_command(*c) for c in (["SELECT", "0"], ["SET", "a", "1"], ["INCR", "n"])
            )
            master.send(good)
            wait_until(
                lambda: (checkpoint(cluster) or {}).get("offset") == len(good), 60, "the commands"
            )
            assert replicator.process is not None
            rss = PeakRss(replicator.process.pid)
            before = rss.read()
            # A bulk string of 1 TiB, then bytes for as long as the replicator reads them.
            master.send(b"*3\r\n$3\r\nSET\r\n$1\r\nc\r\n$1099511627776\r\n")
            flood = threading.Thread(
                target=master.send_forever, args=(b"x" * (1 << 20), 3 << 30), daemon=True
            )
            flood.start()
            assert replicator.wait(120) == 1, replicator.output()[-3000:]
            growth = rss.stop() - before
            master.stop.set()
            flood.join(30)
        finally:
            replicator.stop()
    output = replicator.output()
    assert "stopped" in output and "1099511627776 bytes" in output, output[-3000:]
    assert "--max-command-bytes" in output
    assert "Traceback" not in output
    assert growth < 300 * MB, f"the replicator grew by {growth} bytes"
    # The good commands are in rkv, and the checkpoint right after them.
    assert (checkpoint(cluster) or {}).get("offset") == len(good)
    assert _dumped(cluster) == {"seed": "1", "a": "1", "n": "1"}


@pytest.mark.timeout(300)
def test_a_multi_block_that_never_ends_stops_the_replicator(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    limit = 64 * 1024
    with FakeMaster(SEED) as master:
        replicator = _replicator(
            master, cluster, tmp_path / "replicator.log", "--max-command-bytes", str(limit)
        )
        try:
            replicator.start()
            good = encode_command("SELECT", "0") + encode_command("SET", "a", "1")
            master.send(good)
            wait_until(
                lambda: (checkpoint(cluster) or {}).get("offset") == len(good), 60, "the commands"
            )
            # MULTI, then commands without writes (held until EXEC) and never an EXEC
            master.send(encode_command("MULTI") + encode_command("SET", "b", "2"))
            master.send(encode_command("PUBLISH", "channel", "m" * 100) * 1000)  # 130 kB
            assert replicator.wait(120) == 1, replicator.output()[-3000:]
        finally:
            replicator.stop()
    output = replicator.output()
    assert f"a MULTI/EXEC block of more than {limit} bytes" in output, output[-3000:]
    assert "--max-command-bytes" in output and "Traceback" not in output
    assert (checkpoint(cluster) or {}).get("offset") == len(good)
    assert _dumped(cluster) == {"seed": "1", "a": "1"}


@pytest.mark.timeout(300)
def test_a_decompression_bomb_in_the_snapshot_stops_the_full_sync(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    # 40 quicklist nodes, each an LZF-compressed listpack of a million small integers:
    # under 1 MB on the wire, 40 million elements (gigabytes of Python objects) decoded.
    nodes = 40
    value = fx.length(nodes) + (fx.length(2) + fx.listpack_bomb(1_000_000)) * nodes
    rdb = fx.RdbWriter(10).select_db(0).key(0, b"seed", fx.string(b"1"))
    rdb = rdb.key(18, b"bomb", value)
    payload = rdb.finish()
    assert len(payload) < MB
    with FakeMaster(payload) as master:
        replicator = _replicator(master, cluster, tmp_path / "replicator.log")
        try:
            replicator.start()
            assert replicator.process is not None
            rss = PeakRss(replicator.process.pid)
            assert replicator.wait(120) == 1, replicator.output()[-3000:]
            peak = rss.stop()
        finally:
            replicator.stop()
    output = replicator.output()
    assert "stopped" in output and "key too big to load" in output, output[-3000:]
    assert "b'bomb'" in output and "--max-rdb-value-bytes" in output
    assert "Traceback" not in output
    # What it decoded stayed within its budget, 256 MiB of decoded value (each element
    # counted 64 bytes, about what it takes): with the interpreter, under 400 MB.
    assert peak < 400 * MB, f"the replicator's peak RSS was {peak} bytes"
    # Nothing was switched to: readers see no half-loaded snapshot.
    assert (checkpoint(cluster) or {}).get("state") == "loading"
    leader = cluster.leader()
    assert http("GET", f"{leader.url}/v1/kv/redis/current").status == 404


@pytest.mark.timeout(300)
def test_a_replicator_too_far_behind_stops_at_max_spool_bytes_then_resumes(
    tmp_path: Path, cluster: LocalCluster, redis_server: RedisServer
) -> None:
    replicator = Replicator(
        redis_server, cluster, tmp_path / "replicator.log", "--max-spool-bytes", str(1 << 20)
    )
    value = "v" * 100_000
    try:
        replicator.start()
        with redis_server.client() as client:
            # room for what is written while the replicator is stopped: +CONTINUE later
            client.execute("CONFIG", "SET", "repl-backlog-size", str(256 * 1024 * 1024))
            start = wait_caught_up(cluster, client, replicator)["offset"]
            # 40 MB at once, far faster than rkv commits them
            commands = [c for i in range(400) for c in (["SET", f"k{i}", value], ["INCR", "n"])]
            client.pipeline(commands, batch=100)
            end = master_offset(client)
        assert replicator.wait(120) == 1, replicator.output()[-3000:]
        output = replicator.output()
        assert "too far behind" in output and "--max-spool-bytes" in output, output[-3000:]
        # Exactly the commands up to the checkpoint are in rkv: a prefix of what was sent.
        committed = (checkpoint(cluster) or {})["offset"]
        assert start <= committed < end
        dumped = _dumped(cluster)
        sets = sum(1 for key in dumped if key.startswith("k"))
        incrs = int(str(dumped.get("n", 0)))
        assert sets in (incrs, incrs + 1)  # the batch ends between a SET and its INCR, or after
        assert set(dumped) - {"n"} == {f"k{i}" for i in range(sets)}
        sizes = [len(encode_command(*c)) for c in commands[: sets + incrs]]
        select = len(encode_command("SELECT", "0"))
        assert committed - start - sum(sizes) in (0, select)
        # Restarted with the default cap, it resumes from the checkpoint: nothing twice.
        replicator.extra = []
        replicator.start()
        assert_same(cluster, redis_server, replicator)
        assert replicator.output().count("full sync done") == 1
    finally:
        replicator.stop()


def _authed(server: RedisServer, password: str) -> RespClient:
    client = server.client()
    client.execute("AUTH", password)
    return client


@pytest.mark.timeout(300)
def test_the_masters_password_from_a_file_or_the_environment_stays_off_the_command_line(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    password = "c0rrect-h0rse"
    with run_redis_server(tmp_path / "master", "--requirepass", password) as server:
        secret = tmp_path / "redis.password"
        secret.write_text(password + "\n")
        secret.chmod(0o600)
        replicator = Replicator(
            server, cluster, tmp_path / "from-file.log", "--source-password-file", str(secret)
        )
        try:
            replicator.start()
            with _authed(server, password) as client:
                client.execute("SET", "from", "file")
                wait_caught_up(cluster, client, replicator)
            assert replicator.process is not None
            cmdline = Path(f"/proc/{replicator.process.pid}/cmdline").read_bytes()
            assert password.encode() not in cmdline
        finally:
            replicator.stop()
        assert "warning" not in replicator.output()
        replicator = Replicator(server, cluster, tmp_path / "from-env.log")
        os.environ["RKV_REDIS_PASSWORD"] = password
        try:
            replicator.start()  # the child inherits the environment
        finally:
            del os.environ["RKV_REDIS_PASSWORD"]
        try:
            with _authed(server, password) as client:
                client.execute("SET", "from", "env")
                wait_caught_up(cluster, client, replicator)
        finally:
            replicator.stop()
        assert _dumped(cluster) == {"from": "env"}
        # In the URL it still works, with a warning; a wrong one is refused.
        replicator = Replicator(server, cluster, tmp_path / "from-url.log")
        replicator.source = f"redis://:{password}@127.0.0.1:{server.port}"
        try:
            replicator.start()
            with _authed(server, password) as client:
                client.execute("SET", "from", "url")
                wait_caught_up(cluster, client, replicator)
        finally:
            replicator.stop()
        assert _dumped(cluster) == {"from": "url"}
        assert "warning: the password in --source can be read" in replicator.output()
        secret.write_text("wrong\n")
        wrong = Replicator(
            server, cluster, tmp_path / "wrong.log", "--source-password-file", str(secret)
        )
        wrong.start()
        assert wrong.wait(60) == 3
        assert "authentication failed" in wrong.output()
        assert password not in wrong.output()


@pytest.mark.timeout(300)
def test_nodes_restarted_with_a_lower_max_txn_ops_get_smaller_transactions(
    tmp_path: Path, cluster: LocalCluster, redis_server: RedisServer
) -> None:
    replicator = Replicator(redis_server, cluster, tmp_path / "replicator.log")
    try:
        replicator.start()
        with redis_server.client() as client:
            client.execute("CONFIG", "SET", "repl-backlog-size", str(64 * 1024 * 1024))
            client.execute("SET", "before", "1")
            wait_caught_up(cluster, client, replicator)
        # The operator lowers --max-txn-ops under the running replicator, which learned 1024.
        for node in cluster.nodes:
            node.args[node.args.index("--max-txn-ops") + 1] = "256"
        for i in range(len(cluster.nodes)):
            cluster.kill(i)
        for i in range(len(cluster.nodes)):
            cluster.start_node(i)
        cluster.wait_ready(60)
        with redis_server.client() as client:
            # batches of 800 writes: refused (413), then again from the checkpoint, smaller
            commands = [c for i in range(3000) for c in (["SET", f"k{i}", "v"], ["INCR", "n"])]
            client.pipeline(commands, batch=500)
        assert_same(cluster, redis_server, replicator)
        output = replicator.output()
        assert "rkv refused a transaction" in output, output[-3000:]
        assert "full sync done" in output and output.count("full sync done") == 1
        leader = cluster.leader()
        assert http("GET", f"{leader.url}/v1/status").json()["limits"]["max_txn_ops"] == 256
    finally:
        replicator.stop()
