"""Corrupt RDB payloads: the parser must raise RdbError and nothing else.

Truncations and bit flips of a real RDB (written by redis-server 7.0 with
every type, tiny encoding thresholds so a small file holds all encodings),
byte mutations of a hand-built RDB 11 payload, and random bytes given to the
blob decoders. Any other exception (IndexError, struct.error, MemoryError,
RecursionError...) fails the test with the case that produced it. Every case
reads a bounded input, so it ends; the timeout marks only catch a regression
into a hang.
"""

from __future__ import annotations

import contextlib
import io
import random
import traceback
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replication.redis.rdb import End, KeyValue, RdbError, RdbParser
from replication.redis.rdb.intset import decode_intset
from replication.redis.rdb.listpack import decode_listpack
from replication.redis.rdb.lzf import lzf_decompress
from replication.redis.rdb.ziplist import decode_ziplist
from replication.redis.rdb.zipmap import decode_zipmap
from tests.redis import rdb_fixtures as fx


@pytest.fixture(scope="module")
def real_rdb(redis_server_factory: Any) -> bytes:
    """A small RDB 10 from Redis 7.0 with every type and encoding."""
    server = redis_server_factory()
    with server.client() as c:
        for name, value in [
            ("list-max-listpack-size", "4"),
            ("list-compress-depth", "1"),
            ("hash-max-listpack-entries", "4"),
            ("zset-max-listpack-entries", "4"),
            ("set-max-intset-entries", "8"),
            ("stream-node-max-entries", "4"),
        ]:
            c.execute("CONFIG", "SET", name, value)
        c.execute("DEBUG", "QUICKLIST-PACKED-THRESHOLD", "100")
        c.pipeline(
            [
                ("SET", "raw", "value"),
                ("SET", "int", "-30000"),
                ("SET", "lzf", "abcabcabc" * 20),
                ("RPUSH", "list", *[f"item-{i}" for i in range(30)], "z" * 150, 7),
                ("SADD", "intset", 1, 2, -3),
                ("SADD", "set", *range(20)),
                ("HSET", "hash", "a", "1", "b", "two"),
                ("HSET", "hash-big", *[f"f{i}" for i in range(20)]),
                ("ZADD", "zset", 1, "a", "-inf", "b"),
                ("ZADD", "zset-big", *[x for i in range(10) for x in (i / 3, f"m{i}")]),
                ("PEXPIREAT", "raw", 4_000_000_000_000),
                ("FUNCTION", "LOAD", "#!lua name=l\nredis.register_function('f', function() end)"),
            ]
        )
        for i in range(12):
            c.execute("XADD", "stream", f"{i + 1}-1", "k", i, *(["x", "y"] if i % 3 else []))
        c.execute("XDEL", "stream", "2-1")
        c.execute("XGROUP", "CREATE", "stream", "g", "0")
        c.execute("XREADGROUP", "GROUP", "g", "c", "COUNT", "3", "STREAMS", "stream", ">")
        c.execute("SELECT", "3")
        c.execute("SET", "k3", "db3")
        assert c.execute("SAVE") == "OK"
    data: bytes = (server.dir / "dump.rdb").read_bytes()
    events = list(RdbParser(io.BytesIO(data), len(data)))
    assert isinstance(events[-1], End) and events[-1].checksum_ok
    assert len({e.encoding for e in events if isinstance(e, KeyValue)}) == 9
    return data


def _outcome(data: bytes, total: int | None, verify: bool) -> str:
    """ "ok" or "error"; any other exception fails the test with its trace."""
    try:
        for _ in RdbParser(io.BytesIO(data), total, verify_checksum=verify):
            pass
    except RdbError:
        return "error"
    except Exception:
        pytest.fail(f"not an RdbError (total={total}, verify={verify}):\n{traceback.format_exc()}")
    return "ok"


@pytest.mark.timeout(120)
def test_truncations_raise_rdb_error(real_rdb: bytes) -> None:
    assert len(real_rdb) < 5000  # small enough to cut everywhere
    for cut in range(len(real_rdb)):
        part = real_rdb[:cut]
        assert _outcome(part, cut, verify=True) == "error", cut
        assert _outcome(part, None, verify=False) == "error", cut
        assert _outcome(part, len(real_rdb), verify=False) == "error", cut


@pytest.mark.timeout(120)
def test_bit_flips_raise_rdb_error_or_parse(real_rdb: bytes) -> None:
    rng = random.Random(12)
    outcomes = {"ok": 0, "error": 0}
    for _ in range(1500):
        flipped = bytearray(real_rdb)
        position = rng.randrange(len(flipped))
        flipped[position] ^= 1 << rng.randrange(8)
        data = bytes(flipped)
        # Every byte is covered by the CRC (or is the CRC): always an error.
        assert _outcome(data, len(data), verify=True) == "error", position
        outcomes[_outcome(data, None, verify=False)] += 1
    # Without the CRC many flips land in data and parse, many break structure.
    assert outcomes["ok"] > 100 and outcomes["error"] > 100, outcomes


@pytest.mark.timeout(120)
def test_garbage_after_a_valid_header() -> None:
    rng = random.Random(13)
    for _ in range(300):
        data = b"REDIS0010" + rng.randbytes(rng.randint(0, 300))
        _outcome(data, len(data), verify=True)
        _outcome(data, None, verify=False)


def _rdb11_payload() -> bytes:
    w = fx.RdbWriter(11).aux(b"redis-ver", b"7.2.4").select_db(0).resize_db(4, 1)
    w.key(20, b"set", fx.string(fx.listpack([b"a", 1, 300, b"b" * 70])))
    w.expire_ms(5).key(13, b"hash", fx.string(fx.ziplist([b"f", b"v", b"n", 70000])))
    w.key(17, b"zset", fx.string(fx.listpack([b"m", b"1.5", b"n", 2])))
    w.key(18, b"list", fx.length(2) + fx.length(2) + fx.lzf_string(fx.listpack([b"x"] * 9))
          + fx.length(1) + fx.string(b"plain"))  # fmt: skip
    w.key(11, b"ints", fx.string(fx.intset([1, 1 << 20, -5])))
    w.key(9, b"zipmap", fx.string(fx.zipmap([(b"f", b"v" * 300)])))
    stream = fx.rdb11_stream_payload()
    return w.raw(stream[9:-9]).finish()  # the stream record, without header/EOF


MUTATIONS = st.lists(
    st.tuples(st.integers(min_value=0, max_value=10**6), st.integers(0, 255)),
    min_size=1,
    max_size=4,
)


@pytest.mark.timeout(120)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations=MUTATIONS, cut=st.none() | st.integers(min_value=0, max_value=10**6))
def test_mutated_rdb11_payload(mutations: list[tuple[int, int]], cut: int | None) -> None:
    payload = bytearray(_rdb11_payload())
    for position, value in mutations:
        payload[position % len(payload)] = value
    data = bytes(payload if cut is None else payload[: cut % len(payload)])
    _outcome(data, len(data), verify=False)
    _outcome(data, None, verify=False)


def _decoders() -> list[tuple[Callable[[bytes], object], bytes]]:
    return [
        (decode_listpack, fx.listpack([b"a", 5, -300, 70000, b"b" * 100, 1 << 40])),
        (decode_ziplist, fx.ziplist([b"a", 5, -300, 70000, b"b" * 300, 1 << 40])),
        (decode_intset, fx.intset([1, 5, 1 << 20])),
        (decode_zipmap, fx.zipmap([(b"a", b"1"), (b"b" * 300, b"2")], free=1)),
        (
            lambda blob: lzf_decompress(blob, 1500),
            fx.lzf_compress(b"abcdefgh" * 150 + b"xyz" * 100),
        ),
    ]


@pytest.mark.timeout(120)
@settings(max_examples=400, deadline=None)
@given(which=st.integers(0, 4), mutations=MUTATIONS, noise=st.binary(max_size=64))
def test_blob_decoders_reject_corruption(
    which: int, mutations: list[tuple[int, int]], noise: bytes
) -> None:
    decode, blob = _decoders()[which]
    mutated = bytearray(blob)
    for position, value in mutations:
        mutated[position % len(mutated)] = value
    for data in (bytes(mutated), noise, bytes(mutated[: len(noise)])):
        with contextlib.suppress(RdbError):
            decode(data)
