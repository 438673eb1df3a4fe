"""`rkv redis-replicate --source redis-cluster://...` end to end: a real Redis Cluster
(3 masters, one replica each: tests/redis/cluster_support.py), a real 3-node rkv
cluster, the replicator as a child process; rkv's `redis-dump` compared with the
keys read from every master."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from replication.redis.cluster.slots import SLOTS, key_slot, slots_of
from tests.redis.cluster_support import (
    ClusterWriter,
    RedisCluster,
    assert_cluster_same,
    kill,
    run_redis_cluster,
    shard_checkpoints,
    wait_cluster_caught_up,
    workload,
)
from tests.redis.conftest import RedisServer
from tests.redis.replica_support import Replicator, replicate_status, rkv_dump
from tests.support.cluster import LocalCluster, free_ports, http, wait_until


@pytest.fixture
def redis_cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    with run_redis_cluster(tmp_path / "redis") as running:
        yield running


def _source(cluster: RedisCluster) -> str:
    return "redis-cluster://" + ",".join(f"127.0.0.1:{s.port}" for s in cluster.servers[:2])


@pytest.mark.timeout(600)
def test_three_masters_replicate_into_one_layout_and_follow_failovers(
    tmp_path: Path, cluster: LocalCluster, redis_cluster: RedisCluster
) -> None:
    writer = ClusterWriter(redis_cluster)
    writer.run(workload(seed=1, count=3000))  # loaded by each shard's full sync
    replicator = Replicator(redis_cluster.servers[0], cluster, tmp_path / "replicator.log")
    try:
        replicator.start(_source(redis_cluster))
        writer.run(workload(seed=2, count=3000))  # streamed
        assert_cluster_same(cluster, redis_cluster, replicator)

        # one checkpoint per shard, named after it, together covering every slot
        checkpoints = shard_checkpoints(cluster)
        assert len(checkpoints) == 3
        covered = [slots_of(c["slots"]) for c in checkpoints.values()]
        assert sum(len(s) for s in covered) == SLOTS
        assert frozenset().union(*covered) == frozenset(range(SLOTS))
        shards = redis_cluster.shards()
        assert set(checkpoints) == {s["master_id"] for s in shards}
        # every key is in db 0's namespace of the one generation; ids carry the shard's tag
        leader = cluster.leader()
        generation = json.loads(http("GET", f"{leader.url}/v1/kv/redis/current").body)["generation"]
        for key in (b"{tag3}:list", b"{tag17}:list"):
            raw = http("GET", f"{leader.url}/v1/kv/redis/g{generation}/d0/k/{key.decode()}").body
            tag = next(s["master_id"] for s in shards if key_slot(key) in s["slots"])[:12]
            assert json.loads(raw.split(b"\n")[0])["o"].startswith(f"{tag}.1.")
        assert "[shard " in replicator.output()
        status = replicate_status(cluster)  # one checkpoint per shard, labelled
        assert status.count("shard:       ") == 3 and status.count("streaming") == 3, status

        # a failover on request: the replica takes over; the shard's link follows it
        first = shards[0]
        redis_cluster.ask(first["replicas"][0], "CLUSTER", "FAILOVER")
        wait_until(
            lambda: first["replicas"][0] in redis_cluster.masters(),
            60,
            "the failover",
        )
        writer.run(workload(seed=3, count=2000))
        assert_cluster_same(cluster, redis_cluster, replicator)
        after = shard_checkpoints(cluster)
        assert set(after) == set(checkpoints)  # the shard kept its id and checkpoint
        assert after[first["master_id"]]["epoch"] == 1  # no full sync: PSYNC continued
        assert f"now 127.0.0.1:{first['replicas'][0]}" in replicator.output()

        # a master killed: its replica is promoted once the cluster sees it fail
        # (CLUSTER SHARDS lists shards in no fixed order: pick another one by its slots)
        second = next(s for s in redis_cluster.shards() if not s["slots"] & first["slots"])
        kill(redis_cluster, second["master"])
        wait_until(lambda: second["replicas"][0] in redis_cluster.masters(), 60, "the promotion")
        writer.run(workload(seed=4, count=2000))
        assert_cluster_same(cluster, redis_cluster, replicator)
        assert set(shard_checkpoints(cluster)) == set(checkpoints)
    finally:
        writer.close()
        replicator.stop()


@pytest.mark.timeout(600)
def test_a_migrated_slot_stops_the_shards_naming_it_and_a_restart_reloads_them(
    tmp_path: Path, cluster: LocalCluster, redis_cluster: RedisCluster
) -> None:
    writer = ClusterWriter(redis_cluster)
    writer.run(workload(seed=5, count=3000))
    replicator = Replicator(redis_cluster.servers[0], cluster, tmp_path / "replicator.log")
    try:
        replicator.start(_source(redis_cluster))
        assert_cluster_same(cluster, redis_cluster, replicator)
        epochs = {k: c["epoch"] for k, c in shard_checkpoints(cluster).items()}

        # move the slot of {tag3} (a list) and its neighbours' keys from A to B
        shards = redis_cluster.shards()
        slot = key_slot(b"{tag3}:list")
        source = next(s for s in shards if slot in s["slots"])
        target = next(s for s in shards if s is not source)
        untouched = next(s for s in shards if s is not source and s is not target)
        src, dst = source["master"], target["master"]
        redis_cluster.ask(
            dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", target_id := target["master_id"]
        )
        redis_cluster.ask(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        keys = redis_cluster.ask(src, "CLUSTER", "GETKEYSINSLOT", slot, 1000)
        assert keys
        redis_cluster.ask(src, "MIGRATE", "127.0.0.1", dst, "", 0, 5000, "KEYS", *keys)

        # the new owner's stream holds RESTORE-ASKING: stopped, naming the slot
        assert replicator.wait(120) == 1
        output = replicator.output()
        assert f"slots {slot} are migrating (the master received RESTORE-ASKING" in output
        assert "restart rkv redis-replicate" in output
        marked = shard_checkpoints(cluster)
        assert marked[target["master_id"]]["state"] == "resync"
        assert marked[source["master_id"]]["state"] == "resync"  # it owns the slot still
        before = rkv_dump(cluster)

        # a restart while the slot is still migrating stops again, before loading anything
        replicator.start(_source(redis_cluster))
        assert replicator.wait(120) == 1
        again = replicator.output()[len(output) :]
        assert f"slots {slot} are migrating (its master has them MIGRATING or IMPORTING)" in again
        assert "FULLRESYNC" not in again and "cleared" not in again
        assert rkv_dump(cluster) == before  # nothing cleared

        for port in redis_cluster.masters():
            redis_cluster.ask(port, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
        redis_cluster.wait_ok()
        writer.refresh()

        writer.run(workload(seed=6, count=1000))
        replicator.start(_source(redis_cluster))
        assert_cluster_same(cluster, redis_cluster, replicator)
        now = shard_checkpoints(cluster)
        # the two shards whose slots changed reloaded them; the third one continued
        assert now[source["master_id"]]["epoch"] == epochs[source["master_id"]] + 1
        assert now[target["master_id"]]["epoch"] == epochs[target["master_id"]] + 1
        assert now[untouched["master_id"]]["epoch"] == epochs[untouched["master_id"]]
        assert slot in slots_of(now[target["master_id"]]["slots"])
        assert slot not in slots_of(now[source["master_id"]]["slots"])
    finally:
        writer.close()
        replicator.stop()
        time.sleep(0)


def _empty_slot(cluster: RedisCluster, owner: dict[str, object]) -> int:
    """A slot of ``owner`` holding no key."""
    for slot in sorted(owner["slots"]):  # type: ignore[call-overload]
        if cluster.ask(owner["master"], "CLUSTER", "COUNTKEYSINSLOT", slot) == 0:  # type: ignore[arg-type]
            return int(slot)
    raise AssertionError("no empty slot")


def _give(cluster: RedisCluster, slot: int, target_id: str) -> None:
    for port in cluster.masters():
        cluster.ask(port, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
    cluster.wait_ok()


def _key_in(slot: int) -> str:
    return next(f"k{i}" for i in range(1_000_000) if key_slot(f"k{i}".encode()) == slot)


@pytest.mark.timeout(600)
def test_a_slot_changing_owner_is_seen_running_or_stopped_and_its_shards_reload(
    tmp_path: Path, cluster: LocalCluster, redis_cluster: RedisCluster
) -> None:
    writer = ClusterWriter(redis_cluster)
    writer.run(workload(seed=8, count=2000))
    replicator = Replicator(redis_cluster.servers[0], cluster, tmp_path / "replicator.log")
    try:
        replicator.start(_source(redis_cluster))
        assert_cluster_same(cluster, redis_cluster, replicator)
        shards = redis_cluster.shards()
        source, target, third = shards[0], shards[1], shards[2]

        # while running: an empty slot given to another master (no RESTORE in any stream)
        slot = _empty_slot(redis_cluster, source)
        _give(redis_cluster, slot, target["master_id"])
        assert replicator.wait(120) == 1
        output = replicator.output()
        assert f"slots {slot} changed owner in the cluster" in output, output[-3000:]
        writer.refresh()
        writer.execute("SET", _key_in(slot), "after the move")

        # the two shards concerned will reload their slots
        marked = shard_checkpoints(cluster)
        assert marked[source["master_id"]]["state"] == "resync"
        assert marked[target["master_id"]]["state"] == "resync"
        assert marked[third["master_id"]]["state"] == "streaming"

        # while stopped: a slot of the third shard moves; the start sees it in the checkpoints
        back = _empty_slot(redis_cluster, third)
        _give(redis_cluster, back, source["master_id"])
        writer.refresh()
        writer.execute("SET", _key_in(back), "moved while stopped")
        replicator.start(_source(redis_cluster))
        assert_cluster_same(cluster, redis_cluster, replicator)
        assert f"slots {back} moved since the last run" in replicator.output()
        checkpoints = shard_checkpoints(cluster)
        assert slot in slots_of(checkpoints[target["master_id"]]["slots"])
        assert back in slots_of(checkpoints[source["master_id"]]["slots"])
        assert back not in slots_of(checkpoints[third["master_id"]]["slots"])
    finally:
        writer.close()
        replicator.stop()


@pytest.mark.timeout(300)
def test_the_nodes_password_comes_from_the_environment(
    tmp_path: Path, cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    with run_redis_cluster(tmp_path / "redis", replicas=0, password="s3cret pw") as secured:
        writer = ClusterWriter(secured)
        writer.run(workload(seed=9, count=1500))
        replicator = Replicator(secured.servers[0], cluster, tmp_path / "replicator.log")
        try:
            replicator.start(_source(secured))  # no password anywhere: refused, exit 3
            assert replicator.wait(60) == 3
            assert "authentication failed: NOAUTH" in replicator.output()
            assert shard_checkpoints(cluster) == {}
            monkeypatch.setenv("RKV_REDIS_PASSWORD", "s3cret pw")
            replicator.start(_source(secured))
            writer.run(workload(seed=10, count=1500))
            assert_cluster_same(cluster, secured, replicator)
            assert "s3cret" not in replicator.output()
        finally:
            writer.close()
            replicator.stop()


@pytest.mark.timeout(120)
def test_a_seed_without_cluster_support_is_refused_at_once(
    cluster: LocalCluster, redis_server: RedisServer
) -> None:
    # the replicator takes the prefix's lock in rkv first, then looks at the source
    urls = ",".join(n.url for n in cluster.nodes)
    done = subprocess.run(
        [sys.executable, "-m", "node.cli", "redis-replicate", "--url", urls,
         "--source", f"redis-cluster://127.0.0.1:{redis_server.port}"],
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 3
    assert b"cluster support disabled" in done.stderr
    assert b"Traceback" not in done.stderr


@pytest.mark.timeout(300)
def test_flushall_stops_every_shard_and_a_restart_empties_rkv_too(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    with run_redis_cluster(tmp_path / "redis", replicas=0) as redis_cluster:
        writer = ClusterWriter(redis_cluster)
        writer.run(workload(seed=11, count=1500))
        port = free_ports(1)[0]
        replicator = Replicator(
            redis_cluster.servers[0],
            cluster,
            tmp_path / "replicator.log",
            "--metrics-listen",
            f"127.0.0.1:{port}",
        )
        try:
            replicator.start(_source(redis_cluster))
            assert_cluster_same(cluster, redis_cluster, replicator)
            # one registry, a shard label per master
            metrics = http("GET", f"http://127.0.0.1:{port}/metrics").body.decode()
            tags = {s["master_id"][:12] for s in redis_cluster.shards()}
            for tag in tags:
                assert f'rkv_redis_master_link_up{{shard="{tag}"}} 1.0' in metrics

            for master in redis_cluster.masters():
                redis_cluster.ask(master, "FLUSHALL")
            assert replicator.wait(120) == 1
            output = replicator.output()
            assert "were flushed (FLUSHALL" in output
            assert "resync" in {c["state"] for c in shard_checkpoints(cluster).values()}
            assert rkv_dump(cluster)  # nothing applied from the flushes

            writer.run([["SET", "after", "the flush"]])
            # a shard stopped (with the others) before it read its FLUSHALL stops at it
            # when restarted; at most once more per shard
            for _attempt in range(3):
                seen = len(replicator.output())
                replicator.start(_source(redis_cluster))
                try:
                    wait_cluster_caught_up(cluster, redis_cluster, replicator)
                    break
                except AssertionError:
                    assert replicator.wait(30) == 1
                    assert "were flushed (FLUSHALL" in replicator.output()[seen:]
            else:
                raise AssertionError(replicator.output()[-3000:])
            dumped = rkv_dump(cluster)
            assert [(r["key"], r["value"]) for r in dumped] == [("after", "the flush")]
        finally:
            writer.close()
            replicator.stop()


@pytest.mark.timeout(600)
def test_a_shard_load_killed_half_way_is_redone_and_its_objects_dropped(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    with run_redis_cluster(tmp_path / "redis", replicas=0) as redis_cluster:
        writer = ClusterWriter(redis_cluster)
        # enough containers that a shard's load takes a while (and writes many objects)
        writer.pipeline([["HSET", f"big:{i}", "a", str(i), "b", "x"] for i in range(60_000)])
        replicator = Replicator(redis_cluster.servers[0], cluster, tmp_path / "replicator.log")
        try:
            replicator.start(_source(redis_cluster))
            wait_until(
                lambda: "loading" in {c["state"] for c in shard_checkpoints(cluster).values()},
                120,
                "a shard loading",
            )
            replicator.kill()
            interrupted = {
                shard: c
                for shard, c in shard_checkpoints(cluster).items()
                if c["state"] == "loading"
            }
            assert interrupted
            writer.pipeline([["HSET", f"big:{i}", "c", "after"] for i in range(0, 60_000, 7)])
            replicator.start(_source(redis_cluster))
            assert_cluster_same(cluster, redis_cluster, replicator)
            leader = cluster.leader()
            generation = json.loads(http("GET", f"{leader.url}/v1/kv/redis/current").body)[
                "generation"
            ]
            now = shard_checkpoints(cluster)
            for shard, checkpoint in interrupted.items():
                assert now[shard]["epoch"] == checkpoint["epoch"] + 1
                # the interrupted load's objects are gone (the new load's ids differ)
                old = f"redis/g{generation}/o/{shard[:12]}.{checkpoint['epoch']}."
                page = http("GET", f"{leader.url}/v1/kv?prefix={old}&limit=1").json()
                assert page["items"] == [], page
                new = f"redis/g{generation}/o/{shard[:12]}.{checkpoint['epoch'] + 1}."
                assert http("GET", f"{leader.url}/v1/kv?prefix={new}&limit=1").json()["items"]
        finally:
            writer.close()
            replicator.stop()
