"""Datasets and seeded random workloads for the replicator tests (sent to a real Redis)."""

from __future__ import annotations

import random
import time

from tests.redis.resp_client import Arg, RespClient, RespError, encode_command


def populate(client: RespClient, small: int = 50) -> None:
    """Every type and encoding Redis 7.0 writes, in dbs 0, 1 and 5, some with expiries."""
    now_ms = int(time.time() * 1000)
    commands: list[list[Arg]] = []
    for i in range(small):
        commands.append(["SET", f"s:{i}", f"value {i}"])
    commands += [
        ["SET", "s:int", "12345"],
        ["SET", "s:big", "x" * 20_000],
        ["SET", "s:binary", b"\x00\xff\xfe binary"],
        ["SET", "s:expiring", "soon", "PXAT", str(now_ms + 3_600_000)],
        ["HSET", "h:small", "a", "1", "b", "2", "c", "3"],
        ["HSET", "h:big", *[x for i in range(600) for x in (f"f{i}", f"v{i}")]],
        ["SADD", "t:ints", *range(20)],
        ["SADD", "t:strings", *[f"m{i}" for i in range(300)]],
        ["RPUSH", "l:small", "a", "b", "c"],
        ["RPUSH", "l:big", *[f"e{i}" for i in range(1000)]],
        ["RPUSH", "l:plain", "y" * 9000, "z"],
        ["ZADD", "z:small", "1", "a", "2.5", "b", "-inf", "low", "+inf", "high"],
        ["ZADD", "z:big", *[x for i in range(300) for x in (str(i / 7), f"m{i}")]],
        ["XADD", "x:stream", "1-1", "f", "v1"],
        ["XADD", "x:stream", "1-2", "f", "v2", "g", "w"],
        ["XADD", "x:stream", "2-0", "f", "v3"],
        ["XDEL", "x:stream", "1-2"],
        ["HSET", "h:expiring", "a", "1"],
        ["PEXPIREAT", "h:expiring", str(now_ms + 7_200_000)],
        ["SELECT", "1"],
        ["SET", "s:db1", "in db 1"],
        ["RPUSH", "l:db1", "1", "2"],
        ["SELECT", "5"],
        ["HSET", "h:db5", "k", "v"],
        ["SELECT", "0"],
    ]
    for reply in client.pipeline(commands):
        assert not isinstance(reply, RespError), reply


_NAMES = {
    "s": [f"s:r{i}" for i in range(12)],
    "h": [f"h:r{i}" for i in range(6)],
    "t": [f"t:r{i}" for i in range(6)],
    "l": [f"l:r{i}" for i in range(6)],
    "z": [f"z:r{i}" for i in range(6)],
    "x": [f"x:r{i}" for i in range(3)],
}


def _one(rng: random.Random) -> list[Arg]:
    kind = rng.choice("shtlzxk")
    n = str(rng.randrange(1000))
    if kind == "s":
        key = rng.choice(_NAMES["s"])
        return rng.choice(
            [
                ["SET", key, n],
                ["SET", key, n, "EX", "3600"],
                ["INCRBY", key, str(rng.randrange(-5, 6))],
                ["APPEND", key, n],
                ["SETRANGE", key, str(rng.randrange(5)), "ab"],
                ["GETDEL", key],
                ["INCRBYFLOAT", key, "1.5"],
            ]
        )
    if kind == "h":
        key = rng.choice(_NAMES["h"])
        field = f"f{rng.randrange(8)}"
        return rng.choice(
            [["HSET", key, field, n], ["HDEL", key, field], ["HINCRBY", key, "cnt", "2"]]
        )
    if kind == "t":
        key = rng.choice(_NAMES["t"])
        return rng.choice(
            [["SADD", key, n, "x"], ["SREM", key, "x"], ["SPOP", key], ["SADD", key, "17"]]
        )
    if kind == "l":
        key = rng.choice(_NAMES["l"])
        return rng.choice(
            [
                ["LPUSH", key, n],
                ["RPUSH", key, n, "tail"],
                ["LPOP", key],
                ["RPOP", key, "2"],
                ["LSET", key, "-1", n],
                ["LTRIM", key, "0", "5"],
                ["LMOVE", key, rng.choice(_NAMES["l"]), "LEFT", "RIGHT"],
            ]
        )
    if kind == "z":
        key = rng.choice(_NAMES["z"])
        return rng.choice(
            [
                ["ZADD", key, n, f"m{rng.randrange(6)}"],
                ["ZADD", key, "GT", "CH", n, "m1"],
                ["ZINCRBY", key, "1.25", "m2"],
                ["ZREM", key, "m3"],
            ]
        )
    if kind == "x":
        key = rng.choice(_NAMES["x"])
        return rng.choice(
            [
                ["XADD", key, "*", "f", n],
                ["XTRIM", key, "MAXLEN", "5"],
                ["XADD", key, "*", "a", "b"],
            ]
        )
    key = rng.choice(_NAMES[rng.choice("shtlz")])
    return rng.choice(
        [
            ["DEL", key],
            ["EXPIRE", key, "3600"],
            ["PERSIST", key],
            ["RENAME", key, key + "-renamed"],
            ["COPY", key, key + "-copy", "REPLACE"],
        ]
    )


def send_all(client: RespClient, commands: list[list[Arg]]) -> list[object]:
    """Pipeline ``commands`` and return every reply, error replies included."""
    client.sock.sendall(b"".join(encode_command(c) for c in commands))
    return [client.read_reply() for _ in commands]


def random_workload(client: RespClient, seed: int, count: int) -> None:
    """``count`` random commands (some inside MULTI/EXEC); errors Redis answers (a wrong
    type, a missing key) are fine: the master does not propagate them."""
    rng = random.Random(seed)
    sent = 0
    while sent < count:
        if rng.random() < 0.1:
            block: list[list[Arg]] = [["MULTI"], *[_one(rng) for _ in range(3)], ["EXEC"]]
            send_all(client, block)
            sent += 3
        else:
            send_all(client, [_one(rng) for _ in range(20)])
            sent += 20
