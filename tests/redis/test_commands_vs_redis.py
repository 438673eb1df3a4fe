"""apply_command against a real redis-server 7.0: the same data, key by key.

A seeded random workload of the supported commands (and some that fail:
wrong types, bad ids) runs against a real master. A replica link
(replication/redis/link/master_link.py) reads what the master really propagates (SET
EX as SET PXAT, SPOP as SREM, INCRBYFLOAT as SET KEEPTTL, scripts as MULTI/EXEC
blocks, XADD * with its id and ``~`` trimming rewritten to ``=``...), and
apply_command applies it to a MemoryView; a second test applies the commands
exactly as sent instead, checking the original forms (SET EX, EXPIRE,
INCRBYFLOAT...) that a Redis 7 master never propagates. Every few dozen
commands every key of every db is compared: type, value (GET, HGETALL,
SMEMBERS, LRANGE, ZRANGE WITHSCORES, XRANGE), PTTL within 2 s, and a stream's
metadata with XINFO STREAM.
TTLs are long, so that nothing expires while the test runs.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from replication.redis.commands.common import load_dbs, namespace_of
from replication.redis.commands.dispatch import CommandContext, apply_command
from replication.redis.layout import Layout, Meta
from replication.redis.link.master_link import MasterAddress, MasterLink
from replication.redis.objects import read_meta_value
from replication.redis.view import MemoryView
from tests.redis.conftest import RedisServer, run_redis_server
from tests.redis.resp_client import Arg, RespClient, RespError

LAYOUT = Layout(b"redis/", 1)
DBS = 4
STEPS = 2500
COMPARE_EVERY = 50

STRINGS = ["s0", "s1", "n0", "n1"]
HASHES = ["h0", "h1"]
SETS = ["S0", "S1", "S2"]
LISTS = ["l0", "l1", "l2"]
ZSETS = ["z0", "z1", "z2"]
STREAMS = ["x0", "x1"]
ALL = STRINGS + HASHES + SETS + LISTS + ZSETS + STREAMS + ["any"]
STREAM_INFO = (
    "length",
    "last-generated-id",
    "entries-added",
    "max-deleted-entry-id",
    "recorded-first-entry-id",
)
SCRIPT = "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('LPUSH', KEYS[2], ARGV[1])"


class Workload:
    """Random commands; mostly well-typed, some meant to fail on the master.
    ``direct``: only commands whose outcome does not depend on the master's
    clock or random choices (no ``*`` ids, no ``~`` trimming, no SPOP, no EVAL),
    so that they can be applied as sent."""

    def __init__(self, seed: int, direct: bool = False) -> None:
        self.direct = direct
        self.rng = random.Random(seed)
        self.stream_ms = 1000
        self.stream_ids: list[str] = []
        self.generators: list[tuple[int, Callable[[], list[Arg]]]] = [
            (10, self.strings),
            (3, self.counters),
            (6, self.keyspace),
            (6, self.hashes),
            (6, self.sets),
            (10, self.lists),
            (8, self.zsets),
            (6, self.streams),
            (1, self.rare),
        ]

    def pick(self, options: list[list[Arg]]) -> list[Arg]:
        return self.rng.choice(options)

    def key(self, pool: list[str]) -> str:
        return self.rng.choice(ALL if self.rng.random() < 0.05 else pool)

    def member(self, letters: str = "abcdefg") -> str:
        return self.rng.choice(letters)

    def ttl(self) -> list[Arg]:
        r = self.rng
        return self.pick(
            [
                ["EX", r.randint(100, 1000)],
                ["PX", r.randint(100_000, 900_000)],
                ["EXAT", int(time.time()) + r.randint(100, 1000)],
                ["PXAT", int(time.time() * 1000) + r.randint(100_000, 900_000)],
                ["KEEPTTL"],
                [],
            ]
        )

    def next(self) -> list[list[Arg]]:
        """One command, or a MULTI block."""
        if self.rng.random() < 0.03:
            return [["MULTI"], *(self.one() for _ in range(self.rng.randint(1, 4))), ["EXEC"]]
        return [self.one()]

    def one(self) -> list[Arg]:
        weights = [w for w, _ in self.generators]
        _, generate = self.rng.choices(self.generators, weights)[0]
        return generate()

    def strings(self) -> list[Arg]:
        r, k = self.rng, self.key(STRINGS)
        v = r.choice(["v", "value", "", "\x00\xff", str(r.randint(-5, 5))])
        return self.pick(
            [
                ["SET", k, v, *self.ttl(), *self.pick([[], ["NX"], ["XX"], ["GET"]])],
                ["SETEX", k, r.randint(100, 900), v],
                ["PSETEX", k, r.randint(100_000, 900_000), v],
                ["SETNX", k, v],
                ["MSET", k, v, self.key(STRINGS), "m"],
                ["MSETNX", k, v, self.key(STRINGS), "m"],
                ["GETSET", k, v],
                ["GETDEL", k],
                ["GETEX", k, *self.pick([["EX", 500], ["PERSIST"], ["PXAT", 9_999_999_999_999]])],
                ["APPEND", k, v],
                ["SETRANGE", k, r.randint(0, 6), r.choice(["xy", ""])],
                ["SETBIT", k, r.randint(0, 20), r.randint(0, 1)],
            ]
        )

    def counters(self) -> list[Arg]:
        r, k = self.rng, self.key(["n0", "n1", "s0"])
        return self.pick(
            [
                ["INCR", k],
                ["DECR", k],
                ["INCRBY", k, r.randint(-100, 100)],
                ["DECRBY", k, r.randint(-100, 100)],
                ["INCRBYFLOAT", k, r.choice(["0.1", "-1.5", "1e3", "3.0e-5", str(r.random())])],
            ]
        )

    def keyspace(self) -> list[Arg]:
        r, k, other = self.rng, self.key(ALL), self.key(ALL)
        flags = r.choice([[], [], ["NX"], ["XX"], ["GT"], ["LT"]])
        return self.pick(
            [
                ["DEL", k, other],
                ["UNLINK", k],
                ["EXPIRE", k, r.randint(100, 1000), *flags],
                ["PEXPIRE", k, r.randint(100_000, 900_000), *flags],
                ["EXPIREAT", k, int(time.time()) + r.randint(100, 1000), *flags],
                ["PEXPIREAT", k, int(time.time() * 1000) + r.randint(100_000, 900_000)],
                ["EXPIRE", k, -1],
                ["PERSIST", k],
                ["RENAME", k, other],
                ["RENAMENX", k, other],
                ["COPY", k, other, *self.pick([[], ["REPLACE"], ["DB", r.randrange(DBS)]])],
                ["MOVE", k, r.randrange(DBS)],
                ["SELECT", r.randrange(DBS)],
                ["SWAPDB", r.randrange(DBS), r.randrange(DBS)],
            ]
        )

    def hashes(self) -> list[Arg]:
        r, k, f = self.rng, self.key(HASHES), self.member()
        return self.pick(
            [
                ["HSET", k, f, r.choice(["1", "x", "2.5"]), self.member(), "v"],
                ["HMSET", k, f, "v"],
                ["HSETNX", k, f, "nx"],
                ["HDEL", k, f, self.member()],
                ["HINCRBY", k, f, r.randint(-9, 9)],
                ["HINCRBYFLOAT", k, f, r.choice(["0.1", "-2", "1.5e2"])],
            ]
        )

    def sets(self) -> list[Arg]:
        r, k = self.rng, self.key(SETS)
        spops: list[list[Arg]] = [] if self.direct else [["SPOP", k], ["SPOP", k, r.randint(0, 4)]]
        return self.pick(
            [
                ["SADD", k, self.member(), self.member(), self.member()],
                ["SREM", k, self.member(), self.member()],
                ["SMOVE", k, self.key(SETS), self.member()],
                *spops,
                [r.choice(["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"]), k, *r.sample(SETS, 2)],
            ]
        )

    def lists(self) -> list[Arg]:
        r, k, other = self.rng, self.key(LISTS), self.key(LISTS)
        side, side2 = r.choice(["LEFT", "RIGHT"]), r.choice(["LEFT", "RIGHT"])
        return self.pick(
            [
                [r.choice(["LPUSH", "RPUSH"]), k, *(self.member("abcd") for _ in range(3))],
                [r.choice(["LPUSH", "RPUSH"]), k, *(self.member("abcd") for _ in range(4))],
                ["RPUSH", k, *(self.member("abcd") for _ in range(5))],
                [r.choice(["LPUSHX", "RPUSHX"]), k, self.member()],
                [r.choice(["LPOP", "RPOP"]), k, *self.pick([[], [r.randint(0, 3)]])],
                ["LSET", k, r.randint(-4, 3), "set"],
                ["LTRIM", k, r.randint(-5, 3), r.randint(-5, 5)],
                ["LMOVE", k, other, side, side2],
                ["BLMOVE", k, other, side, side2, "0.01"],
                ["RPOPLPUSH", k, other],
                ["BRPOPLPUSH", k, other, "0.01"],
                [r.choice(["BLPOP", "BRPOP"]), k, other, "0.01"],
                ["LMPOP", 2, k, other, side, "COUNT", r.randint(1, 3)],
                ["LREM", k, r.randint(-2, 2), self.member("abc")],
                ["LREM", k, r.randint(-2, 2), self.member("abc")],
                ["LINSERT", k, r.choice(["BEFORE", "AFTER"]), self.member("abc"), "b"],
                ["LINSERT", k, r.choice(["BEFORE", "AFTER"]), self.member("abc"), "ins"],
            ]
        )

    def score(self) -> str:
        return self.rng.choice(["1", "2", "2.5", "-1", "0", "inf", "-inf", "0.1", "1e-3"])

    def zsets(self) -> list[Arg]:
        r, k = self.rng, self.key(ZSETS)
        flags = r.sample(["NX", "XX", "GT", "LT", "CH"], r.randint(0, 2))
        sources = r.sample(ZSETS + SETS[:1], 2)
        return self.pick(
            [
                ["ZADD", k, *flags, self.score(), self.member(), self.score(), self.member()],
                ["ZADD", k, *flags, "INCR", self.score(), self.member()],
                ["ZINCRBY", k, self.score(), self.member()],
                ["ZREM", k, self.member(), self.member()],
                ["ZREMRANGEBYSCORE", k, r.choice(["-inf", "(1", "0"]), r.choice(["2", "(2.5"])],
                ["ZREMRANGEBYRANK", k, r.randint(-3, 1), r.randint(-2, 2)],
                ["ZREMRANGEBYLEX", k, r.choice(["-", "[b", "(c"]), r.choice(["+", "[e", "(d"])],
                [r.choice(["ZPOPMIN", "ZPOPMAX"]), k, *self.pick([[], [r.randint(0, 3)]])],
                [r.choice(["BZPOPMIN", "BZPOPMAX"]), k, "0.01"],
                ["ZMPOP", 2, k, self.key(ZSETS), r.choice(["MIN", "MAX"]), "COUNT", 2],
                [
                    r.choice(["ZUNIONSTORE", "ZINTERSTORE"]),
                    k,
                    2,
                    *sources,
                    *self.pick([[], ["WEIGHTS", r.choice(["2", "0", "-1"]), "0.5"]]),
                    *self.pick([[], ["AGGREGATE", r.choice(["SUM", "MIN", "MAX"])]]),
                ],
                ["ZDIFFSTORE", k, 2, *sources],
                self.zrangestore(k),
            ]
        )

    def zrangestore(self, k: str) -> list[Arg]:
        r, src = self.rng, self.key(ZSETS)
        kind = r.choice(["rank", "score", "lex"])
        rev: list[Arg] = ["REV"] if r.random() < 0.5 else []
        if kind == "rank":
            return ["ZRANGESTORE", k, src, r.randint(-3, 2), r.randint(-2, 3), *rev]
        limit: list[Arg] = ["LIMIT", r.randint(0, 2), r.randint(-1, 3)] if r.random() < 0.5 else []
        if kind == "score":
            bounds: list[Arg] = ["(0", "+inf"] if not rev else ["+inf", "(0"]
            return ["ZRANGESTORE", k, src, *bounds, "BYSCORE", *rev, *limit]
        lex: list[Arg] = ["[b", "+"] if not rev else ["+", "[b"]
        return ["ZRANGESTORE", k, src, *lex, "BYLEX", *rev, *limit]

    def streams(self) -> list[Arg]:
        """x0 gets ids from the master's clock (``*``, rewritten when
        propagated); x1 gets explicit ids this workload remembers, so XDEL and
        MINID hit real entries."""
        r, k = self.rng, self.key(STREAMS)
        if self.direct or k == "x1" or (k not in STREAMS and r.random() < 0.5):
            return self.explicit_stream(k)
        trim = self.pick(
            [
                [],
                [],
                ["MAXLEN", r.choice(["~", "="]), r.randint(0, 6)],
                ["MAXLEN", "~", r.randint(0, 6), "LIMIT", r.randint(0, 5)],
                ["MINID", r.choice(["~", "="]), f"{int(time.time() * 1000) - 50}"],
            ]
        )
        entry = r.choice(["*", "*", "*", f"{int(time.time() * 1000) + 5}-*", "1-1"])
        return self.pick(
            [
                ["XADD", k, *self.pick([[], ["NOMKSTREAM"]]), *trim, entry, "f", "v", "g", "w"],
                ["XADD", k, *trim, "*", "only", "one"],
                ["XTRIM", k, *(trim or ["MAXLEN", "=", 3])],
                ["XSETID", k, f"{int(time.time() * 1000) + 60_000}-0", "ENTRIESADDED", 1000],
                ["XGROUP", "CREATE", k, r.choice(["g1", "g2"]), "$", "MKSTREAM"],
                ["XREADGROUP", "GROUP", "g1", "c1", "COUNT", 2, "STREAMS", k, ">"],
            ]
        )

    def explicit_stream(self, k: str) -> list[Arg]:
        r = self.rng
        self.stream_ms += r.randint(0, 2)
        recent = self.stream_ids[-6:] or ["1-1"]
        old = [r.choice(recent) for _ in range(2)]
        trim = self.pick(
            [
                [],
                ["MAXLEN", self.approximately(), r.randint(0, 8)],
                ["MINID", self.approximately(), old[0]],
            ]
        )
        entry = r.choice([f"{self.stream_ms}-*", f"{self.stream_ms}-{r.randint(0, 3)}"])
        command = self.pick(
            [
                ["XADD", k, *trim, entry, "f", str(self.stream_ms)],
                ["XADD", k, entry, "a", "1", "b", "2"],
                ["XDEL", k, *old],
                ["XTRIM", k, *(trim or ["MINID", "=", old[0]])],
                ["XSETID", k, f"{self.stream_ms + 3}-0", "MAXDELETEDID", old[0]],
            ]
        )
        if command[0] == "XADD":
            self.stream_ids.append(str(entry).replace("*", str(r.randint(0, 1))))
        if command[0] == "XSETID":
            self.stream_ms += 4
        return command

    def approximately(self) -> str:
        return "=" if self.direct else self.rng.choice(["~", "="])

    def script_keys(self) -> list[Arg]:
        return [self.key(STRINGS), self.key(LISTS)]

    def rare(self) -> list[Arg]:
        r = self.rng
        return self.pick(
            [
                ["FLUSHDB", r.choice(["ASYNC", "SYNC"])],
                ["FLUSHALL"] if r.random() < 0.3 else ["FLUSHDB"],
                *([] if self.direct else [["EVAL", SCRIPT, 2, *self.script_keys(), "scripted"]]),
                ["APPEND", self.key(STRINGS), "!"],
                ["PUBLISH", "channel", "message"],
            ]
        )


class Replica:
    """The MemoryView that commands are applied to."""

    def __init__(self) -> None:
        self.view = MemoryView()
        self.ctx = CommandContext(LAYOUT)
        self.recent: deque[list[bytes]] = deque(maxlen=40)

    def apply(self, args: list[bytes], end_offset: int) -> None:
        self.recent.append(args)
        self.ctx.offset = end_offset
        self.ctx.now_ms = int(time.time() * 1000)
        apply_command(self.view, self.ctx, args)

    def catch_up(self, link: MasterLink, client: RespClient) -> None:
        """Apply what the master propagated, up to its current offset."""
        target = master_offset(client)
        while link.delivered_offset < target:
            command = link.read_command(timeout=10)
            assert command is not None, f"the stream stopped at {link.delivered_offset}"
            self.apply(command.args, command.end_offset)

    def meta_records(self, db: int) -> Iterator[tuple[bytes, Meta]]:
        prefix = LAYOUT.meta_prefix(namespace_of(load_dbs(self.view, LAYOUT), db))
        for key, raw in self.view.scan(prefix):
            yield key[len(prefix) :], Meta.decode(raw)

    def dataset(self, db: int) -> dict[bytes, tuple[str, Any, int]]:
        now = int(time.time() * 1000)
        found = {}
        for key, meta in self.meta_records(db):
            pttl = -1 if meta.expire_ms is None else meta.expire_ms - now
            value: Any = read_meta_value(self.view, LAYOUT, meta)
            if meta.type == "stream":
                value = (value, stream_info(meta))
            found[key] = (meta.type, value, pttl)
        return found


def stream_info(meta: Meta) -> dict[str, Any]:
    info = meta.stream
    return {
        "length": meta.count,
        "last-generated-id": info["last"],
        "entries-added": info["added"],
        "max-deleted-entry-id": info["maxdel"],
        "recorded-first-entry-id": info["first"],
    }


def master_offset(client: RespClient) -> int:
    info = client.execute("INFO", "replication").decode()
    return int(info.split("master_repl_offset:")[1].split()[0])


def redis_value(client: RespClient, key: bytes, kind: str) -> Any:
    if kind == "string":
        return client.execute("GET", key)
    if kind == "hash":
        flat = client.execute("HGETALL", key)
        return dict(zip(flat[::2], flat[1::2], strict=True))
    if kind == "set":
        return sorted(client.execute("SMEMBERS", key))
    if kind == "list":
        return client.execute("LRANGE", key, 0, -1)
    if kind == "zset":
        flat = client.execute("ZRANGE", key, 0, -1, "WITHSCORES")
        return [(m, float(s)) for m, s in zip(flat[::2], flat[1::2], strict=True)]
    entries = [
        (entry_id.decode(), list(zip(fields[::2], fields[1::2], strict=True)))
        for entry_id, fields in client.execute("XRANGE", key, "-", "+")
    ]
    flat = client.execute("XINFO", "STREAM", key)
    info = dict(zip((k.decode() for k in flat[::2]), flat[1::2], strict=True))
    return entries, {
        k: v.decode() if isinstance(v, bytes) else v for k, v in info.items() if k in STREAM_INFO
    }


def redis_dataset(client: RespClient, db: int) -> dict[bytes, tuple[str, Any, int]]:
    client.execute("SELECT", db)
    found = {}
    for key in client.execute("KEYS", "*"):
        kind = client.execute("TYPE", key)
        found[key] = (kind, redis_value(client, key, kind), client.execute("PTTL", key))
    return found


def compare(replica: Replica, reader: RespClient, step: int) -> None:
    for db in range(DBS):
        expected, got = redis_dataset(reader, db), replica.dataset(db)
        context = f"db {db} after step {step}; last propagated: {list(replica.recent)}"
        missing, extra = expected.keys() - got.keys(), got.keys() - expected.keys()
        assert not missing and not extra, f"missing {missing}, extra {extra} in {context}"
        for key, (kind, value, pttl) in expected.items():
            got_kind, got_value, got_pttl = got[key]
            assert (got_kind, got_value) == (kind, value), f"key {key!r} in {context}"
            assert (got_pttl == -1) == (pttl == -1), f"pttl of {key!r} in {context}"
            assert abs(got_pttl - pttl) <= 2000, f"pttl of {key!r} in {context}"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with run_redis_server(tmp_path / "redis", "--repl-diskless-sync", "no") as running:
        yield running


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_propagated_stream_replicates_exactly(
    server: RedisServer, tmp_path: Path, seed: int
) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    link = MasterLink(MasterAddress(server.host, server.port), spool, lambda: None)
    try:
        result = link.start()
        assert result.full and result.payload is not None
        result.payload.read()  # an empty dataset
        replica, workload = Replica(), Workload(seed)
        with server.client() as client, server.client() as reader:
            for step in range(1, STEPS + 1):
                for command in workload.next():
                    with contextlib.suppress(RespError):  # refused: nothing propagated
                        client.execute(*command)
                if step % COMPARE_EVERY == 0:
                    replica.catch_up(link, client)
                    compare(replica, reader, step)
    finally:
        link.close()


def as_argv(command: list[Arg]) -> list[bytes]:
    return [arg if isinstance(arg, bytes) else str(arg).encode() for arg in command]


def run_as_sent(client: RespClient, replica: Replica, commands: list[list[Arg]]) -> None:
    """Run a command (or MULTI block) and apply what the server accepted, as sent."""
    if commands[0][0] != "MULTI":
        try:
            client.execute(*commands[0])
        except RespError:
            return
        replica.apply(as_argv(commands[0]), replica.ctx.offset + 1)
        return
    client.execute("MULTI")
    for command in commands[1:-1]:
        with contextlib.suppress(RespError):
            client.execute(*command)
    try:
        replies = client.execute("EXEC")
    except RespError:  # EXECABORT: a command was refused when queued
        return
    for command, reply in zip(commands[1:-1], replies, strict=True):
        if not isinstance(reply, RespError):
            replica.apply(as_argv(command), replica.ctx.offset + 1)


@pytest.mark.parametrize("seed", [4, 5])
def test_the_commands_as_sent_replicate_exactly(server: RedisServer, seed: int) -> None:
    """The original forms (SET EX, EXPIRE, INCRBYFLOAT, HINCRBYFLOAT, BLPOP,
    LMPOP, ZMPOP, XADD ms-*, GETSET...) that a Redis 7 master never sends."""
    replica, workload = Replica(), Workload(seed, direct=True)
    with server.client() as client, server.client() as reader:
        for step in range(1, STEPS + 1):
            run_as_sent(client, replica, workload.next())
            if step % COMPARE_EVERY == 0:
                compare(replica, reader, step)
