"""Keyspace commands: DEL, expiries, RENAME, COPY, MOVE, and the db-level ones
(SELECT, SWAPDB, FLUSHDB, FLUSHALL).

Moving a key (RENAME, MOVE) moves its metadata record: the object and the
expiry go with it. COPY copies a container's sub-keys into a new object. A db
is a namespace: SWAPDB swaps two entries of the dbs map, FLUSHDB/FLUSHALL give
dbs new, empty namespaces and leave gc records for the old ones.

Expiries: a relative time (EXPIRE, PEXPIRE) that is not positive deletes the
key, as on the master (which propagates that as DEL anyway). An absolute time
(EXPIREAT, PEXPIREAT: all a Redis 7 master sends) is stored even if it is in
the past, exactly as a Redis replica does: the replicator may apply it late,
and the master's later commands (PERSIST, ...) still find the key; the master
sends DEL when the key really expires.
"""

from __future__ import annotations

from replication.redis.commands.common import (
    Call,
    Handler,
    load_dbs,
    namespace_of,
    save_dbs,
)
from replication.redis.objects import copy_value

_EXPIRES = {
    "EXPIRE": (1000, False),
    "PEXPIRE": (1, False),
    "EXPIREAT": (1000, True),
    "PEXPIREAT": (1, True),
}
_EXPIRE_FLAGS = frozenset({"NX", "XX", "GT", "LT"})


def _del(call: Call) -> None:
    call.arity(1)
    db = call.db()
    for key in call.args:
        db.delete(key)


def _expire_flags(call: Call) -> set[str]:
    flags = {call.option(arg) for arg in call.args[2:]}
    if not flags <= _EXPIRE_FLAGS:
        raise call.error(f"unsupported option {sorted(flags - _EXPIRE_FLAGS)}")
    if "NX" in flags and len(flags) > 1:
        raise call.error("NX and XX, GT or LT options at the same time are not compatible")
    if {"GT", "LT"} <= flags:
        raise call.error("GT and LT options at the same time are not compatible")
    return flags


def _expire_allowed(flags: set[str], current: int | None, when: int) -> bool:
    """NX/XX/GT/LT: a key without expiry counts as an infinite TTL."""
    if "NX" in flags and current is not None:
        return False
    if "XX" in flags and current is None:
        return False
    if "GT" in flags and (current is None or when <= current):
        return False
    return not ("LT" in flags and current is not None and when >= current)


def _expire(call: Call) -> None:
    call.arity(2)
    unit_ms, absolute = _EXPIRES[call.name]
    flags = _expire_flags(call)
    amount = call.integer(call.args[1])
    when = amount * unit_ms if absolute else call.ctx.now_ms + amount * unit_ms
    db = call.db()
    key = call.args[0]
    meta = db.get(key)
    if meta is None or not _expire_allowed(flags, meta.expire_ms, when):
        return
    if not absolute and amount <= 0:
        db.delete(key, meta)
        return
    meta.expire_ms = when
    db.put(key, meta)


def _persist(call: Call) -> None:
    call.arity(1, 1)
    db = call.db()
    meta = db.get(call.args[0])
    if meta is not None and meta.expire_ms is not None:
        meta.expire_ms = None
        db.put(call.args[0], meta)


def _rename(call: Call) -> None:
    call.arity(2, 2)
    source, target = call.args
    db = call.db()
    meta = db.get(source)
    if meta is None:
        raise call.error("no such key")
    if source == target:
        return
    existing = db.get(target)
    if existing is not None:
        if call.name == "RENAMENX":
            return
        db.delete(target, existing)
    db.forget(source)
    db.put(target, meta)


def _copy(call: Call) -> None:
    call.arity(2, 5)
    source, target = call.args[0], call.args[1]
    number, replace = call.ctx.db, False
    options = call.args[2:]
    while options:
        word = call.option(options[0])
        if word == "REPLACE":
            replace, options = True, options[1:]
        elif word == "DB" and len(options) > 1:
            number, options = _db_index(call, options[1]), options[2:]
        else:
            raise call.error("syntax error")
    if number == call.ctx.db and source == target:
        raise call.error("source and destination objects are the same")
    meta = call.db().get(source)
    if meta is None:
        return
    destination = call.db(number)
    existing = destination.get(target)
    if existing is not None:
        if not replace:
            return
        destination.delete(target, existing)
    obj = None if meta.type == "string" else call.ctx.new_object()
    destination.put(target, copy_value(call.view, call.ctx.layout, meta, obj))


def _move(call: Call) -> None:
    call.arity(2, 2)
    key = call.args[0]
    number = _db_index(call, call.args[1])
    if number == call.ctx.db:
        raise call.error("source and destination objects are the same")
    source = call.db()
    meta = source.get(key)
    destination = call.db(number)
    if meta is None or destination.get(key) is not None:
        return
    source.forget(key)
    destination.put(key, meta)


def _db_index(call: Call, raw: bytes) -> int:
    number = call.integer(raw)
    if number < 0:
        raise call.error("DB index is out of range")
    return number


def _select(call: Call) -> None:
    call.arity(1, 1)
    call.ctx.db = _db_index(call, call.args[0])


def _swapdb(call: Call) -> None:
    call.arity(2, 2)
    first, second = _db_index(call, call.args[0]), _db_index(call, call.args[1])
    dbs = load_dbs(call.view, call.ctx.layout)
    dbs[first], dbs[second] = namespace_of(dbs, second), namespace_of(dbs, first)
    save_dbs(call.view, call.ctx.layout, dbs)


def _flush_mode(call: Call) -> None:
    call.arity(0, 1)
    if call.args and call.option(call.args[0]) not in ("ASYNC", "SYNC"):
        raise call.error("syntax error")


def _flush(call: Call, numbers: list[int]) -> None:
    """Give each db in ``numbers`` a new namespace; gc records for the old ones."""
    layout = call.ctx.layout
    dbs = load_dbs(call.view, layout)
    for number in numbers:
        call.view.put(layout.gc_namespace_key(namespace_of(dbs, number)), b"")
        dbs[number] = call.ctx.new_namespace()
    save_dbs(call.view, layout, dbs)


def _flushdb(call: Call) -> None:
    _flush_mode(call)
    _flush(call, [call.ctx.db])


def _flushall(call: Call) -> None:
    _flush_mode(call)
    mapped = load_dbs(call.view, call.ctx.layout)
    count = max([call.ctx.databases, call.ctx.db + 1, *(db + 1 for db in mapped)])
    _flush(call, list(range(count)))


HANDLERS: dict[str, Handler] = {
    "DEL": _del,
    "UNLINK": _del,
    "EXPIRE": _expire,
    "PEXPIRE": _expire,
    "EXPIREAT": _expire,
    "PEXPIREAT": _expire,
    "PERSIST": _persist,
    "RENAME": _rename,
    "RENAMENX": _rename,
    "COPY": _copy,
    "MOVE": _move,
    "SELECT": _select,
    "SWAPDB": _swapdb,
    "FLUSHDB": _flushdb,
    "FLUSHALL": _flushall,
}
