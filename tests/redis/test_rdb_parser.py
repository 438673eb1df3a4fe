"""The RDB parser against a real redis-server 7.0 (RDB 10).

A module fixture fills a server with every type in every encoding Redis 7.0
writes (small and big so both the compact and the full encodings appear), in
three databases, with expiries and a function library, SAVEs it and parses
``dump.rdb``. The tests then compare each parsed key with what Redis answers,
and check checksum verification, streaming and payload-length handling.

Further down: payloads built with :mod:`tests.redis.rdb_fixtures` for what
Redis 7.0 does not write (RDB 11 types, ziplists, old opcodes, corruptions),
and unit tests of the blob decoders (LZF, intset, listpack, ziplist, CRC-64).
"""

from __future__ import annotations

import io
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from replication.redis.rdb import (
    Aux,
    End,
    Event,
    Function,
    KeyValue,
    RdbError,
    RdbLimitError,
    RdbParser,
    SelectDb,
    Stream,
    StreamId,
    parse_rdb,
)
from replication.redis.rdb import reader as reader_module
from replication.redis.rdb.crc64 import crc64
from replication.redis.rdb.intset import decode_intset
from replication.redis.rdb.listpack import decode_listpack, listpack_strings
from replication.redis.rdb.lzf import lzf_decompress
from replication.redis.rdb.stream import decode_stream_node
from replication.redis.rdb.ziplist import decode_ziplist
from replication.redis.rdb.zipmap import decode_zipmap
from tests.redis import rdb_fixtures as fx
from tests.redis.conftest import RedisServer, redis_server_binary
from tests.redis.resp_client import RespClient

PLAIN_ELEMENT = 20_000  # bytes; above the packed threshold set below
FUTURE_MS = int(time.time() * 1000) + 3_600_000


@dataclass
class Dump:
    """A saved dataset: the server, the RDB file, the parse result."""

    client: RespClient
    path: Path
    data: bytes = field(repr=False)
    events: list[Event] = field(repr=False)
    lzf_calls: int
    plain_elements: list[bytes] = field(repr=False)

    def keys(self) -> dict[tuple[int, bytes], KeyValue]:
        return {(e.db, e.key): e for e in self.events if isinstance(e, KeyValue)}


def _fill_db0(c: RespClient, rng: random.Random) -> list[bytes]:
    """Every type and encoding in db 0; returns the plain-node elements."""
    rand = rng.randbytes
    c.pipeline(
        [
            ("SET", "str:raw", "hello-rkv"),
            ("SET", "str:int8", "100"),
            ("SET", "str:int16", "-12345"),
            ("SET", "str:int32", "2000000000"),
            ("SET", "str:int64", "12345678901234"),
            ("SET", "str:leading-zero", "007"),
            ("SET", "str:empty", ""),
            ("SET", "str:binary", b"\x00\xff\r\n\xc3binary"),
            ("SET", "str:lzf", b"compress me " * 500),
            ("SET", "str:random-100k", rand(100_000)),
            ("RPUSH", "list:small", "a", "b", "1", "-5", "100000", str(1 << 40), "x" * 100),
            ("RPUSH", "list:big", *[rand(rng.randint(1, 40)) for _ in range(3000)]),
            ("RPUSH", "list:big", *[b"repeat-%d" % (i % 7) for i in range(3000)]),
            ("SADD", "set:intset", *range(-50, 50), 1 << 40),
            ("SADD", "set:big-ints", *range(0, 3000, 3)),
            ("SADD", "set:strings", *[b"member-%d" % i for i in range(1000)]),
            ("SADD", "set:small-strings", "x", "y", "z"),
            ("HSET", "hash:small", "name", "rkv", "count", "3", "neg", "-7"),
            ("HSET", "hash:big", *[x for i in range(1000) for x in (b"f%d" % i, b"v%d" % i)]),
            ("HSET", "hash:big-value", "small", "1", "big", rand(100_000)),
            ("ZADD", "zset:small", 1.5, "a", "inf", "b", "-inf", "c", -0.25, "d", 3, "e"),
            ("ZADD", "zset:big", *[x for i in range(500) for x in (rng.uniform(-1e6, 1e6), i)]),
            ("ZADD", "zset:big", "inf", "top", "-inf", "bottom", 0, "zero", 0, "zero2"),
        ]
    )
    plain = [rand(PLAIN_ELEMENT) for _ in range(3)]
    c.execute("RPUSH", "list:plain", "head", plain[0], "middle", plain[1], plain[2], "tail")
    # Streams: one node and several nodes, same-fields and other entries,
    # deletions, two groups with pending entries, an empty stream.
    for i in range(250):
        fields: list[Any] = ["temp", i, "unit", "C"] if i % 5 else ["other", i, "extra", "x"]
        c.execute("XADD", "stream:big", f"{1000 + i // 3}-{i % 3}", *fields)
    c.execute("XDEL", "stream:big", "1000-1", "1010-0", "1050-2", "1083-0")
    c.execute("XGROUP", "CREATE", "stream:big", "g1", "0")
    c.execute("XREADGROUP", "GROUP", "g1", "alice", "COUNT", "5", "STREAMS", "stream:big", ">")
    c.execute("XREADGROUP", "GROUP", "g1", "bob", "COUNT", "3", "STREAMS", "stream:big", ">")
    c.execute("XACK", "stream:big", "g1", "1000-0")
    c.execute("XGROUP", "CREATE", "stream:big", "g2", "$")
    c.execute("XGROUP", "CREATECONSUMER", "stream:big", "g2", "carol")
    c.execute("XADD", "stream:small", "*", "k", "v")
    c.execute("XADD", "stream:small", "*", "k", "v2", "dup", "1", "dup", "2")
    c.execute("XGROUP", "CREATE", "stream:empty", "g", "$", "MKSTREAM")
    for key in ("str:raw", "hash:small", "list:small", "stream:small"):
        c.execute("PEXPIREAT", key, FUTURE_MS + len(key))
    return plain


def _fill_other_dbs(c: RespClient) -> None:
    c.execute("SELECT", 1)
    c.pipeline(
        [
            ("SET", "str:raw", "same name, db 1"),
            ("HSET", "hash:small", "a", "1"),
            ("PEXPIREAT", "hash:small", FUTURE_MS + 99),
        ]
    )
    c.execute("SELECT", 5)
    c.pipeline([("SET", "only-in-5", "five"), ("SADD", "set:intset", 5, 55, 555)])
    c.execute("SELECT", 0)


LIBRARY = (
    "#!lua name=rkvlib\n"
    "redis.register_function('rkv_echo', function(keys, args) return args[1] end)\n"
)


@pytest.fixture(scope="module")
def dump(redis_server_factory: Any) -> Iterator[Dump]:
    server = redis_server_factory()
    client = server.client()
    client.execute("CONFIG", "SET", "rdbcompression", "yes")
    client.execute("CONFIG", "SET", "list-compress-depth", "1")  # LZF list nodes
    client.execute("DEBUG", "QUICKLIST-PACKED-THRESHOLD", PLAIN_ELEMENT // 2)
    plain = _fill_db0(client, random.Random(20240))
    _fill_other_dbs(client)
    client.execute("FUNCTION", "LOAD", LIBRARY)
    assert client.execute("SAVE") == "OK"
    path = server.dir / "dump.rdb"
    data = path.read_bytes()
    calls = 0

    def counting(blob: bytes, expected: int) -> bytes:
        nonlocal calls
        calls += 1
        return lzf_decompress(blob, expected)

    with pytest.MonkeyPatch.context() as patch, path.open("rb") as f:
        patch.setattr(reader_module, "lzf_decompress", counting)
        events = list(RdbParser(f, len(data)))
    yield Dump(client, path, data, events, calls, plain)
    client.close()


# -- comparing with Redis ------------------------------------------------------


def _as_map(flat: list[Any]) -> dict[str, Any]:
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


def _id(text: bytes) -> str:
    return text.decode()


def _redis_value(c: RespClient, kv: KeyValue) -> Any:
    key = kv.key
    if kv.type_name == "string":
        return c.execute("GET", key)
    if kv.type_name == "list":
        return c.execute("LRANGE", key, 0, -1)
    if kv.type_name == "set":
        return set(c.execute("SMEMBERS", key))
    if kv.type_name == "hash":
        flat = c.execute("HGETALL", key)
        return dict(zip(flat[::2], flat[1::2], strict=True))
    if kv.type_name == "zset":
        flat = c.execute("ZRANGE", key, 0, -1, "WITHSCORES")
        return [(m, float(s)) for m, s in zip(flat[::2], flat[1::2], strict=True)]
    raise AssertionError(kv.type_name)


def _compare_stream(c: RespClient, key: bytes, stream: Stream) -> None:
    entries = c.execute("XRANGE", key, "-", "+")
    assert [str(e.id) for e in stream.entries] == [_id(i) for i, _ in entries]
    for entry, (_, flat) in zip(stream.entries, entries, strict=True):
        assert entry.fields == list(zip(flat[::2], flat[1::2], strict=True))
    info = _as_map(c.execute("XINFO", "STREAM", key, "FULL"))
    assert stream.length == info["length"] == len(stream.entries)
    assert str(stream.last_id) == _id(info["last-generated-id"])
    assert str(stream.max_deleted_id) == _id(info["max-deleted-entry-id"])
    assert str(stream.first_id) == _id(info["recorded-first-entry-id"])
    assert stream.entries_added == info["entries-added"]
    groups = [_as_map(g) for g in info["groups"]]
    assert [g.name for g in stream.groups] == [g["name"] for g in groups]
    for group, expected in zip(stream.groups, groups, strict=True):
        assert str(group.last_delivered_id) == _id(expected["last-delivered-id"])
        assert group.entries_read == expected["entries-read"]
        assert [
            [str(p.id).encode(), p.consumer, p.delivery_time_ms, p.delivery_count]
            for p in group.pel
        ] == expected["pending"]
        consumers = [_as_map(x) for x in expected["consumers"]]
        assert [x.name for x in group.consumers] == [x["name"] for x in consumers]
        for consumer, want in zip(group.consumers, consumers, strict=True):
            assert consumer.seen_time_ms == want["seen-time"]
            assert consumer.active_time_ms is None  # not stored before RDB 11
            assert [str(i).encode() for i in consumer.pending] == [p[0] for p in want["pending"]]


def test_every_key_matches_redis(dump: Dump) -> None:
    c = dump.client
    keys = dump.keys()
    for db in (0, 1, 5):
        c.execute("SELECT", db)
        assert {k for d, k in keys if d == db} == set(c.execute("KEYS", "*"))
        for (kv_db, key), kv in keys.items():
            if kv_db != db:
                continue
            assert c.execute("TYPE", key) == kv.type_name, key
            if isinstance(kv.value, Stream):
                _compare_stream(c, key, kv.value)
            elif kv.type_name == "zset":
                assert isinstance(kv.value, list)
                parsed = sorted(kv.value, key=lambda pair: (pair[1], pair[0]))
                assert parsed == _redis_value(c, kv), key
            else:
                assert kv.value == _redis_value(c, kv), key
    c.execute("SELECT", 0)


def test_expiries_match_pexpiretime(dump: Dump) -> None:
    c = dump.client
    expiring = {}
    for (db, key), kv in dump.keys().items():
        c.execute("SELECT", db)
        assert (kv.expire_ms or -1) == c.execute("PEXPIRETIME", key), key
        if kv.expire_ms is not None:
            expiring[(db, key)] = kv.expire_ms
            remaining = c.execute("PTTL", key)
            assert abs((kv.expire_ms - time.time() * 1000) - remaining) < 5_000
    c.execute("SELECT", 0)
    assert set(expiring) == {
        (0, b"str:raw"),
        (0, b"hash:small"),
        (0, b"list:small"),
        (0, b"stream:small"),
        (1, b"hash:small"),
    }


def test_databases_and_header(dump: Dump) -> None:
    selects = [e.db for e in dump.events if isinstance(e, SelectDb)]
    assert selects == [0, 1, 5]
    aux = {e.name: e.value for e in dump.events if isinstance(e, Aux)}
    info = dump.client.execute("INFO", "server").decode()
    assert f"redis_version:{aux[b'redis-ver'].decode()}" in info
    assert aux[b"redis-bits"] == b"64"
    assert dump.events[-1] == End(True, int.from_bytes(dump.data[-8:], "little"))
    assert sum(isinstance(e, End) for e in dump.events) == 1


def test_function_library(dump: Dump) -> None:
    functions = [e.code for e in dump.events if isinstance(e, Function)]
    libraries = dump.client.execute("FUNCTION", "LIST", "WITHCODE")
    assert functions == [_as_map(lib)["library_code"] for lib in libraries]
    assert functions == [LIBRARY.encode()]


def test_every_redis_7_0_encoding_is_exercised(dump: Dump) -> None:
    encodings = {kv.key: kv.encoding for kv in dump.keys().values() if kv.db == 0}
    assert encodings[b"hash:small"] == "hash_listpack"
    assert encodings[b"hash:big"] == encodings[b"hash:big-value"] == "hash"
    assert encodings[b"set:intset"] == "set_intset"
    assert encodings[b"set:big-ints"] == encodings[b"set:strings"] == "set"
    assert encodings[b"zset:small"] == "zset_listpack"
    assert encodings[b"zset:big"] == "zset_2"
    assert encodings[b"list:big"] == encodings[b"list:plain"] == "list_quicklist_2"
    assert encodings[b"stream:big"] == "stream_listpacks_2"
    # Integer-encoded strings: key then 0xC0 (int8), 0xC1 (int16), 0xC2 (int32).
    assert b"\x00\x08str:int8\xc0\x64" in dump.data
    assert b"\x00\x09str:int16\xc1" + (-12345).to_bytes(2, "little", signed=True) in dump.data
    assert b"\x00\x09str:int32\xc2" + (2000000000).to_bytes(4, "little") in dump.data
    # LZF: the compressible string plus the compressed inner list nodes.
    assert dump.lzf_calls > 3
    # Plain quicklist nodes: container 1, then the raw 20000-byte element.
    for element in dump.plain_elements:
        assert b"\x01\x80" + len(element).to_bytes(4, "big") + element in dump.data


def test_checksum_is_verified(dump: Dump) -> None:
    value_at = dump.data.index(b"hello-rkv")
    flipped = bytearray(dump.data)
    flipped[value_at] ^= 0x20  # "Hello-rkv": still a valid RDB, wrong CRC
    with pytest.raises(RdbError, match="checksum mismatch") as caught:
        list(parse_rdb(io.BytesIO(bytes(flipped)), len(flipped)))
    assert caught.value.position == len(dump.data) - 9  # the EOF opcode
    # The same bytes parse with verification off, and show the flip.
    events = list(parse_rdb(io.BytesIO(bytes(flipped)), verify_checksum=False))
    assert any(isinstance(e, KeyValue) and e.value == b"Hello-rkv" for e in events)
    assert events[-1] == End(None, int.from_bytes(dump.data[-8:], "little"))
    stored = bytearray(dump.data)
    stored[-3] ^= 1
    with pytest.raises(RdbError, match="checksum"):
        list(parse_rdb(io.BytesIO(bytes(stored))))


class _Chunky:
    """A stream that returns at most ``chunk`` bytes per read and records reads."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self._data = io.BytesIO(data)
        self.chunk = chunk
        self.consumed = 0
        self.largest = 0

    def read(self, size: int = -1) -> bytes:
        data = self._data.read(min(size, self.chunk) if size >= 0 else self.chunk)
        self.consumed += len(data)
        self.largest = max(self.largest, len(data))
        return data


def test_streams_the_payload_in_bounded_reads(dump: Dump) -> None:
    assert len(dump.data) > 300_000
    stream = _Chunky(dump.data, chunk=1 << 30)
    parser = RdbParser(stream, len(dump.data))
    seen_first_key = False
    for event in parser:
        if isinstance(event, KeyValue) and not seen_first_key:
            seen_first_key = True
            assert stream.consumed < len(dump.data) // 2
            assert parser.bytes_consumed < stream.consumed
    assert stream.largest <= 1 << 20
    assert parser.bytes_consumed == stream.consumed == len(dump.data)


def test_diskless_form_gives_the_same_events(dump: Dump) -> None:
    # Unknown length, tiny reads, and bytes after the payload on the stream.
    stream = _Chunky(dump.data + b"+after", chunk=7)
    parser = RdbParser(stream)
    assert list(parser) == dump.events
    assert parser.bytes_consumed == len(dump.data)
    assert parser.unconsumed() + stream._data.read() == b"+after"


def test_known_length_never_reads_past_it(dump: Dump) -> None:
    stream = io.BytesIO(dump.data + b"*1\r\n$4\r\nPING\r\n")
    assert list(RdbParser(stream, len(dump.data))) == dump.events
    assert stream.read() == b"*1\r\n$4\r\nPING\r\n"
    # Told late (after the header), with read-ahead already done.
    stream = io.BytesIO(dump.data + b"junk")
    parser = RdbParser(stream)
    events = iter(parser)
    first = next(events)
    parser.set_total_length(len(dump.data))
    assert [first, *events] == dump.events
    assert parser.unconsumed() + stream.read() == b"junk"


def test_payload_length_mismatches_are_errors(dump: Dump) -> None:
    with pytest.raises(RdbError, match="follow the end"):
        list(parse_rdb(io.BytesIO(dump.data + b"xx"), len(dump.data) + 2))
    for cut in (5, 9, 100, len(dump.data) // 2, len(dump.data) - 4):
        with pytest.raises(RdbError, match=r"end of|bytes left"):
            list(parse_rdb(io.BytesIO(dump.data[:cut]), cut))
        with pytest.raises(RdbError, match="end of"):
            list(parse_rdb(io.BytesIO(dump.data[:cut])))


def test_checksum_and_compression_off(redis_server_factory: Any) -> None:
    server = redis_server_factory("--rdbchecksum", "no", "--rdbcompression", "no")
    with server.client() as c:
        c.pipeline([("SET", "a", "x" * 1000), ("HSET", "h", "f", "v"), ("SET", "n", "42")])
        assert c.execute("SAVE") == "OK"
    data = (server.dir / "dump.rdb").read_bytes()
    assert data[-8:] == bytes(8)
    events = _parse(data)
    assert events[-1] == End(None, 0)
    values = {e.key: e.value for e in events if isinstance(e, KeyValue)}
    assert values == {b"a": b"x" * 1000, b"h": {b"f": b"v"}, b"n": b"42"}
    assert b"x" * 1000 in data  # stored uncompressed


def test_empty_dataset(redis_server: RedisServer) -> None:
    with redis_server.client() as c:
        assert c.execute("SAVE") == "OK"
    data = (redis_server.dir / "dump.rdb").read_bytes()
    events = _parse(data)
    assert {type(e) for e in events} == {Aux, End}
    assert events[-1] == End(True, int.from_bytes(data[-8:], "little"))


def test_missing_redis_server_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RKV_REDIS_SERVER", "/nonexistent/redis-server")
    with pytest.raises(pytest.fail.Exception, match="redis-server not found"):
        redis_server_binary()


# -- hand-built payloads: what Redis 7.0 does not write ------------------------


def _parse(payload: bytes, **kwargs: Any) -> list[Event]:
    return list(RdbParser(io.BytesIO(payload), len(payload), **kwargs))


def _only_key(payload: bytes) -> KeyValue:
    keys = [e for e in _parse(payload) if isinstance(e, KeyValue)]
    assert len(keys) == 1
    return keys[0]


def test_rdb11_set_listpack() -> None:
    members: list[fx.Item] = [b"a", 1, -5, 1000, b"x" * 100, 70000, -(1 << 40), b"\x00\xff"]
    w = fx.RdbWriter(11).aux(b"redis-ver", b"7.2.4").select_db(0).resize_db(1, 0)
    kv = _only_key(w.key(20, b"set:lp", fx.string(fx.listpack(members))).finish())
    assert (kv.type_name, kv.encoding) == ("set", "set_listpack")
    assert kv.value == {m if isinstance(m, bytes) else str(m).encode() for m in members}


def test_rdb11_stream_listpacks_3() -> None:
    kv = _only_key(fx.rdb11_stream_payload())
    assert (kv.type_name, kv.encoding) == ("stream", "stream_listpacks_3")
    s = kv.value
    assert isinstance(s, Stream)
    assert [(str(e.id), e.fields) for e in s.entries] == [
        ("100-0", [(b"temp", b"20"), (b"unit", b"C")]),
        ("101-0", [(b"other", b"x"), (b"other", b"y"), (b"n", b"12345")]),
        ("200-5", [(b"f", b"a")]),
    ]
    assert (s.length, str(s.last_id), str(s.first_id)) == (3, "200-5", "100-0")
    assert (str(s.max_deleted_id), s.entries_added) == ("100-1", 4)
    g1, g2 = s.groups
    assert (g1.name, str(g1.last_delivered_id), g1.entries_read) == (b"g1", "200-5", 3)
    assert [(str(p.id), p.delivery_time_ms, p.delivery_count, p.consumer) for p in g1.pel] == [
        ("100-0", 1700000000000, 2, b"bob"),
        ("200-5", 1700000000500, 1, b"alice"),
    ]
    assert [(c.name, c.seen_time_ms, c.active_time_ms) for c in g1.consumers] == [
        (b"alice", 1700000001000, 1700000000900),
        (b"bob", 1700000002000, 1700000001900),
        (b"idle", 1700000003000, -1),
    ]
    assert [[str(i) for i in c.pending] for c in g1.consumers] == [["200-5"], ["100-0"], []]
    assert (g2.name, g2.entries_read, g2.pel, g2.consumers) == (b"g2", None, [], [])


def test_stream_type_15_derives_the_missing_fields() -> None:
    node = fx.stream_node(
        (5, 1), [b"a"], [((5, 1), [(b"a", b"1")], True), ((6, 0), [(b"a", b"2")], False)]
    )
    group = fx.stream_group(b"g", (6, 0), 1, pel=[((6, 0), 42, 1)], consumers=[(b"c", 43, 0, [])])
    value = fx.stream_value([((5, 1), node)], 1, (6, 0), 1, groups=[group])
    kv = _only_key(fx.RdbWriter(9).key(15, b"old", value).finish())
    s = kv.value
    assert isinstance(s, Stream) and kv.encoding == "stream_listpacks"
    assert [str(e.id) for e in s.entries] == ["6-0"]
    assert (str(s.first_id), str(s.max_deleted_id), s.entries_added) == ("6-0", "0-0", 1)
    (g,) = s.groups
    assert g.entries_read is None and g.consumers[0].active_time_ms is None
    assert g.pel[0].consumer is None  # no consumer claims it


def test_redis6_ziplist_encodings() -> None:
    w = fx.RdbWriter(9).select_db(0)
    w.key(14, b"list:ql", fx.length(2) + fx.string(fx.ziplist([b"a", 7, -300]))
          + fx.lzf_string(fx.ziplist([b"b" * 300, 1 << 40])))  # fmt: skip
    w.key(13, b"hash:zl", fx.string(fx.ziplist([b"f", b"v", b"n", 12, b"big", 70000])))
    w.key(12, b"zset:zl", fx.string(fx.ziplist([b"a", b"1.5", b"b", 3, b"c", b"-inf"])))
    w.key(10, b"list:zl", fx.string(fx.ziplist([b"x", 0, 12, 13, -1])))
    keys = {e.key: e for e in _parse(w.finish()) if isinstance(e, KeyValue)}
    assert keys[b"list:ql"].value == [b"a", b"7", b"-300", b"b" * 300, str(1 << 40).encode()]
    assert keys[b"hash:zl"].value == {b"f": b"v", b"n": b"12", b"big": b"70000"}
    assert keys[b"zset:zl"].value == [(b"a", 1.5), (b"b", 3.0), (b"c", float("-inf"))]
    assert keys[b"list:zl"].value == [b"x", b"0", b"12", b"13", b"-1"]
    assert [keys[k].encoding for k in (b"list:ql", b"hash:zl", b"zset:zl", b"list:zl")] == [
        "list_quicklist", "hash_ziplist", "zset_ziplist", "list_ziplist"
    ]  # fmt: skip


def test_old_types_and_opcodes() -> None:
    w = fx.RdbWriter(6).aux(b"redis-ver", b"3.2.0").select_db(2)
    w.expire_seconds(1_700_000_000).idle(77).key(1, b"list", fx.length(2) + fx.string(b"a")
                                                 + fx.int_string(-2))  # fmt: skip
    w.freq(5).key(2, b"set", fx.length(2) + fx.string(b"m") + fx.int_string(300))
    w.expire_ms(1_700_000_000_123).key(
        3, b"zset", fx.length(3) + fx.string(b"a") + fx.text_double(2.5) + fx.string(b"b")
        + fx.text_double(float("inf")) + fx.string(b"c") + fx.text_double(float("nan"))
    )  # fmt: skip
    w.key(4, b"hash", fx.length(1) + fx.string(b"f") + fx.lzf_string(b"abc" * 100))
    w.key(0, b"int", fx.int_string(-(1 << 31)))
    zipmap = fx.zipmap([(b"f", b"v"), (b"long", b"L" * 300), (b"e", b"")], free=2)
    w.key(9, b"zipmap", fx.string(zipmap))
    events = _parse(w.finish())
    keys = {e.key: e for e in events if isinstance(e, KeyValue)}
    assert keys[b"list"].value == [b"a", b"-2"] and keys[b"list"].expire_ms == 1_700_000_000_000
    assert keys[b"set"].value == {b"m", b"300"} and keys[b"set"].expire_ms is None
    zset = keys[b"zset"].value
    assert isinstance(zset, list) and zset[:2] == [(b"a", 2.5), (b"b", float("inf"))]
    assert zset[2][1] != zset[2][1]  # NaN
    assert keys[b"zset"].expire_ms == 1_700_000_000_123
    assert keys[b"hash"].value == {b"f": b"abc" * 100}
    assert keys[b"int"].value == str(-(1 << 31)).encode()
    assert keys[b"zipmap"].value == {b"f": b"v", b"long": b"L" * 300, b"e": b""}
    assert {e.db for e in keys.values()} == {2}


def test_quicklist2_plain_packed_and_compressed_nodes() -> None:
    nodes = (
        fx.length(4)
        + fx.length(2) + fx.string(fx.listpack([b"a", 1]))
        + fx.length(1) + fx.string(b"P" * 50)
        + fx.length(2) + fx.lzf_string(fx.listpack([b"zz"] * 50))
        + fx.length(1) + fx.lzf_string(b"Q" * 10_000)
    )  # fmt: skip
    kv = _only_key(fx.RdbWriter(10).key(18, b"l", nodes).finish())
    assert kv.value == [b"a", b"1", b"P" * 50, *[b"zz"] * 50, b"Q" * 10_000]
    bad = fx.length(1) + fx.length(3) + fx.string(b"x")
    with pytest.raises(RdbError, match="container type 3"):
        _parse(fx.RdbWriter(10).key(18, b"l", bad).finish())


def test_checksum_zero_and_absent() -> None:
    payload = fx.RdbWriter(10).key(0, b"k", fx.string(b"v")).finish(checksum=False)
    assert _parse(payload)[-1] == End(None, 0)
    old = fx.RdbWriter(4).key(0, b"k", fx.string(b"v")).raw(b"\xff").data
    assert _parse(bytes(old))[-1] == End(None, None)


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (b"REDIS0012", "unsupported RDB version 12"),
        (b"REDIS0000", "unsupported RDB version 0"),
        (b"REDIS00x1", "invalid RDB version"),
        (b"RDB000010", "not an RDB payload"),
    ],
)
def test_refused_headers(header: bytes, message: str) -> None:
    with pytest.raises(RdbError, match=message):
        _parse(header + b"\xff" + bytes(8))


def _module_id(name: str, version: int) -> int:
    charset = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    value = 0
    for char in name:
        value = (value << 6) | charset.index(char)
    return (value << 10) | version


def test_unknown_and_unsupported_records() -> None:
    base = fx.RdbWriter(10).aux(b"a", b"b")
    at = len(base.data)
    cases = [
        (b"\x16" + fx.string(b"k"), f"unknown RDB opcode or value type 0x16 \\(at byte {at}\\)"),
        (b"\xf4\x00", f"0xf4 \\(at byte {at}\\)"),
        (b"\x07" + fx.string(b"k") + fx.length(_module_id("ReJSON-RL", 3)), "'ReJSON-RL'.*3"),
        (b"\x06" + fx.string(b"k") + fx.length(_module_id("graphdata", 1)), "'graphdata'"),
        (b"\xf7" + fx.length(_module_id("search-ix", 2)), "auxiliary data.*'search-ix'"),
        (b"\xf6" + fx.string(b"f"), "0xf6 of the Redis 7.0 release candidates"),
        (b"\x09" + fx.string(b"k") + fx.string(b"\x05\xff"), "zipmap header says 5 pairs"),
    ]
    for record, message in cases:
        payload = fx.RdbWriter(10).aux(b"a", b"b").raw(record).finish()
        with pytest.raises(RdbError, match=message):
            _parse(payload)


def test_absurd_lengths_are_refused_before_reading() -> None:
    huge = b"\x81" + (1 << 40).to_bytes(8, "big")
    payload = fx.RdbWriter(10).raw(b"\x00" + fx.string(b"k") + huge + b"tail").finish()
    with pytest.raises(RdbError, match="absurd string length"):
        _parse(payload)
    with pytest.raises(RdbLimitError, match="a string of 1099511627776 bytes: more than"):
        list(parse_rdb(io.BytesIO(payload)))  # no declared length: the memory budget
    count = b"\x80" + (1 << 20).to_bytes(4, "big")
    payload = fx.RdbWriter(10).raw(b"\x02" + fx.string(b"k") + count + b"x").finish()
    with pytest.raises(RdbError, match="absurd set member count"):
        _parse(payload)
    lzf = b"\xc3" + fx.length(4) + b"\x80" + (1 << 28).to_bytes(4, "big") + b"\x00abc"
    with pytest.raises(RdbError, match="cannot expand"):
        _parse(fx.RdbWriter(10).raw(b"\x00" + fx.string(b"k") + lzf).finish())


def _diskless(payload: bytes, max_value_bytes: int) -> list[Event]:
    """Parse without the payload's length, as a diskless transfer is."""
    return list(parse_rdb(io.BytesIO(payload), max_value_bytes=max_value_bytes))


def test_a_record_that_would_take_more_memory_than_max_value_bytes_is_refused() -> None:
    mib = 1024 * 1024
    # An announced count is charged whole before any element is read: a diskless
    # payload (no length to check it against) cannot make the parser loop for it.
    count = b"\x80" + (1 << 30).to_bytes(4, "big")
    payload = fx.RdbWriter(10).raw(b"\x02" + fx.string(b"k") + count).finish()
    with pytest.raises(RdbLimitError, match="1073741824 set members: more than the"):
        _diskless(payload, 256 * mib)
    # An LZF string is charged its announced size before it is decompressed.
    lzf = b"\xc3" + fx.length(4_000_000) + fx.length(300 * mib)
    payload = fx.RdbWriter(10).raw(b"\x00" + fx.string(b"k") + lzf).finish()
    with pytest.raises(RdbLimitError, match="compressed string of 314572800 bytes"):
        _diskless(payload, 256 * mib)
    # The decompression bomb: a list of LZF-compressed listpack nodes, 23 KB each on
    # the wire, a million elements each once decoded. Decoding stops at the budget.
    nodes = 40
    value = fx.length(nodes) + (fx.length(2) + fx.listpack_bomb(1_000_000)) * nodes
    bomb = fx.RdbWriter(10).select_db(0).key(18, b"bomb", value).finish()
    assert len(bomb) < 1024 * 1024
    with pytest.raises(RdbLimitError) as refused:
        _diskless(bomb, 8 * mib)
    assert "list_quicklist_2 value of key b'bomb': quicklist listpack node" in str(refused.value)
    assert f"more than the {8 * mib} bytes one record may take" in str(refused.value)
    # The same shape within the budget loads, and the budget is per record.
    small = fx.length(2) + (fx.length(2) + fx.listpack_bomb(1000)) * 2
    events = _diskless(
        fx.RdbWriter(10).select_db(0).key(18, b"a", small).key(18, b"b", small).finish(),
        200 * 1024,
    )
    assert [e.value for e in events if isinstance(e, KeyValue)] == [[b"42"] * 2000] * 2
    with pytest.raises(RdbLimitError):
        _diskless(fx.RdbWriter(10).select_db(0).key(18, b"a", small).finish(), 100 * 1024)


def test_the_blob_decoders_stop_at_max_items() -> None:
    decoders: list[tuple[Any, bytes]] = [
        (decode_listpack, fx.listpack([5] * 100)),
        (listpack_strings, fx.listpack([5] * 100)),
        (decode_ziplist, fx.ziplist([5] * 100)),
        (decode_intset, fx.intset(list(range(100)))),
        (decode_zipmap, fx.zipmap([(b"f%d" % i, b"v") for i in range(50)])),
    ]
    for decode, blob in decoders:
        assert len(decode(blob, 100)) in (50, 100)  # zipmap: 50 pairs, 100 items
        with pytest.raises(RdbLimitError):
            decode(blob, 99)
    node = fx.stream_node((1, 0), [b"f"], [((1, i), [(b"f", b"v")], False) for i in range(20)])
    assert len(decode_stream_node(node, None, master=StreamId(1, 0))) == 20
    with pytest.raises(RdbLimitError):
        decode_stream_node(node, 50, master=StreamId(1, 0))


def test_blob_errors_name_the_key_and_the_blob_position() -> None:
    blob = bytearray(fx.listpack([b"f", b"v"]))
    blob[0] += 1  # total bytes no longer match
    w = fx.RdbWriter(10).select_db(0)
    at = len(w.data) + 1 + len(fx.string(b"user:1"))
    payload = w.key(16, b"user:1", fx.string(bytes(blob))).finish()
    with pytest.raises(RdbError) as caught:
        _parse(payload)
    assert caught.value.position == at
    assert "hash_listpack value of key b'user:1'" in str(caught.value)
    assert "listpack header says" in str(caught.value)


# -- the blob decoders ---------------------------------------------------------


def _crc64_reference(data: bytes) -> int:
    """Bit at a time, straight from the definition (reflected Jones poly)."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x95AC9329AC4BC9B5 if crc & 1 else 0)
    return crc


def test_crc64_jones() -> None:
    assert crc64(b"123456789") == 0xE9C6D914C4B8D9CA
    assert crc64(b"") == 0
    rng = random.Random(7)
    for size in [*range(40), 127, 128, 129, 1000]:
        data = rng.randbytes(size)
        assert crc64(data) == _crc64_reference(data), size
        cut = rng.randint(0, size)
        assert crc64(data[cut:], crc64(data[:cut])) == crc64(data)
    assert crc64(memoryview(b"x123456789")[1:]) == 0xE9C6D914C4B8D9CA


def test_lzf() -> None:
    assert lzf_decompress(b"\x02abc\x20\x00", 6) == b"abcccc"  # overlapping reference
    assert lzf_decompress(b"\x01ab\xe0\x03\x01", 14) == b"ab" * 7  # long reference
    rng = random.Random(3)
    for data in (b"", b"a", b"abc" * 1000, rng.randbytes(5000), bytes(70_000)):
        assert lzf_decompress(fx.lzf_compress(data), len(data)) == data
    for bad, size, message in [
        (b"\x20\x00", 3, "before the output start"),
        (b"\x05ab", 6, "past the end"),
        (b"\x00a\xe0", 10, "cut short"),
        (b"\x00a\x20", 4, "cut short"),
        (b"\x02abc", 4, "3 bytes, 4 announced"),
        (b"\x02abc\x20\x00", 5, "exceeds"),
        (b"\x00a", 1000, "cannot expand"),
    ]:
        with pytest.raises(RdbError, match=message):
            lzf_decompress(bad, size)


def test_intset() -> None:
    for values in ([1, 2, 3], [-40000, 0, 40000], [-(1 << 40), 5, 1 << 62], []):
        assert decode_intset(fx.intset(values)) == sorted(values)
    assert decode_intset(fx.intset([1, 2], width=8)) == [1, 2]
    good = fx.intset([1, 2, 3])
    for bad, message in [
        (good[:-1], "blob has"),
        (b"\x03" + good[1:], "invalid element width"),
        (good[:4] + (1 << 31).to_bytes(4, "little") + good[8:], "blob has"),
        (fx.intset([1, 2])[:8] + b"\x02\x00\x01\x00", "ascending"),
        (b"\x02\x00", "shorter than its header"),
    ]:
        with pytest.raises(RdbError, match=message):
            decode_intset(bad)


LISTPACK_VALUES: list[fx.Item] = [
    0, 127, 128, -1, -4096, 4095, 4096, -4097, -32768, 32767, 32768, (1 << 23) - 1,
    -(1 << 23), 1 << 23, (1 << 31) - 1, -(1 << 31), 1 << 31, (1 << 63) - 1, -(1 << 63),
    b"", b"s" * 63, b"m" * 64, b"m" * 4095, b"l" * 4096, b"L" * 70_000, b"\xff\x00",
]  # fmt: skip


def test_listpack_every_encoding() -> None:
    assert decode_listpack(fx.listpack(LISTPACK_VALUES)) == LISTPACK_VALUES
    many: list[fx.Item] = list(range(70_000))  # count saturates at 65535
    assert decode_listpack(fx.listpack(many)) == many
    assert listpack_strings(fx.listpack([b"a", -3])) == [b"a", b"-3"]
    good = fx.listpack([b"ab", 5])
    for bad, message in [
        (good[:-1] + b"\x00", "terminator"),
        (b"\x00" + good[1:], "header says 0 bytes"),
        (good[:4] + b"\x03\x00" + good[6:], "header says 3 entries"),
        (good[:6] + b"\xf5" + good[7:], "invalid encoding byte 0xf5"),
        (good[:9] + b"\x07" + good[10:], "backlen 7"),
        (good[:6] + b"\x8f" + good[7:], "past the end"),
        (b"\x06\x00\x00\x00\x00\x00", "shorter"),
    ]:
        with pytest.raises(RdbError, match=message):
            decode_listpack(bad)


def test_ziplist_every_encoding() -> None:
    values: list[fx.Item] = [
        *range(13), -1, 127, -128, 128, 32767, -32768, 1 << 23, -(1 << 23), 1 << 31,
        -(1 << 31) - 1, (1 << 63) - 1, b"", b"a" * 63, b"b" * 64, b"c" * 300, b"d" * 16384, b"e",
    ]  # fmt: skip
    assert decode_ziplist(fx.ziplist(values)) == values  # also prevlens of 5 bytes
    assert decode_ziplist(fx.ziplist([])) == []
    good = fx.ziplist([b"ab", 5, b"c"])
    for bad, message in [
        (good[:-1] + b"\x00", "terminator"),
        (good[:4] + b"\x00\x00\x00\x00" + good[8:], "tail offset"),
        (good[:8] + b"\x09\x00" + good[10:], "header says 9 entries"),
        (good[:10] + b"\x01" + good[11:], "previous entry has 1 bytes"),
        (good[:11] + b"\xc5" + good[12:], "invalid encoding byte 0xc5"),
        (good[:11] + b"\x3f" + good[12:], "past the end"),
    ]:
        with pytest.raises(RdbError, match=message):
            decode_ziplist(bad)
