"""Sorted-set commands: ZADD, ZINCRBY, ZREM, ZREMRANGEBY*, and the pops.

A sorted set is an object with one sub-key per member holding its score as
text (layout.format_score). There is no score index: commands that select by
score or rank (ZREMRANGEBY*, ZPOP*) read the whole set (O(n)). Blocking and
multi-key pops (BZPOP*, [B]ZMPOP) pop from the first non-empty key, as the
ZPOPMIN/ZPOPMAX a Redis 7 master propagates for them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from replication.redis.commands.common import Call, Db, Handler, check_timeout
from replication.redis.commands.numeric import NumberError, parse_double
from replication.redis.commands.zset_ranges import (
    Pair,
    RangeError,
    lex_run,
    parse_lex_range,
    parse_score_range,
    rank_run,
    score_run,
)
from replication.redis.layout import Meta, format_score, parse_score
from replication.redis.objects import scan_object, zset_items

_ZADD_FLAGS = ("NX", "XX", "GT", "LT", "CH", "INCR")
_Selector = Callable[[list[Pair]], list[Pair]]


def zset_pairs(db: Db, meta: Meta) -> list[Pair]:
    """The members in ZRANGE order."""
    return zset_items(scan_object(db.view, db.layout, meta))


def score_of(db: Db, meta: Meta, member: bytes) -> float | None:
    raw = db.view.get(db.sub(meta, member))
    return None if raw is None else parse_score(raw)


def put_score(db: Db, meta: Meta, member: bytes, score: float, new: bool) -> None:
    db.view.put(db.sub(meta, member), format_score(score))
    meta.count += new


def remove_members(db: Db, meta: Meta, members: list[bytes]) -> None:
    for member in members:
        sub = db.sub(meta, member)
        if db.view.get(sub) is not None:
            db.view.delete(sub)
            meta.count -= 1


def score_arg(call: Call, raw: bytes) -> float:
    try:
        return parse_double(raw)
    except NumberError:
        raise call.error("value is not a valid float") from None


@dataclass
class ZaddFlags:
    nx: bool = False
    xx: bool = False
    gt: bool = False
    lt: bool = False
    incr: bool = False


def _zadd_flags(call: Call) -> tuple[ZaddFlags, int]:
    """The flags and the index of the first score."""
    given: set[str] = set()
    index = 1
    while index < len(call.args) and call.option(call.args[index]) in _ZADD_FLAGS:
        given.add(call.option(call.args[index]))
        index += 1
    flags = ZaddFlags(*(name in given for name in ("NX", "XX", "GT", "LT", "INCR")))
    if flags.nx and flags.xx:
        raise call.error("XX and NX options at the same time are not compatible")
    if (flags.gt and flags.nx) or (flags.lt and flags.nx) or (flags.gt and flags.lt):
        raise call.error("GT, LT, and/or NX options at the same time are not compatible")
    return flags, index


def _zadd(call: Call) -> None:
    call.arity(3)
    flags, index = _zadd_flags(call)
    pairs = call.pairs(index)
    if flags.incr and len(pairs) > 1:
        raise call.error("INCR option supports a single increment-element pair")
    scores = [(member, score_arg(call, raw)) for raw, member in pairs]
    db = call.db()
    meta = db.typed(call.args[0], "zset")
    if meta is None:
        if flags.xx:
            return
        meta = db.new_container("zset", call.ctx)
    for member, score in scores:
        _zadd_one(call, db, meta, member, score, flags=flags)
    db.put(call.args[0], meta)


def _zadd_one(
    call: Call, db: Db, meta: Meta, member: bytes, score: float, *, flags: ZaddFlags
) -> None:
    """zsetAdd: one member under NX/XX/GT/LT/INCR."""
    current = score_of(db, meta, member)
    if current is None:
        if not flags.xx:
            put_score(db, meta, member, score, True)
        return
    if flags.nx:
        return
    if flags.incr:
        score += current
        if math.isnan(score):
            raise call.error("resulting score is not a number (NaN)")
    if (flags.lt and score >= current) or (flags.gt and score <= current):
        return
    if score != current:
        put_score(db, meta, member, score, False)


def _zincrby(call: Call) -> None:
    call.arity(3, 3)
    increment = score_arg(call, call.args[1])
    db = call.db()
    meta = db.typed(call.args[0], "zset") or db.new_container("zset", call.ctx)
    _zadd_one(call, db, meta, call.args[2], increment, flags=ZaddFlags(incr=True))
    db.put(call.args[0], meta)


def _zrem(call: Call) -> None:
    call.arity(2)
    db = call.db()
    meta = db.typed(call.args[0], "zset")
    if meta is None:
        return
    remove_members(db, meta, call.args[1:])
    db.save(call.args[0], meta)


def _zremrange(call: Call) -> None:
    call.arity(3, 3)
    select = _range_selector(call)
    db = call.db()
    meta = db.typed(call.args[0], "zset")
    if meta is None:
        return
    doomed = select(zset_pairs(db, meta))
    remove_members(db, meta, [member for member, _ in doomed])
    db.save(call.args[0], meta)


def _range_selector(call: Call) -> _Selector:
    low, high = call.args[1], call.args[2]
    try:
        if call.name == "ZREMRANGEBYSCORE":
            score_spec = parse_score_range(low, high)
            return lambda pairs: score_run(pairs, score_spec, False)
        if call.name == "ZREMRANGEBYLEX":
            lex_spec = parse_lex_range(low, high)
            return lambda pairs: lex_run(pairs, lex_spec, False)
    except RangeError as exc:
        raise call.error(str(exc)) from None
    start, stop = call.integer(low), call.integer(high)
    return lambda pairs: rank_run(pairs, start, stop, False)


def pop_pairs(db: Db, key: bytes, count: int, highest: bool) -> bool:
    """Pop ``count`` lowest (or highest) members of ``key``; False if no such key."""
    meta = db.typed(key, "zset")
    if meta is None:
        return False
    pairs = zset_pairs(db, meta)
    chosen = pairs[::-1][:count] if highest else pairs[:count]
    remove_members(db, meta, [member for member, _ in chosen])
    db.save(key, meta)
    return True


def _zpop(call: Call) -> None:
    call.arity(1, 2)
    count = 1 if len(call.args) == 1 else call.integer(call.args[1])
    if count < 0:
        raise call.error("value is out of range, must be positive")
    if count:
        pop_pairs(call.db(), call.args[0], count, call.name == "ZPOPMAX")


def _bzpop(call: Call) -> None:
    call.arity(2)
    check_timeout(call, call.args[-1])
    db = call.db()
    for key in call.args[:-1]:
        if pop_pairs(db, key, 1, call.name == "BZPOPMAX"):
            return


def _zmpop(call: Call) -> None:
    """[B]ZMPOP [timeout] numkeys key [key ...] MIN|MAX [COUNT count]."""
    args = call.args
    if call.name == "BZMPOP":
        call.arity(1)
        check_timeout(call, args[0])
        args = args[1:]
    if not args:
        raise call.error("wrong number of arguments")
    numkeys = call.integer(args[0])
    if numkeys <= 0 or len(args) < numkeys + 2:
        raise call.error("numkeys should be greater than 0")
    keys, rest = args[1 : numkeys + 1], args[numkeys + 1 :]
    where = call.option(rest[0])
    count = 1
    if len(rest) == 3 and call.option(rest[1]) == "COUNT":
        count = call.integer(rest[2])
    if where not in ("MIN", "MAX") or len(rest) not in (1, 3) or count <= 0:
        raise call.error("syntax error")
    db = call.db()
    for key in keys:
        if pop_pairs(db, key, count, where == "MAX"):
            return


def store_zset(call: Call, db: Db, key: bytes, pairs: list[Pair]) -> None:
    """Replace ``key`` (any type, expiry cleared) by a zset of ``pairs``, or delete it."""
    db.delete(key)
    if not pairs:
        return
    meta = db.new_container("zset", call.ctx)
    for member, score in pairs:
        put_score(db, meta, member, score, True)
    db.put(key, meta)


HANDLERS: dict[str, Handler] = {
    "ZADD": _zadd,
    "ZINCRBY": _zincrby,
    "ZREM": _zrem,
    "ZREMRANGEBYSCORE": _zremrange,
    "ZREMRANGEBYRANK": _zremrange,
    "ZREMRANGEBYLEX": _zremrange,
    "ZPOPMIN": _zpop,
    "ZPOPMAX": _zpop,
    "BZPOPMIN": _bzpop,
    "BZPOPMAX": _bzpop,
    "ZMPOP": _zmpop,
    "BZMPOP": _zmpop,
}
