"""Sorted-set commands that store a computed set: ZUNIONSTORE, ZINTERSTORE,
ZDIFFSTORE, ZRANGESTORE.

They read their sources whole and replace the destination (any type, expiry
cleared), deleting it when the result is empty, as Redis 7.0 does. Union and
intersection visit the sources from the smallest to the largest (stable for
equal sizes), like Redis' qsort, so weighted sums add up in the same order.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from replication.redis.commands.common import Call, Db, Handler
from replication.redis.commands.zset_ranges import (
    Pair,
    RangeError,
    lex_run,
    limit_run,
    parse_lex_range,
    parse_score_range,
    rank_run,
    score_run,
)
from replication.redis.commands.zsets import score_arg, store_zset, zset_pairs
from replication.redis.objects import scan_object

Source = tuple[dict[bytes, float], float]  # (member -> score, weight)


def _source(call: Call, db: Db, key: bytes) -> dict[bytes, float]:
    """A zset's scores, a set's members at score 1, or nothing for a missing key."""
    meta = db.get(key)
    if meta is None:
        return {}
    if meta.type == "zset":
        return dict(zset_pairs(db, meta))
    if meta.type == "set":
        return {member: 1.0 for member, _ in scan_object(db.view, db.layout, meta)}
    db.typed(key, "zset")  # raises WrongTypeStop
    return {}


def _aggregate(name: str) -> Callable[[float, float], float]:
    if name == "SUM":
        return lambda total, value: 0.0 if math.isnan(total + value) else total + value
    if name == "MIN":
        return lambda total, value: value if value < total else total
    if name == "MAX":
        return lambda total, value: value if value > total else total
    raise ValueError(name)


def _weighted(score: float, weight: float) -> float:
    value = score * weight
    return 0.0 if math.isnan(value) else value


def _parse_setop(call: Call) -> tuple[list[bytes], list[float], str]:
    """dst numkeys key... [WEIGHTS w...] [AGGREGATE SUM|MIN|MAX]: keys, weights, aggregate."""
    call.arity(3)
    numkeys = call.integer(call.args[1])
    if numkeys < 1 or len(call.args) < numkeys + 2:
        raise call.error("at least 1 input key is needed / numkeys out of range")
    keys = call.args[2 : 2 + numkeys]
    weights, aggregate = [1.0] * numkeys, "SUM"
    rest = call.args[2 + numkeys :]
    while rest:
        word = call.option(rest[0])
        if word == "WEIGHTS" and call.name != "ZDIFFSTORE" and len(rest) > numkeys:
            weights = [score_arg(call, raw) for raw in rest[1 : 1 + numkeys]]
            rest = rest[1 + numkeys :]
        elif word == "AGGREGATE" and call.name != "ZDIFFSTORE" and len(rest) > 1:
            aggregate = call.option(rest[1])
            if aggregate not in ("SUM", "MIN", "MAX"):
                raise call.error("syntax error")
            rest = rest[2:]
        else:
            raise call.error("syntax error")
    return keys, weights, aggregate


def _union(sources: list[Source], combine: Callable[[float, float], float]) -> dict[bytes, float]:
    result: dict[bytes, float] = {}
    for scores, weight in sorted(sources, key=lambda source: len(source[0])):
        for member, score in scores.items():
            value = _weighted(score, weight)
            result[member] = combine(result[member], value) if member in result else value
    return result


def _inter(sources: list[Source], combine: Callable[[float, float], float]) -> dict[bytes, float]:
    ordered = sorted(sources, key=lambda source: len(source[0]))
    (first, first_weight), others = ordered[0], ordered[1:]
    result: dict[bytes, float] = {}
    for member, score in first.items():
        total = _weighted(score, first_weight)
        for scores, weight in others:
            if member not in scores:
                break
            total = combine(total, scores[member] * weight)
        else:
            result[member] = total
    return result


def _setop(call: Call) -> None:
    keys, weights, aggregate = _parse_setop(call)
    db = call.db()
    sources = [(_source(call, db, key), weight) for key, weight in zip(keys, weights, strict=True)]
    combine = _aggregate(aggregate)
    if call.name == "ZUNIONSTORE":
        result = _union(sources, combine)
    elif call.name == "ZINTERSTORE":
        result = _inter(sources, combine)
    else:
        first, others = sources[0][0], [scores for scores, _ in sources[1:]]
        result = {m: s for m, s in first.items() if not any(m in other for other in others)}
    store_zset(call, db, call.args[0], sorted(result.items(), key=lambda p: (p[1], p[0])))


def _zrangestore(call: Call) -> None:
    """ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]."""
    call.arity(4)
    kind, reverse, limit = "RANK", False, None
    rest = call.args[4:]
    while rest:
        word = call.option(rest[0])
        if word in ("BYSCORE", "BYLEX") and kind == "RANK":
            kind, rest = word, rest[1:]
        elif word == "REV" and not reverse:
            reverse, rest = True, rest[1:]
        elif word == "LIMIT" and len(rest) > 2:
            limit, rest = (call.integer(rest[1]), call.integer(rest[2])), rest[3:]
        else:
            raise call.error("syntax error")
    if limit is not None and kind == "RANK":
        raise call.error("LIMIT is only supported in combination with either BYSCORE or BYLEX")
    select = _range(call, kind, reverse)
    db = call.db()
    meta = db.typed(call.args[1], "zset")
    run = [] if meta is None else select(zset_pairs(db, meta))
    if limit is not None:
        run = limit_run(run, *limit)
    store_zset(call, db, call.args[0], sorted(run, key=lambda p: (p[1], p[0])))


def _range(call: Call, kind: str, reverse: bool) -> Callable[[list[Pair]], list[Pair]]:
    low, high = call.args[2], call.args[3]
    if reverse and kind != "RANK":
        low, high = high, low
    try:
        if kind == "BYSCORE":
            score_spec = parse_score_range(low, high)
            return lambda pairs: score_run(pairs, score_spec, reverse)
        if kind == "BYLEX":
            lex_spec = parse_lex_range(low, high)
            return lambda pairs: lex_run(pairs, lex_spec, reverse)
    except RangeError as exc:
        raise call.error(str(exc)) from None
    start, stop = call.integer(low), call.integer(high)
    return lambda pairs: rank_run(pairs, start, stop, reverse)


HANDLERS: dict[str, Handler] = {
    "ZUNIONSTORE": _setop,
    "ZINTERSTORE": _setop,
    "ZDIFFSTORE": _setop,
    "ZRANGESTORE": _zrangestore,
}
