"""`rkv redis-replicate` end to end: a real redis-server, a real 3-node rkv cluster (its
nodes at --max-txn-ops 1024: tests/redis/conftest.py), the replicator as a child
process; rkv's `redis-dump` compared with the same dump read from Redis itself."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.redis.conftest import NODE_MAX_TXN_OPS, RedisServer, run_redis_server
from tests.redis.replica_support import (
    Replicator,
    assert_same,
    checkpoint,
    port_closed,
    rkv_dump,
    start_on_port,
    wait_caught_up,
)
from tests.redis.workload import populate, random_workload, send_all
from tests.support.cluster import LocalCluster, http, wait_until


@pytest.mark.timeout(300)
def test_full_sync_then_a_live_workload_end_identical_to_redis(
    tmp_path: Path, cluster: LocalCluster, redis_server: RedisServer
) -> None:
    with redis_server.client() as client:
        populate(client)
    replicator = Replicator(redis_server, cluster, tmp_path / "replicator.log")
    try:
        replicator.start()
        with redis_server.client() as client:
            wait_caught_up(cluster, client, replicator)
            wait_until(lambda: "full sync done" in replicator.output(), 10, "the status line")
            random_workload(client, seed=7, count=3000)
        assert_same(cluster, redis_server, replicator)
        # the data is laid out as documented: the generation pointer and a string record
        leader = cluster.leader()
        current = http("GET", f"{leader.url}/v1/kv/redis/current").body
        generation = json.loads(current)["generation"]
        raw = http("GET", f"{leader.url}/v1/kv/redis/g{generation}/d0/k/s:int").body
        assert raw == b'{"t":"string","x":null}\n12345'
    finally:
        replicator.stop()


@pytest.mark.timeout(300)
def test_kill_minus_nine_mid_stream_resumes_with_continue_and_applies_nothing_twice(
    tmp_path: Path, cluster: LocalCluster, redis_server: RedisServer
) -> None:
    replicator = Replicator(redis_server, cluster, tmp_path / "replicator.log")
    stop = threading.Event()

    def non_idempotent() -> None:
        with redis_server.client() as client:
            i = 0
            while not stop.is_set():
                send_all(
                    client,
                    [
                        ["INCR", "counter"],
                        ["APPEND", f"log:{i % 20}", f"{i},"],
                        ["RPUSH", "list", str(i)],
                        ["MULTI"],
                        ["HINCRBY", "h", "n", "1"],
                        ["INCRBY", "counter", "10"],
                        ["EXEC"],
                    ],
                )
                i += 1
                time.sleep(0.005)  # a steady stream, not a flood

    writer = threading.Thread(target=non_idempotent, daemon=True)
    with redis_server.client() as client:
        # room for everything written while the replicator is down: +CONTINUE, not a resync
        client.execute("CONFIG", "SET", "repl-backlog-size", str(256 * 1024 * 1024))
    try:
        replicator.start()
        with redis_server.client() as client:
            wait_caught_up(cluster, client, replicator)
        writer.start()
        for _ in range(3):
            wait_until(lambda: (checkpoint(cluster) or {}).get("offset", 0) > 0, 30, "progress")
            time.sleep(1.5)
            replicator.kill()
            replicator.start()
        stop.set()
        writer.join(30)
        assert_same(cluster, redis_server, replicator)
        output = replicator.output()
        assert output.count("full sync done") == 1, output[-3000:]
        assert output.count("partial resync") >= 3 or "+CONTINUE" in output, output[-3000:]
    finally:
        stop.set()
        replicator.stop()


@pytest.mark.timeout(300)
def test_kill_during_a_full_sync_then_restart_loads_a_new_generation(
    tmp_path: Path, cluster: LocalCluster, redis_server: RedisServer
) -> None:
    with redis_server.client() as client:
        client.execute("DEBUG", "POPULATE", "60000", "k", "64")
        populate(client)
    replicator = Replicator(redis_server, cluster, tmp_path / "replicator.log")
    try:
        replicator.start()
        wait_until(lambda: (checkpoint(cluster) or {}).get("state") == "loading", 60, "the load")
        replicator.kill()
        # readers never saw half a snapshot: nothing is current yet
        leader = cluster.leader()
        assert http("GET", f"{leader.url}/v1/kv/redis/current").status == 404
        replicator.start()
        assert_same(cluster, redis_server, replicator)
        assert "interrupted load" in replicator.output()
    finally:
        replicator.stop()


@pytest.mark.timeout(300)
def test_diskless_sync_with_an_acl_user(
    tmp_path: Path, cluster: LocalCluster, redis_server: RedisServer
) -> None:
    with redis_server.client() as client:
        client.execute("CONFIG", "SET", "repl-diskless-sync", "yes")
        client.execute("CONFIG", "SET", "repl-diskless-sync-delay", "0")
        client.execute("ACL", "SETUSER", "repl", "on", ">s3cret", "+psync", "+replconf", "+ping")
        populate(client)
    replicator = Replicator(redis_server, cluster, tmp_path / "replicator.log")
    replicator.source = f"redis://repl:s3cret@127.0.0.1:{redis_server.port}"
    try:
        replicator.start()
        with redis_server.client() as client:
            wait_caught_up(cluster, client, replicator)
            random_workload(client, seed=11, count=500)
        assert_same(cluster, redis_server, replicator)
    finally:
        replicator.stop()
    wrong = Replicator(redis_server, cluster, tmp_path / "wrong.log")
    wrong.source = f"redis://repl:nope@127.0.0.1:{redis_server.port}"
    wrong.start()
    assert wrong.wait(60) == 3
    assert "authentication failed" in wrong.output()


@pytest.mark.timeout(300)
def test_a_promoted_replica_continues_and_a_backlog_overrun_resyncs(
    tmp_path: Path, cluster: LocalCluster, redis_server: RedisServer
) -> None:
    with redis_server.client() as client:
        populate(client)
    with run_redis_server(tmp_path / "replica") as replica:
        with replica.client() as client:
            client.execute("REPLICAOF", "127.0.0.1", redis_server.port)
            wait_until(
                lambda: b"master_link_status:up" in client.execute("INFO", "replication"),
                30,
                "the replica's link",
            )
        replicator = Replicator(replica, cluster, tmp_path / "replicator.log")
        try:
            replicator.start()
            with replica.client() as client:
                wait_caught_up(cluster, client, replicator)
            # The line follows the checkpoint's commit: let it be written before the kill.
            wait_until(lambda: "full sync done" in replicator.output(), 30, "the full sync line")
            # promote the replica (REPLICAOF NO ONE): a new replid, the old one kept as
            # replid2, so the replicator's next PSYNC continues instead of resyncing
            replicator.kill()
            with replica.client() as client:
                client.execute("REPLICAOF", "NO", "ONE")
                random_workload(client, seed=3, count=300)
            replicator.start()
            assert_same(cluster, replica, replicator)
            assert replicator.output().count("full sync done") == 1
            # a backlog too small for what was written meanwhile: a full resync
            replicator.kill()
            with replica.client() as client:
                client.execute("CONFIG", "SET", "repl-backlog-size", "16384")
                client.execute("SET", "filler", "f" * 1_000_000)
                random_workload(client, seed=4, count=300)
            replicator.start()
            assert_same(cluster, replica, replicator)
            assert replicator.output().count("full sync done") == 2
        finally:
            replicator.stop()


@pytest.mark.timeout(180)
def test_an_unsupported_command_stops_with_a_clear_error_and_keeps_the_checkpoint(
    tmp_path: Path, cluster: LocalCluster, redis_server: RedisServer
) -> None:
    replicator = Replicator(redis_server, cluster, tmp_path / "replicator.log")
    try:
        replicator.start()
        with redis_server.client() as client:
            wait_caught_up(cluster, client, replicator)
            client.execute("SET", "before", "1")
            client.execute("PFADD", "hll", "a", "b")
            client.execute("SET", "after", "1")
        assert replicator.wait(60) == 1
        output = replicator.output()
        assert "PFADD" in output and "stopped" in output, output[-2000:]
        dumped = {r["key"]: r["value"] for r in rkv_dump(cluster)}
        assert dumped.get("before") == "1" and "after" not in dumped
    finally:
        replicator.stop()


@pytest.mark.timeout(300)
def test_a_master_restarted_from_its_rdb_continues_the_stream(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    """Redis 7 keeps its replication id and offset in the RDB: after SHUTDOWN SAVE and a
    restart it accepts the replicator's PSYNC (+CONTINUE) instead of a full resync."""
    directory = tmp_path / "master"
    with run_redis_server(directory) as first:
        port = first.port
        with first.client() as client:
            populate(client)
        replicator = Replicator(first, cluster, tmp_path / "replicator.log")
        try:
            replicator.start()
            with first.client() as client:
                wait_caught_up(cluster, client, replicator)
                random_workload(client, seed=5, count=200)
                wait_caught_up(cluster, client, replicator)
                client.send("SHUTDOWN", "SAVE")
            wait_until(lambda: port_closed(port), 30, "the master to exit")
            # the replicator keeps reconnecting while the master is down
            restarted = start_on_port(directory, port)
            try:
                server = RedisServer("127.0.0.1", port, directory)
                with server.client() as client:
                    random_workload(client, seed=6, count=200)
                assert_same(cluster, server, replicator)
                output = replicator.output()
                assert output.count("full sync done") == 1, output[-3000:]
                assert "partial resync" in output, output[-3000:]
            finally:
                restarted.terminate()
                restarted.wait(15)
        finally:
            replicator.stop()


@pytest.mark.timeout(300)
def test_a_big_command_gets_a_transaction_of_its_own_or_a_clear_stop(
    tmp_path: Path, cluster: LocalCluster, redis_server: RedisServer
) -> None:
    replicator = Replicator(redis_server, cluster, tmp_path / "replicator.log")
    try:
        replicator.start()
        with redis_server.client() as client:
            wait_caught_up(cluster, client, replicator)
            # thousands of small writes, then one command with 1,001 writes (its elements
            # and its metadata): together more than one transaction of the nodes'
            # --max-txn-ops 1024 holds, so the batch before it commits first
            assert NODE_MAX_TXN_OPS == 1024
            send_all(client, [["SET", f"k{i}", str(i)] for i in range(8000)])
            client.execute("RPUSH", "big", *[str(i) for i in range(1000)])
        assert_same(cluster, redis_server, replicator)
        with redis_server.client() as client:
            client.execute("RPUSH", "huge", *[str(i) for i in range(1100)])
        assert replicator.wait(120) == 1
        output = replicator.output()
        assert "RPUSH needs 1101 writes in one atomic transaction" in output, output[-2000:]
        assert "raise --max-txn-ops on the rkv nodes to at least 1104" in output
    finally:
        replicator.stop()
