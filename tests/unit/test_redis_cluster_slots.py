"""Redis Cluster key slots (CRC16 XMODEM, hash tags), slot ranges, the
``redis-cluster://`` source URL, and a shard's checkpoint fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.cli import redis as redis_cli
from node.keyspace import checkpoint_name_problem
from replication.redis.checkpoint import Checkpoint, shard_checkpoint_name
from replication.redis.cluster.slots import SLOTS, format_slots, key_slot, slot_ranges, slots_of
from replication.redis.cluster.source import ClusterSource
from replication.redis.commands.common import CommandContext
from replication.redis.layout import Layout


@pytest.mark.parametrize(
    ("key", "slot"),
    [  # what redis-server 7.0's CLUSTER KEYSLOT answers
        (b"123456789", 0x31C3),  # the CRC16/XMODEM check value, below 16384
        (b"foo", 12182),
        (b"bar", 5061),
        (b"user1000", 3443),
        (b"", 0),
        # a hash tag: only the bytes between the first { and the next } count
        (b"{user1000}.following", 3443),
        (b"foo{bar}{zap}", 5061),
        (b"foo{{bar}}zap", 4015),  # "{bar"
        (b"{bar", 4015),
        # an empty tag, or a { never closed: the whole key
        (b"foo{}{bar}", 8363),
        (b"{}", 15257),
        (b"foo{bar", 15278),
    ],
)
def test_key_slot_is_what_redis_answers(key: bytes, slot: int) -> None:
    assert key_slot(key) == slot


def test_every_slot_is_in_range() -> None:
    assert all(0 <= key_slot(b"k%d" % i) < SLOTS for i in range(1000))


def test_slot_ranges_round_trip_and_print() -> None:
    slots = {0, 1, 2, 5, 7, 8, 16383}
    assert slot_ranges(slots) == [(0, 2), (5, 5), (7, 8), (16383, 16383)]
    assert slots_of([[0, 2], [5, 5], [7, 8], [16383, 16383]]) == frozenset(slots)
    assert format_slots(slots) == "0-2,5,7-8,16383"
    assert format_slots([]) == "none"


def test_a_cluster_url_lists_seeds_and_the_password_comes_apart(tmp_path: Path) -> None:
    source = ClusterSource.parse("redis-cluster://10.0.0.1:7000,10.0.0.2,[::1]:7002")
    assert [(s.host, s.port) for s in source.seeds] == [
        ("10.0.0.1", 7000),
        ("10.0.0.2", 6379),
        ("::1", 7002),
    ]
    assert source.password is None
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)
    given = redis_cli.cluster_source("redis-cluster://h1:1,h2:2", str(secret), {})
    assert {s.password for s in given.seeds} == {"s3cret"}
    env = redis_cli.cluster_source("redis-cluster://repl@h1:1", None, {redis_cli.PASSWORD_ENV: "e"})
    assert (env.seeds[0].username, env.seeds[0].password) == ("repl", "e")
    node = env.node("10.1.1.1", 7005)
    assert (node.host, node.port, node.username, node.password) == ("10.1.1.1", 7005, "repl", "e")
    in_url = ClusterSource.parse("redis-cluster://u:p%40ss@h1:1,h2:2")
    assert in_url.password == "p@ss"
    assert "p@ss" not in str(in_url) and "***" in str(in_url)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://h:1", "expected redis-cluster://"),
        ("redis-cluster://", "empty host"),
        ("redis-cluster://h1:1,,h2:2", "empty host"),
        ("redis-cluster://h1:1/0", "db 0"),
        ("redis-cluster://h1:99999", "h1:99999.*out of range"),
        ("redis-cluster://user@h1:1", "needs a password"),
    ],
)
def test_a_bad_cluster_url_is_refused_naming_the_problem(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        ClusterSource.parse(url)


def test_a_password_in_the_url_and_apart_is_refused() -> None:
    with pytest.raises(ValueError, match="give it once"):
        ClusterSource.parse("redis-cluster://:p@h1:1", "other")


def test_a_shard_checkpoint_name_is_valid_for_the_longest_prefix() -> None:
    name = shard_checkpoint_name(b"p" * 150, "a" * 40)
    assert checkpoint_name_problem(name) is None


def test_a_single_masters_checkpoint_encodes_as_before_and_a_shards_round_trips() -> None:
    single = Checkpoint("a" * 40, 10, 0, 1, "streaming")
    assert set(Checkpoint.decode(single.encode()).__dict__) == set(single.__dict__)
    assert b"slots" not in single.encode() and b"epoch" not in single.encode()
    shard = Checkpoint("a" * 40, 10, 0, 1, "resync", slots=[[0, 5460]], nodes=["n1"], epoch=3)
    assert Checkpoint.decode(shard.encode()) == shard


def test_object_ids_carry_the_shards_prefix_only_in_cluster_mode() -> None:
    single = CommandContext(layout=Layout(b"redis/", 1), offset=4711)
    assert (single.new_object(), single.new_namespace()) == ("c4711.0", "f4711.1")
    shard = CommandContext(layout=Layout(b"redis/", 1), offset=4711, id_prefix="83a632e652af.2.")
    assert shard.new_object() == "83a632e652af.2.c4711.0"
