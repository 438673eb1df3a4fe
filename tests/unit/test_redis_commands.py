"""replication/redis/commands*.py: Redis 7.0 commands applied to a MemoryView.

Each test applies commands through ``apply_command`` and checks ``read_value``
gives what Redis would return. After every command the harness checks the
layout's invariants: counts and list bounds match the sub-keys, no live object
is shared or gc-recorded.
"""

from __future__ import annotations

from fractions import Fraction
from typing import cast

import pytest

from replication.redis.commands.common import load_dbs, namespace_of
from replication.redis.commands.dispatch import (
    CommandContext,
    CommandError,
    ReplicationStop,
    UnsupportedCommand,
    WrongTypeStop,
    apply_command,
)
from replication.redis.commands.numeric import (
    NumberError,
    format_long_double,
    incr_long_double,
    parse_double,
    parse_int,
    parse_long_double,
)
from replication.redis.layout import Layout, Meta, list_position
from replication.redis.objects import RedisValue, load_meta, read_value
from replication.redis.view import MemoryView

LAYOUT = Layout(b"redis/", 1)
NOW = 1_700_000_000_000
INF = float("inf")

Arg = bytes | str | int | float


class Redis:
    """Applies commands like a replica would, offsets 100, 200, ..."""

    def __init__(self) -> None:
        self.view = MemoryView()
        self.ctx = CommandContext(LAYOUT, now_ms=NOW)
        self.offset = 0

    def __call__(self, *args: Arg) -> None:
        self.offset += 100
        self.ctx.offset = self.offset
        argv = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        apply_command(self.view, self.ctx, argv)
        check_layout(self.view)

    def namespace(self, db: int | None = None) -> str:
        return namespace_of(load_dbs(self.view, LAYOUT), self.ctx.db if db is None else db)

    def read(self, key: bytes | str, db: int | None = None) -> tuple[str, RedisValue, int] | None:
        raw = key.encode() if isinstance(key, str) else key
        return read_value(self.view, LAYOUT, self.namespace(db), raw, NOW)

    def value(self, key: bytes | str, db: int | None = None) -> RedisValue | None:
        found = self.read(key, db)
        return None if found is None else found[1]

    def type(self, key: str, db: int | None = None) -> str | None:
        found = self.read(key, db)
        return None if found is None else found[0]

    def pttl(self, key: str, db: int | None = None) -> int | None:
        found = self.read(key, db)
        return None if found is None else found[2]

    def meta(self, key: str, db: int | None = None) -> Meta:
        meta = load_meta(self.view, LAYOUT, self.namespace(db), key.encode())
        assert meta is not None
        return meta

    def keys(self, db: int | None = None) -> list[bytes]:
        prefix = LAYOUT.meta_prefix(self.namespace(db))
        return [key[len(prefix) :] for key, _ in self.view.scan(prefix)]

    def gc(self) -> list[bytes]:
        prefix = LAYOUT.gc_prefix()
        return [key[len(prefix) :] for key, _ in self.view.scan(prefix)]


def check_layout(view: MemoryView) -> None:
    """Every live container's metadata matches its sub-keys."""
    live: set[str] = set()
    gc = {key[len(LAYOUT.gc_prefix()) :] for key, _ in view.scan(LAYOUT.gc_prefix())}
    for key, raw in view.scan(LAYOUT.root):
        if b"/k/" not in key[len(LAYOUT.root) :]:
            continue
        meta = Meta.decode(raw)
        if meta.type == "string":
            continue
        assert meta.obj is not None and meta.obj not in live, f"object shared: {key!r}"
        assert b"o/" + meta.obj.encode() not in gc, f"live object gc-recorded: {key!r}"
        live.add(meta.obj)
        subs = [k for k, _ in view.scan(LAYOUT.object_prefix(meta.obj))]
        if meta.type == "list":
            expected = [
                LAYOUT.object_prefix(meta.obj) + list_position(p)
                for p in range(meta.head, meta.end)
            ]
            assert subs == expected, f"list bounds of {key!r}"
        else:
            assert len(subs) == meta.count, f"count of {key!r}"
        assert meta.type == "stream" or meta.size > 0, f"empty container {key!r}"


def firsts(r: Redis, key: str) -> list[object]:
    """The members of a zset, or the ids of a stream, in order."""
    value = cast(list[tuple[object, object]], r.value(key) or [])
    return [pair[0] for pair in value]


@pytest.fixture
def r() -> Redis:
    return Redis()


# --- strings ---------------------------------------------------------------------


def test_set_and_its_conditions(r: Redis) -> None:
    r("SET", "k", "v")
    assert r.read("k") == ("string", b"v", -1)
    r("SET", "k", "w", "NX")
    r("SET", "other", "w", "XX")
    assert (r.value("k"), r.value("other")) == (b"v", None)
    r("set", "k", "w", "xx", "get")
    assert r.value("k") == b"w"


def test_set_expiry_forms_and_keepttl(r: Redis) -> None:
    r("SET", "k", "v", "EX", 10)
    assert r.pttl("k") == 10_000
    r("SET", "k", "v", "PXAT", NOW + 5)
    assert r.pttl("k") == 5
    r("SET", "k", "v2", "KEEPTTL")
    assert r.read("k") == ("string", b"v2", 5)
    r("SET", "k", "v3")
    assert r.pttl("k") == -1
    r("SET", "k", "v", "EXAT", NOW // 1000 + 2)
    assert r.pttl("k") == 2000 - NOW % 1000
    r("SET", "k", "v", "PX", 7)
    assert r.pttl("k") == 7


def test_set_syntax_errors_stop(r: Redis) -> None:
    for args in (["NX", "XX"], ["EX", "1", "PX", "1"], ["KEEPTTL", "EX", "1"], ["EX", "0"], ["EX"]):
        with pytest.raises(CommandError):
            r("SET", "k", "v", *args)


def test_set_over_a_hash_makes_a_string_and_gc_records_the_hash_object(r: Redis) -> None:
    r("HSET", "k", "f", "v")
    obj = r.meta("k").obj
    assert obj == "c100.0"
    r("SET", "k", "s")
    assert r.read("k") == ("string", b"s", -1)
    assert r.gc() == [b"o/c100.0"]


def test_set_get_over_a_hash_is_a_wrong_type(r: Redis) -> None:
    r("HSET", "k", "f", "v")
    with pytest.raises(WrongTypeStop, match="expected a string, found a hash"):
        r("SET", "k", "v", "GET")


def test_setex_psetex_setnx_mset_msetnx(r: Redis) -> None:
    r("SETEX", "a", 3, "1")
    r("PSETEX", "b", 4, "2")
    assert (r.read("a"), r.read("b")) == (("string", b"1", 3000), ("string", b"2", 4))
    with pytest.raises(CommandError):
        r("SETEX", "a", 0, "1")
    r("SETNX", "a", "x")
    r("SETNX", "c", "3")
    assert (r.value("a"), r.value("c")) == (b"1", b"3")
    r("MSET", "a", "A", "d", "D")
    assert r.read("a") == ("string", b"A", -1)
    r("MSETNX", "d", "no", "e", "no")
    assert r.value("e") is None
    r("MSETNX", "e", "E", "f", "F")
    assert (r.value("e"), r.value("f")) == (b"E", b"F")


def test_getset_getdel_getex(r: Redis) -> None:
    r("SET", "k", "v", "PX", 50)
    r("GETSET", "k", "w")
    assert r.read("k") == ("string", b"w", -1)
    r("GETEX", "k", "PX", 9)
    assert r.pttl("k") == 9
    r("GETEX", "k", "PERSIST")
    assert r.pttl("k") == -1
    r("GETDEL", "k")
    assert r.value("k") is None
    r("GETDEL", "k")
    r("RPUSH", "l", "x")
    with pytest.raises(WrongTypeStop):
        r("GETDEL", "l")


def test_counters_keep_the_ttl(r: Redis) -> None:
    r("INCR", "n")
    r("INCRBY", "n", 41)
    assert r.read("n") == ("string", b"42", -1)
    r("PEXPIRE", "n", 100)
    r("DECR", "n")
    r("DECRBY", "n", -8)
    assert r.read("n") == ("string", b"49", 100)
    r("SET", "n", "-9223372036854775807")
    r("DECR", "n")
    assert r.value("n") == b"-9223372036854775808"


@pytest.mark.parametrize(
    ("value", "command"),
    [
        ("abc", ("INCR", "n")),
        ("1.5", ("INCRBY", "n", 1)),
        (" 1", ("INCR", "n")),
        ("9223372036854775807", ("INCR", "n")),
        ("1", ("DECRBY", "n", "-9223372036854775808")),
        ("1", ("INCRBY", "n", "x")),
    ],
)
def test_incr_on_a_non_integer_or_overflowing_stops(
    r: Redis, value: str, command: tuple[str, ...]
) -> None:
    r("SET", "n", value)
    with pytest.raises(ReplicationStop):
        r(*command)
    assert r.value("n") == value.encode()


@pytest.mark.parametrize(
    ("start", "increment", "result"),
    [
        ("10.50", "0.1", "10.6"),
        ("10.6", "-5", "5.6"),
        ("5.0e3", "2.0e2", "5200"),
        (None, "0.1", "0.1"),
        ("3", "-3", "0"),
        ("1", "1e-20", "1"),
        ("0", "-0.000001", "-0.000001"),
        ("0.1", "0.2", "0.3"),
        ("1e17", "1", "100000000000000001"),
        ("0x10", "1", "17"),
    ],
)
def test_incrbyfloat_formats_like_redis(
    r: Redis, start: str | None, increment: str, result: str
) -> None:
    if start is not None:
        r("SET", "f", start, "PX", 77)
    r("INCRBYFLOAT", "f", increment)
    assert r.value("f") == result.encode()
    assert r.pttl("f") == (77 if start is not None else -1)


@pytest.mark.parametrize(("start", "increment"), [("abc", "1"), ("1", "inf"), ("1e4932", "1e4932")])
def test_incrbyfloat_errors_stop(r: Redis, start: str, increment: str) -> None:
    r("SET", "f", start)
    with pytest.raises(CommandError):
        r("INCRBYFLOAT", "f", increment)


def test_append_setrange_setbit(r: Redis) -> None:
    r("APPEND", "s", "ab")
    r("PEXPIRE", "s", 60)
    r("APPEND", "s", "cd")
    assert r.read("s") == ("string", b"abcd", 60)
    r("SETRANGE", "s", 1, "XY")
    assert r.value("s") == b"aXYd"
    r("SETRANGE", "s", 6, "!")
    assert r.read("s") == ("string", b"aXYd\x00\x00!", 60)
    r("SETRANGE", "new", 0, "")
    assert r.value("new") is None
    r("SETRANGE", "pad", 3, "x")
    assert r.value("pad") == b"\x00\x00\x00x"
    with pytest.raises(CommandError):
        r("SETRANGE", "pad", -1, "x")
    r("SETBIT", "b", 9, 1)
    assert r.value("b") == b"\x00\x40"
    r("SETBIT", "b", 9, 0)
    r("SETBIT", "b", 0, 1)
    assert r.value("b") == b"\x80\x00"


# --- keys ------------------------------------------------------------------------


def test_del_and_unlink(r: Redis) -> None:
    r("SET", "a", "1")
    r("SADD", "b", "m")
    r("RPUSH", "c", "x")
    r("DEL", "a", "b", "missing")
    r("UNLINK", "c")
    assert r.keys() == []
    assert r.gc() == [b"o/c200.0", b"o/c300.0"]


def test_expire_forms(r: Redis) -> None:
    r("SET", "k", "v")
    r("EXPIRE", "k", 10)
    assert r.pttl("k") == 10_000
    r("PEXPIRE", "k", 10)
    assert r.pttl("k") == 10
    r("EXPIREAT", "k", NOW // 1000 + 100)
    assert r.pttl("k") == 100_000 - NOW % 1000
    r("PEXPIREAT", "k", NOW + 3)
    assert r.pttl("k") == 3
    r("EXPIRE", "missing", 10)
    assert r.keys() == [b"k"]


def test_an_absolute_expiry_in_the_past_is_kept_as_a_redis_replica_does(r: Redis) -> None:
    r("SET", "k", "v")
    r("PEXPIREAT", "k", NOW - 1000)
    assert r.read("k") == ("string", b"v", -1000)
    r("PERSIST", "k")
    assert r.read("k") == ("string", b"v", -1)


def test_a_relative_expiry_that_is_not_positive_deletes_the_key(r: Redis) -> None:
    r("HSET", "h", "f", "v")
    r("EXPIRE", "h", 0)
    assert r.value("h") is None
    assert r.gc() == [b"o/c100.0"]
    r("SET", "s", "v")
    r("PEXPIRE", "s", -5)
    assert r.keys() == []


@pytest.mark.parametrize(
    ("current", "flag", "new", "applied"),
    [
        (None, "NX", 50, True),
        (40, "NX", 50, False),
        (None, "XX", 50, False),
        (40, "XX", 50, True),
        (None, "GT", 50, False),
        (40, "GT", 50, True),
        (60, "GT", 50, False),
        (50, "GT", 50, False),
        (None, "LT", 50, True),
        (60, "LT", 50, True),
        (40, "LT", 50, False),
    ],
)
def test_expire_conditions(
    r: Redis, current: int | None, flag: str, new: int, applied: bool
) -> None:
    r("SET", "k", "v")
    if current is not None:
        r("PEXPIRE", "k", current)
    r("PEXPIRE", "k", new, flag)
    assert r.pttl("k") == (new if applied else current or -1)


def test_expire_flag_conflicts_stop(r: Redis) -> None:
    r("SET", "k", "v")
    for flags in (["NX", "XX"], ["GT", "LT"], ["NX", "GT"], ["BAD"]):
        with pytest.raises(CommandError):
            r("EXPIRE", "k", 10, *flags)


def test_persist(r: Redis) -> None:
    r("SET", "k", "v", "PX", 10)
    r("PERSIST", "k")
    r("PERSIST", "missing")
    assert r.pttl("k") == -1


def test_rename_moves_the_value_and_its_ttl(r: Redis) -> None:
    r("RPUSH", "a", "x", "y")
    r("PEXPIRE", "a", 99)
    r("RENAME", "a", "b")
    assert r.read("b") == ("list", [b"x", b"y"], 99)
    assert r.value("a") is None
    assert r.meta("b").obj == "c100.0"  # the same object, no copy
    assert r.gc() == []


def test_rename_over_an_existing_container(r: Redis) -> None:
    r("SADD", "a", "m")
    r("HSET", "b", "f", "v")
    r("PEXPIRE", "b", 5)
    r("RENAME", "a", "b")
    assert r.read("b") == ("set", [b"m"], -1)
    assert r.gc() == [b"o/c200.0"]


def test_renamenx_rename_same_key_and_missing_source(r: Redis) -> None:
    r("SET", "a", "1")
    r("SET", "b", "2")
    r("RENAMENX", "a", "b")
    assert (r.value("a"), r.value("b")) == (b"1", b"2")
    r("RENAME", "a", "a")
    assert r.value("a") == b"1"
    with pytest.raises(CommandError, match="no such key"):
        r("RENAME", "missing", "x")


def test_copy_a_container_into_a_new_object(r: Redis) -> None:
    r("HSET", "h", "f", "1", "g", "2")
    r("PEXPIRE", "h", 30)
    r("COPY", "h", "h2")
    assert r.read("h2") == ("hash", {b"f": b"1", b"g": b"2"}, 30)
    assert r.meta("h2").obj == "c300.0"
    r("HSET", "h2", "f", "changed")
    assert r.value("h") == {b"f": b"1", b"g": b"2"}


def test_copy_with_and_without_replace_and_to_another_db(r: Redis) -> None:
    r("SET", "a", "1")
    r("ZADD", "z", 1, "m")
    r("COPY", "z", "a")
    assert r.value("a") == b"1"
    r("COPY", "z", "a", "REPLACE")
    assert r.value("a") == [(b"m", 1.0)]
    r("COPY", "z", "z", "DB", 2)
    assert r.value("z", db=2) == [(b"m", 1.0)]
    with pytest.raises(CommandError):
        r("COPY", "z", "z")
    r("COPY", "missing", "b")
    assert r.value("b") is None


def test_move(r: Redis) -> None:
    r("LPUSH", "l", "x")
    r("PEXPIRE", "l", 8)
    r("SET", "s", "here", "PX", 5)
    r("SELECT", 1)
    r("SET", "s", "there")
    r("SELECT", 0)
    r("MOVE", "l", 1)
    r("MOVE", "s", 1)
    assert r.read("l", db=1) == ("list", [b"x"], 8)
    assert r.value("l", db=0) is None
    assert (r.value("s", db=0), r.value("s", db=1)) == (b"here", b"there")
    with pytest.raises(CommandError):
        r("MOVE", "s", 0)


def test_select_changes_the_db(r: Redis) -> None:
    r("SELECT", 5)
    r("SET", "k", "v")
    assert r.ctx.db == 5
    assert r.value("k", db=5) == b"v"
    assert r.value("k", db=0) is None
    with pytest.raises(CommandError):
        r("SELECT", -1)


def test_swapdb_then_flushdb(r: Redis) -> None:
    r("SET", "zero", "0")
    r("SELECT", 1)
    r("SET", "one", "1")
    r("SWAPDB", 0, 1)
    assert r.keys(db=0) == [b"one"]
    assert r.keys(db=1) == [b"zero"]
    assert load_dbs(r.view, LAYOUT) == {0: "d1", 1: "d0"}
    r("FLUSHDB")  # db 1, now namespace d0
    assert r.keys(db=1) == []
    assert r.keys(db=0) == [b"one"]
    assert load_dbs(r.view, LAYOUT) == {0: "d1", 1: "f500.0"}
    assert r.gc() == [b"n/d0"]
    r("SWAPDB", 1, 0)
    assert load_dbs(r.view, LAYOUT) == {0: "f500.0"}  # db 1 is back in d1
    assert r.keys(db=1) == [b"one"]


def test_flushall_empties_every_db(r: Redis) -> None:
    r("SET", "a", "1")
    r("SELECT", 20)
    r("SET", "b", "2")
    r("SWAPDB", 0, 30)
    r("FLUSHALL", "ASYNC")
    assert all(r.keys(db=db) == [] for db in range(32))
    dbs = load_dbs(r.view, LAYOUT)
    assert sorted(dbs) == list(range(31))
    assert dbs[0] == "f500.0" and dbs[30] == "f500.30"
    assert b"n/d0" in r.gc() and b"n/d20" in r.gc() and b"n/d30" in r.gc()
    with pytest.raises(CommandError):
        r("FLUSHALL", "NOW")


# --- hashes ------------------------------------------------------------------------


def test_hset_counts_new_fields_and_keeps_the_ttl(r: Redis) -> None:
    r("HSET", "h", "a", "1", "b", "2")
    r("PEXPIRE", "h", 40)
    r("HSET", "h", "a", "10", "c", "3")
    r("HMSET", "h", "d", "4")
    assert r.read("h") == ("hash", {b"a": b"10", b"b": b"2", b"c": b"3", b"d": b"4"}, 40)
    assert r.meta("h").count == 4
    with pytest.raises(CommandError):
        r("HSET", "h", "odd")


def test_hsetnx_and_hdel_to_empty(r: Redis) -> None:
    r("HSETNX", "h", "a", "1")
    r("HSETNX", "h", "a", "2")
    assert r.value("h") == {b"a": b"1"}
    r("HDEL", "h", "missing")
    assert r.meta("h").count == 1
    r("HDEL", "h", "a", "a")
    assert r.value("h") is None
    assert r.gc() == [b"o/c100.0"]


def test_hincrby_and_hincrbyfloat(r: Redis) -> None:
    r("HINCRBY", "h", "n", 5)
    r("HINCRBY", "h", "n", -7)
    r("HINCRBYFLOAT", "h", "f", "10.50")
    r("HINCRBYFLOAT", "h", "f", "0.1")
    assert r.value("h") == {b"n": b"-2", b"f": b"10.6"}
    r("HSET", "h", "s", "abc")
    with pytest.raises(CommandError):
        r("HINCRBY", "h", "s", 1)
    with pytest.raises(CommandError):
        r("HINCRBYFLOAT", "h", "s", 1)


def test_hash_commands_on_another_type_stop(r: Redis) -> None:
    r("SET", "s", "v")
    with pytest.raises(WrongTypeStop):
        r("HSET", "s", "f", "v")
    with pytest.raises(WrongTypeStop):
        r("HDEL", "s", "f")


# --- sets ------------------------------------------------------------------------


def test_sadd_srem(r: Redis) -> None:
    r("SADD", "s", "b", "a", "b")
    assert r.value("s") == [b"a", b"b"]
    assert r.meta("s").count == 2
    r("SREM", "s", "a", "zz")
    assert r.value("s") == [b"b"]
    r("SREM", "s", "b")
    assert r.value("s") is None


def test_smove(r: Redis) -> None:
    r("SADD", "a", "x", "y")
    r("SMOVE", "a", "b", "x")
    r("SMOVE", "a", "b", "nope")
    assert (r.value("a"), r.value("b")) == ([b"y"], [b"x"])
    r("SMOVE", "a", "b", "y")
    assert (r.value("a"), r.value("b")) == (None, [b"x", b"y"])
    r("SMOVE", "b", "b", "x")
    assert r.value("b") == [b"x", b"y"]
    r("SET", "str", "v")
    with pytest.raises(WrongTypeStop):
        r("SMOVE", "b", "str", "x")


def test_spop_applies_only_certain_outcomes(r: Redis) -> None:
    r("SADD", "s", "a", "b")
    r("SPOP", "s", 0)
    with pytest.raises(UnsupportedCommand, match="SPOP"):
        r("SPOP", "s")
    with pytest.raises(UnsupportedCommand):
        r("SPOP", "s", 1)
    r("SPOP", "s", 2)
    assert r.value("s") is None
    r("SADD", "t", "only")
    r("SPOP", "t")
    assert r.value("t") is None
    r("SPOP", "missing", 3)


def test_set_stores(r: Redis) -> None:
    r("SADD", "a", "1", "2", "3")
    r("SADD", "b", "2", "3", "4")
    r("SET", "dst", "old", "PX", 50)
    r("SINTERSTORE", "dst", "a", "b")
    assert r.read("dst") == ("set", [b"2", b"3"], -1)
    r("SUNIONSTORE", "u", "a", "b", "missing")
    assert r.value("u") == [b"1", b"2", b"3", b"4"]
    r("SDIFFSTORE", "a", "a", "b")
    assert r.value("a") == [b"1"]
    r("SINTERSTORE", "dst", "a", "missing")
    assert r.value("dst") is None


# --- lists ------------------------------------------------------------------------


def test_pushes_and_pops(r: Redis) -> None:
    r("RPUSH", "l", "a", "b")
    r("LPUSH", "l", "x", "y")
    assert r.value("l") == [b"y", b"x", b"a", b"b"]
    m = r.meta("l")
    assert (m.head, m.end) == (-2, 2)
    r("LPUSHX", "missing", "v")
    r("RPUSHX", "l", "z")
    r("LPOP", "l")
    r("RPOP", "l", 2)
    assert r.value("l") == [b"x", b"a"]
    r("LPOP", "l", 0)
    r("LPOP", "l", 10)
    assert r.value("l") is None
    with pytest.raises(CommandError):
        r("LPOP", "l", -1)


def test_lset_with_a_negative_index(r: Redis) -> None:
    r("RPUSH", "l", "a", "b", "c")
    r("LSET", "l", -1, "C")
    r("LSET", "l", 0, "A")
    r("LSET", "l", -3, "AA")
    assert r.value("l") == [b"AA", b"b", b"C"]
    with pytest.raises(CommandError, match="out of range"):
        r("LSET", "l", 3, "x")
    with pytest.raises(CommandError, match="out of range"):
        r("LSET", "l", -4, "x")
    with pytest.raises(CommandError, match="no such key"):
        r("LSET", "missing", 0, "x")


@pytest.mark.parametrize(
    ("start", "stop", "kept"),
    [(1, -2, "bcd"), (0, -1, "abcde"), (-2, 100, "de"), (-100, 1, "ab"), (3, 3, "d")],
)
def test_ltrim(r: Redis, start: int, stop: int, kept: str) -> None:
    r("RPUSH", "l", *"abcde")
    r("LTRIM", "l", start, stop)
    assert r.value("l") == [c.encode() for c in kept]


@pytest.mark.parametrize(("start", "stop"), [(3, 1), (5, 10), (0, -6), (-1, -2)])
def test_ltrim_to_empty_deletes_the_key(r: Redis, start: int, stop: int) -> None:
    r("RPUSH", "l", *"abcde")
    r("LTRIM", "l", start, stop)
    assert r.value("l") is None
    assert r.gc() == [b"o/c100.0"]


def test_lmove_rpoplpush_and_blocking_forms(r: Redis) -> None:
    r("RPUSH", "a", "1", "2", "3")
    r("LMOVE", "a", "b", "LEFT", "RIGHT")
    r("RPOPLPUSH", "a", "b")
    assert (r.value("a"), r.value("b")) == ([b"2"], [b"3", b"1"])
    r("BLMOVE", "b", "b", "RIGHT", "LEFT", 0)  # rotation
    assert r.value("b") == [b"1", b"3"]
    r("PEXPIRE", "a", 70)
    r("BRPOPLPUSH", "a", "a", "0.5")  # rotating a one-element list keeps the key and TTL
    assert r.read("a") == ("list", [b"2"], 70)
    assert r.meta("a").obj == "c100.0"
    r("LMOVE", "a", "c", "LEFT", "LEFT")
    assert (r.value("a"), r.value("c")) == (None, [b"2"])
    r("LMOVE", "missing", "c", "LEFT", "LEFT")
    r("SET", "s", "v")
    with pytest.raises(WrongTypeStop):
        r("LMOVE", "c", "s", "LEFT", "LEFT")
    assert r.value("c") == [b"2"]


def test_blpop_brpop_lmpop_serve_the_first_non_empty_list(r: Redis) -> None:
    r("RPUSH", "b", "1", "2", "3", "4")
    r("BLPOP", "a", "b", 0)
    r("BRPOP", "a", "b", "1.5")
    assert r.value("b") == [b"2", b"3"]
    r("LMPOP", 2, "a", "b", "RIGHT", "COUNT", 5)
    assert r.value("b") is None
    r("RPUSH", "c", "1", "2")
    r("BLMPOP", 0, 1, "c", "LEFT")
    assert r.value("c") == [b"2"]
    with pytest.raises(CommandError):
        r("BLPOP", "c", -1)


@pytest.mark.parametrize(
    ("count", "left"),
    [(0, "bcb"), (1, "bcxbx"), (2, "bcbx"), (-1, "xbcxb"), (-2, "xbcb"), (9, "bcb")],
)
def test_lrem(r: Redis, count: int, left: str) -> None:
    r("RPUSH", "l", *"xbcxbx")
    r("LREM", "l", count, "x")
    assert r.value("l") == [c.encode() for c in left]


def test_lrem_everything_deletes_the_key(r: Redis) -> None:
    r("RPUSH", "l", "x", "x")
    r("LREM", "l", 0, "x")
    assert r.value("l") is None
    r("LREM", "missing", 0, "x")


def test_linsert(r: Redis) -> None:
    r("RPUSH", "l", *"abcdef")
    r("LINSERT", "l", "BEFORE", "b", "X")
    r("LINSERT", "l", "AFTER", "e", "Y")
    r("LINSERT", "l", "after", "f", "Z")
    r("LINSERT", "l", "BEFORE", "nope", "W")
    assert r.value("l") == [c.encode() for c in "aXbcdeYfZ"]
    m = r.meta("l")
    assert m.end - m.head == 9
    r("LINSERT", "missing", "BEFORE", "a", "b")
    with pytest.raises(CommandError):
        r("LINSERT", "l", "AROUND", "a", "b")


# --- sorted sets --------------------------------------------------------------------


def test_zadd_basics(r: Redis) -> None:
    r("ZADD", "z", 2, "b", 1, "a", "-inf", "low", "+inf", "high")
    assert r.value("z") == [(b"low", -INF), (b"a", 1.0), (b"b", 2.0), (b"high", INF)]
    r("ZADD", "z", "1.5", "b")
    assert r.value("z") == [(b"low", -INF), (b"a", 1.0), (b"b", 1.5), (b"high", INF)]
    assert r.meta("z").count == 4


@pytest.mark.parametrize(
    ("flags", "after"),
    [
        (["NX"], {b"a": 5.0, b"new": 3.0}),
        (["XX"], {b"a": 3.0, b"b": 3.0}),
        (["GT"], {b"a": 5.0, b"b": 3.0, b"new": 3.0}),
        (["LT"], {b"a": 3.0, b"b": 1.0, b"new": 3.0}),
        (["GT", "CH"], {b"a": 5.0, b"b": 3.0, b"new": 3.0}),
        (["XX", "LT"], {b"a": 3.0, b"b": 1.0}),
    ],
)
def test_zadd_conditions(r: Redis, flags: list[str], after: dict[bytes, float]) -> None:
    r("ZADD", "z", 5, "a", 1, "b")
    r("ZADD", "z", *flags, 3, "a", 3, "b", 3, "new")
    expected = {b"a": 5.0, b"b": 1.0, **after}
    assert r.value("z") == sorted(expected.items(), key=lambda p: (p[1], p[0]))


def test_zadd_incr(r: Redis) -> None:
    r("ZADD", "z", "INCR", 2, "m")
    r("ZADD", "z", "INCR", "1.5", "m")
    assert r.value("z") == [(b"m", 3.5)]
    r("ZADD", "z", "INCR", "GT", -1, "m")
    r("ZADD", "z", "NX", "INCR", 9, "m")
    assert r.value("z") == [(b"m", 3.5)]
    r("ZADD", "z", "INCR", "inf", "m")
    with pytest.raises(CommandError, match="NaN"):
        r("ZADD", "z", "INCR", "-inf", "m")


def test_zadd_on_a_missing_key_with_xx_creates_nothing(r: Redis) -> None:
    r("ZADD", "z", "XX", 1, "m")
    assert r.keys() == []


@pytest.mark.parametrize(
    "args",
    [
        ["NX", "XX", 1, "m"],
        ["GT", "LT", 1, "m"],
        ["NX", "GT", 1, "m"],
        ["INCR", 1, "a", 2, "b"],
        ["nan", "m"],
        ["x", "m"],
        [1],
    ],
)
def test_zadd_errors_stop(r: Redis, args: list[Arg]) -> None:
    with pytest.raises(CommandError):
        r("ZADD", "z", *args)


def test_zincrby_zrem(r: Redis) -> None:
    r("ZINCRBY", "z", 2, "a")
    r("ZINCRBY", "z", "-0.5", "a")
    r("ZINCRBY", "z", 1, "b")
    assert r.value("z") == [(b"b", 1.0), (b"a", 1.5)]
    r("ZREM", "z", "a", "nope")
    r("ZREM", "z", "b")
    assert r.value("z") is None


def test_zremrangebyscore(r: Redis) -> None:
    r("ZADD", "z", 1, "a", 2, "b", 3, "c", 4, "d", "inf", "e")
    r("ZREMRANGEBYSCORE", "z", "(1", 3)
    assert r.value("z") == [(b"a", 1.0), (b"d", 4.0), (b"e", INF)]
    r("ZREMRANGEBYSCORE", "z", "(4", "+inf")
    assert r.value("z") == [(b"a", 1.0), (b"d", 4.0)]
    with pytest.raises(CommandError):
        r("ZREMRANGEBYSCORE", "z", "x", 1)
    r("ZREMRANGEBYSCORE", "z", "-inf", "inf")
    assert r.value("z") is None


def test_zremrangebyrank_and_bylex(r: Redis) -> None:
    r("ZADD", "z", 0, "a", 0, "b", 0, "c", 0, "d", 0, "e")
    r("ZREMRANGEBYRANK", "z", -2, -1)
    assert firsts(r, "z") == [b"a", b"b", b"c"]
    r("ZADD", "z", 0, "d", 0, "e")
    r("ZREMRANGEBYLEX", "z", "(a", "[c")
    assert firsts(r, "z") == [b"a", b"d", b"e"]
    r("ZREMRANGEBYLEX", "z", "[e", "+")
    r("ZREMRANGEBYLEX", "z", "-", "(b")
    assert r.value("z") == [(b"d", 0.0)]
    with pytest.raises(CommandError):
        r("ZREMRANGEBYLEX", "z", "a", "+")


def test_a_lex_range_over_unequal_scores_checks_the_ends_first(r: Redis) -> None:
    r("ZADD", "z", 2, "d", "inf", "a")
    r("ZREMRANGEBYLEX", "z", "[b", "+")  # the last member, a, is below [b: nothing
    assert r.value("z") == [(b"d", 2.0), (b"a", INF)]
    r("ZADD", "y", 1, "b", 2, "a", 3, "c")
    r("ZREMRANGEBYLEX", "y", "[b", "+")  # from b (first >= b) while <= +
    assert r.value("y") is None


def test_zpop_forms(r: Redis) -> None:
    r("ZADD", "z", 1, "a", 2, "b", 2, "c", 3, "d", 4, "e")
    r("ZPOPMIN", "z")
    r("ZPOPMAX", "z", 2)
    assert r.value("z") == [(b"b", 2.0), (b"c", 2.0)]
    r("ZPOPMAX", "z")
    assert r.value("z") == [(b"b", 2.0)]
    r("BZPOPMIN", "none", "z", 0)
    assert r.value("z") is None
    r("ZADD", "y", 1, "a", 2, "b", 3, "c")
    r("ZMPOP", 2, "none", "y", "MAX", "COUNT", 2)
    assert r.value("y") == [(b"a", 1.0)]
    r("BZMPOP", "0.1", 1, "y", "MIN")
    assert r.value("y") is None


def test_zunionstore_zinterstore_with_weights_aggregate_and_a_set(r: Redis) -> None:
    r("ZADD", "a", 1, "x", 2, "y")
    r("ZADD", "b", 10, "y", 20, "z")
    r("SADD", "s", "y", "w")
    r("ZUNIONSTORE", "u", 2, "a", "b", "WEIGHTS", 2, 1)
    assert r.value("u") == [(b"x", 2.0), (b"y", 14.0), (b"z", 20.0)]
    r("ZUNIONSTORE", "u", 3, "a", "b", "s", "AGGREGATE", "MAX")
    assert r.value("u") == [(b"w", 1.0), (b"x", 1.0), (b"y", 10.0), (b"z", 20.0)]
    r("ZINTERSTORE", "i", 3, "a", "b", "s", "AGGREGATE", "MIN")
    assert r.value("i") == [(b"y", 1.0)]
    r("ZINTERSTORE", "i", 2, "a", "missing")
    assert r.value("i") is None
    r("ZUNIONSTORE", "n", 2, "a", "b", "WEIGHTS", 0, "inf")
    assert r.value("n") == [(b"x", 0.0), (b"y", INF), (b"z", INF)]


def test_zdiffstore_and_zrangestore(r: Redis) -> None:
    r("ZADD", "a", 1, "x", 2, "y", 3, "z", 4, "w")
    r("ZADD", "b", 0, "y")
    r("ZDIFFSTORE", "d", 2, "a", "b")
    assert r.value("d") == [(b"x", 1.0), (b"z", 3.0), (b"w", 4.0)]
    r("ZRANGESTORE", "r", "a", 1, 2)
    assert r.value("r") == [(b"y", 2.0), (b"z", 3.0)]
    r("ZRANGESTORE", "r", "a", "(4", 2, "BYSCORE", "REV", "LIMIT", 1, 5)
    assert r.value("r") == [(b"y", 2.0)]
    r("ZRANGESTORE", "r", "a", 0, 0, "REV")
    assert r.value("r") == [(b"w", 4.0)]
    r("ZADD", "lex", 0, "a", 0, "b", 0, "c")
    r("ZRANGESTORE", "r", "lex", "[b", "+", "BYLEX")
    assert r.value("r") == [(b"b", 0.0), (b"c", 0.0)]
    r("ZRANGESTORE", "r", "a", 5, 9)
    assert r.value("r") is None
    with pytest.raises(CommandError):
        r("ZRANGESTORE", "r", "a", 0, 1, "LIMIT", 0, 1)


# --- streams --------------------------------------------------------------------------


def stream_state(r: Redis, key: str) -> dict[str, object]:
    return dict(r.meta(key).stream, n=r.meta(key).count)


def test_xadd_with_the_ids_the_master_sends(r: Redis) -> None:
    r("XADD", "x", "1-1", "f", "v")
    r("XADD", "x", "1-*", "a", "1", "b", "2")
    r("XADD", "x", "5", "f", "w")
    assert r.value("x") == [
        ("1-1", [(b"f", b"v")]),
        ("1-2", [(b"a", b"1"), (b"b", b"2")]),
        ("5-0", [(b"f", b"w")]),
    ]
    assert stream_state(r, "x") == {
        "last": "5-0",
        "added": 3,
        "maxdel": "0-0",
        "first": "1-1",
        "n": 3,
    }
    with pytest.raises(CommandError, match="smaller"):
        r("XADD", "x", "5-0", "f", "v")
    with pytest.raises(CommandError):
        r("XADD", "y", "0-0", "f", "v")
    with pytest.raises(UnsupportedCommand, match="XADD"):
        r("XADD", "x", "*", "f", "v")
    with pytest.raises(CommandError):
        r("XADD", "x", "9-1", "f")


def test_xadd_nomkstream_and_exact_trimming(r: Redis) -> None:
    r("XADD", "x", "NOMKSTREAM", "1-1", "f", "v")
    assert r.keys() == []
    for i in range(1, 5):
        r("XADD", "x", "MAXLEN", "=", 2, f"{i}-0", "n", i)
    assert firsts(r, "x") == ["3-0", "4-0"]
    assert stream_state(r, "x") == {
        "last": "4-0",
        "added": 4,
        "maxdel": "0-0",
        "first": "3-0",
        "n": 2,
    }
    r("XADD", "x", "MINID", "=", "5", "LIMIT", 100, "6-0", "f", "v")  # LIMIT: ignored
    assert firsts(r, "x") == ["6-0"]
    r("XADD", "x", "MAXLEN", 0, "7-0", "f", "v")
    assert r.value("x") == []
    assert stream_state(r, "x") == {
        "last": "7-0",
        "added": 6,
        "maxdel": "0-0",
        "first": "0-0",
        "n": 0,
    }
    with pytest.raises(UnsupportedCommand, match="approximate"):
        r("XADD", "x", "MAXLEN", "~", 5, "8-0", "f", "v")


def test_xdel_keeps_an_empty_stream(r: Redis) -> None:
    for i in range(1, 4):
        r("XADD", "x", f"{i}-0", "f", i)
    r("XDEL", "x", "1-0", "9-9")
    assert stream_state(r, "x") == {
        "last": "3-0",
        "added": 3,
        "maxdel": "1-0",
        "first": "2-0",
        "n": 2,
    }
    r("XDEL", "x", "3", "2-0")
    assert r.read("x") == ("stream", [], -1)
    assert stream_state(r, "x") == {
        "last": "3-0",
        "added": 3,
        "maxdel": "3-0",
        "first": "0-0",
        "n": 0,
    }
    with pytest.raises(CommandError):
        r("XDEL", "x", "+")


def test_xtrim_and_xsetid(r: Redis) -> None:
    for i in range(1, 6):
        r("XADD", "x", f"{i}-0", "f", i)
    r("XTRIM", "x", "MINID", 3)
    assert firsts(r, "x") == ["3-0", "4-0", "5-0"]
    r("XTRIM", "x", "MAXLEN", "=", 1, "LIMIT", 0)
    assert stream_state(r, "x")["first"] == "5-0"
    with pytest.raises(UnsupportedCommand):
        r("XTRIM", "x", "MAXLEN", "~", 1)
    with pytest.raises(CommandError):
        r("XTRIM", "x", "LIMIT", 1)
    r("XSETID", "x", "10-0", "ENTRIESADDED", 50, "MAXDELETEDID", "9-0")
    assert stream_state(r, "x") == {
        "last": "10-0",
        "added": 50,
        "maxdel": "9-0",
        "first": "5-0",
        "n": 1,
    }
    r("XADD", "x", "10-*", "f", "v")
    assert r.value("x") == [("5-0", [(b"f", b"5")]), ("10-1", [(b"f", b"v")])]
    with pytest.raises(CommandError):
        r("XSETID", "missing", "1-0")


def test_consumer_groups_are_ignored_but_mkstream_creates_the_stream(r: Redis) -> None:
    r("XGROUP", "CREATE", "x", "g", "$", "MKSTREAM")
    assert r.read("x") == ("stream", [], -1)
    r("XADD", "x", "1-0", "f", "v")
    r("XGROUP", "CREATE", "x", "g2", "0")
    r("XGROUP", "SETID", "x", "g", "0")
    r("XREADGROUP", "GROUP", "g", "c", "STREAMS", "x", ">")
    r("XACK", "x", "g", "1-0")
    r("XCLAIM", "x", "g", "c", 0, "1-0")
    r("XAUTOCLAIM", "x", "g", "c", 0, "0")
    r("XGROUP", "CREATE", "nothing", "g", "$")
    assert r.value("x") == [("1-0", [(b"f", b"v")])]
    assert r.keys() == [b"x"]


# --- dispatch ---------------------------------------------------------------------------


def test_an_unknown_command_is_unsupported_and_named(r: Redis) -> None:
    with pytest.raises(UnsupportedCommand, match="FROBNICATE") as info:
        r("frobnicate", "k")
    assert info.value.name == "FROBNICATE"
    with pytest.raises(UnsupportedCommand, match="EVAL"):
        r("EVAL", "return 1", 0)
    with pytest.raises(CommandError):
        apply_command(r.view, r.ctx, [])


@pytest.mark.parametrize(
    "command",
    [
        ["PING"],
        ["REPLCONF", "GETACK", "*"],
        ["MULTI"],
        ["EXEC"],
        ["PUBLISH", "ch", "m"],
        ["SPUBLISH", "ch", "m"],
        ["FUNCTION", "FLUSH"],
        ["SCRIPT", "FLUSH"],
    ],
)
def test_ignored_commands_change_nothing(r: Redis, command: list[str]) -> None:
    r(*command)
    assert r.view.data == {}


def test_the_stops_are_replication_stops() -> None:
    assert issubclass(UnsupportedCommand, ReplicationStop)
    assert issubclass(WrongTypeStop, ReplicationStop)
    assert issubclass(CommandError, ReplicationStop)


def test_ids_are_allocated_per_offset_deterministically(r: Redis) -> None:
    r.ctx.offset = 7
    apply_command(r.view, r.ctx, [b"SADD", b"a", b"m"])
    apply_command(r.view, r.ctx, [b"SADD", b"b", b"m"])  # the same offset: a MULTI block
    r.ctx.offset = 8
    apply_command(r.view, r.ctx, [b"SADD", b"c", b"m"])
    assert [r.meta(k).obj for k in "abc"] == ["c7.0", "c7.1", "c8.0"]
    again = Redis()
    again.ctx.offset = 7
    apply_command(again.view, again.ctx, [b"SADD", b"a", b"m"])
    assert again.meta("a").obj == "c7.0"


def test_a_wrong_type_names_the_command_and_key(r: Redis) -> None:
    r("SADD", "s", "m")
    with pytest.raises(WrongTypeStop) as info:
        r("LPUSH", "s", "x")
    assert (info.value.command, info.value.key, info.value.found) == ("LPUSH", b"s", "set")


# --- numbers -------------------------------------------------------------------------


def test_parse_int_is_string2ll() -> None:
    assert parse_int(b"-9223372036854775808") == -(2**63)
    assert parse_int(b"0") == 0
    for bad in (b"", b"01", b"+1", b"-0", b" 1", b"1 ", b"9223372036854775808", b"1e3"):
        with pytest.raises(NumberError):
            parse_int(bad)


def test_parse_double_is_strict_strtod() -> None:
    assert parse_double(b"1.5e3") == 1500.0
    assert parse_double(b"-inf") == -INF
    assert parse_double(b"+Infinity") == INF
    assert parse_double(b"0x1.8p1") == 3.0
    assert parse_double(b".5") == 0.5
    for bad in (b"nan", b"", b" 1", b"1e400", b"1e-400", b"1_0", b"0x"):
        with pytest.raises(NumberError):
            parse_double(bad)


def test_long_double_arithmetic() -> None:
    assert parse_long_double(b"0.1") != Fraction(1, 10)  # rounded to 64 bits
    assert format_long_double(parse_long_double(b"0.1")) == b"0.1"
    assert format_long_double(Fraction(-1, 10**20)) == b"0"
    assert incr_long_double(b"1e19", b"1") == b"10000000000000000001"  # 64-bit significand
    with pytest.raises(NumberError):
        incr_long_double(b"nan", b"1")
