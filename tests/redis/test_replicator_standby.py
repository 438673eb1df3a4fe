"""Two `rkv redis-replicate` on one prefix: one replicates, the other stands by on
the prefix's lock and takes over (docs/REDIS.md, "High availability"). Real
processes: a redis-server, a 3-node rkv cluster, the replicators as children."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from http_api.client import Fencing, RkvClient
from http_api.client.errors import Fenced
from replication.redis.batch import RkvStore
from replication.redis.checkpoint import checkpoint_name
from replication.redis.standby import lock_name
from tests.redis.conftest import RedisServer
from tests.redis.replica_support import (
    Replicator,
    assert_same,
    checkpoint,
    replicate_status,
    wait_caught_up,
)
from tests.redis.resp_client import RespClient
from tests.redis.workload import populate, send_all
from tests.support.cluster import LocalCluster, wait_until

LOCK_TTL = "3"
TOOK = "took redis-replicate:redis"


class Writer:
    """Non-idempotent writes to the master until stopped: a command applied twice
    or lost shows in the final comparison."""

    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.server.client() as client:
            i = 0
            while not self.stop.is_set():
                send_all(
                    client,
                    [
                        ["INCR", "counter"],
                        ["APPEND", f"log:{i % 20}", f"{i},"],
                        ["RPUSH", "list", str(i)],
                        ["HINCRBY", "h", f"f{i % 7}", "1"],
                    ],
                )
                i += 1
                time.sleep(0.005)

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


def _pair(tmp_path: Path, cluster: LocalCluster, server: RedisServer) -> list[Replicator]:
    with server.client() as client:
        populate(client)
        # room for what is written while nobody replicates: +CONTINUE, not a resync
        client.execute("CONFIG", "SET", "repl-backlog-size", str(256 * 1024 * 1024))
    return [
        Replicator(server, cluster, tmp_path / f"replicator-{n}.log", "--lock-ttl", LOCK_TTL)
        for n in (1, 2)
    ]


def _active(pair: list[Replicator], took: dict[int, int]) -> Replicator | None:
    """The replicator that took the lock since ``took`` (the counts seen before)."""
    for n, replicator in enumerate(pair):
        if _output(replicator).count(TOOK) > took.get(n, 0):
            return replicator
    return None


def _took_counts(pair: list[Replicator]) -> dict[int, int]:
    return {n: _output(replicator).count(TOOK) for n, replicator in enumerate(pair)}


def _signal(replicator: Replicator, sig: int) -> None:
    assert replicator.process is not None
    os.kill(replicator.process.pid, sig)


def _output(replicator: Replicator) -> str:
    return replicator.output() if replicator.log.exists() else ""


def _start_active_then_standby(
    cluster: LocalCluster, server: RedisServer, pair: list[Replicator]
) -> None:
    """The first takes the lock and catches up; the second stands by."""
    pair[0].start()
    wait_until(lambda: _active(pair, {}) is not None, 60, "a replicator taking the lock")
    pair[1].start()
    assert _active(pair, {}) is pair[0]
    with server.client() as client:
        wait_caught_up(cluster, client, pair[0])
    wait_until(lambda: "standing by" in _output(pair[1]), 60, "the second standing by")


def _outputs(pair: list[Replicator]) -> str:
    return "\n".join(f"--- {r.log.name}\n{r.output()[-3000:]}" for r in pair)


@pytest.mark.timeout(300)
def test_kill_minus_nine_of_the_active_one_the_standby_continues_without_a_resync(
    tmp_path: Path, cluster: LocalCluster, redis_server: RedisServer
) -> None:
    pair = _pair(tmp_path, cluster, redis_server)
    try:
        _start_active_then_standby(cluster, redis_server, pair)
        first = pair[0]
        status = replicate_status(cluster)
        assert f"pid {first.process.pid if first.process else -1}" in status, status
        assert "since:" in status and "streaming" in status, status

        with Writer(redis_server):
            time.sleep(1.0)
            before = _took_counts(pair)
            first.kill()
            wait_until(lambda: _active(pair, before) is pair[1], 60, "the standby taking over")
            time.sleep(1.0)
        second = pair[1]
        assert_same(cluster, redis_server, second)
        outputs = _outputs(pair)
        assert pair[0].output().count("full sync done") == 1, outputs
        assert "full resync" not in second.output(), outputs
        assert "partial resync (+CONTINUE)" in second.output(), outputs
        status = replicate_status(cluster)
        assert f"pid {second.process.pid if second.process else -1}" in status, status
    finally:
        for replicator in pair:
            replicator.stop()


@pytest.mark.timeout(300)
def test_a_paused_active_one_is_fenced_when_it_resumes_and_stands_by(
    tmp_path: Path, cluster: LocalCluster, redis_server: RedisServer
) -> None:
    pair = _pair(tmp_path, cluster, redis_server)
    try:
        _start_active_then_standby(cluster, redis_server, pair)
        first, second = pair
        with Writer(redis_server):
            time.sleep(1.0)
            before = _took_counts(pair)
            _signal(first, signal.SIGSTOP)
            wait_until(lambda: _active(pair, before) is second, 60, "the standby taking over")
            time.sleep(2.0)  # the new one commits; the paused one still holds its batch
            _signal(first, signal.SIGCONT)
            wait_until(
                lambda: "fenced" in first.output() or "is lost" in first.output(),
                60,
                "the resumed one stepping down",
            )
            wait_until(lambda: first.output().count("standing by") >= 1, 60, "it stands by again")
            time.sleep(1.0)
        assert_same(cluster, redis_server, second)
        assert first.process is not None and first.process.poll() is None, _outputs(pair)
        # And it takes over again when the other one stops (SIGTERM resigns: no TTL wait).
        before = _took_counts(pair)
        second.stop()
        wait_until(lambda: _active(pair, before) is first, 60, "the first taking over again")
        with RespClient(redis_server.host, redis_server.port) as client:
            send_all(client, [["SET", "after", "takeover"]])
        assert_same(cluster, redis_server, first)
    finally:
        for replicator in pair:
            replicator.stop()


@pytest.mark.timeout(120)
def test_a_commit_with_a_former_holders_token_is_refused_and_changes_nothing(
    cluster: LocalCluster,
) -> None:
    """The store refuses a former holder's commit: the fencing is rkv's, not the
    replicator's good will."""
    urls = [n.url for n in cluster.nodes]
    name = lock_name(b"redis/")
    with RkvClient(urls) as first_client, RkvClient(urls) as second_client:
        first = first_client.election(name, ttl=2)
        old = first.campaign('{"host": "a"}')
        store = RkvStore(first_client, checkpoint_name(b"redis/"), fencing=old.fencing)
        store.write({b"redis/probe": b"1"})
        assert first.lease is not None
        first.lease.stop()  # as if paused: no more keepalives, the lease ends in 2 s
        second = second_client.election(name, ttl=10)
        new = second.campaign('{"host": "b"}')
        assert new.token > old.token
        with pytest.raises(Fenced):
            store.write({b"redis/probe": b"2"})
        assert first_client.get(b"redis/probe").value == b"1"
        stale = RkvStore(
            second_client, checkpoint_name(b"redis/"), fencing=Fencing(name, old.token)
        )
        with pytest.raises(Fenced):
            stale.write({b"redis/probe": b"3"})
        assert checkpoint(cluster) is None
        second.resign()
