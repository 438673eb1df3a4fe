"""Hash commands: HSET, HMSET, HSETNX, HDEL, HINCRBY, HINCRBYFLOAT.

A hash is an object with one sub-key per field (the value); the metadata
record counts the fields. Writes keep the key's expiry; deleting the last
field deletes the key.
"""

from __future__ import annotations

from replication.redis.commands.common import Call, Db, Handler
from replication.redis.commands.numeric import NumberError, add_int, incr_long_double, parse_int
from replication.redis.layout import Meta


def _hash(call: Call, db: Db, key: bytes) -> Meta:
    """The hash at ``key``, or a new empty one (not stored yet)."""
    return db.typed(key, "hash") or db.new_container("hash", call.ctx)


def set_field(db: Db, meta: Meta, name: bytes, value: bytes) -> None:
    sub = db.sub(meta, name)
    if db.view.get(sub) is None:
        meta.count += 1
    db.view.put(sub, value)


def _hset(call: Call) -> None:
    call.arity(1)
    pairs = call.pairs(1)
    db = call.db()
    meta = _hash(call, db, call.args[0])
    for name, value in pairs:
        set_field(db, meta, name, value)
    db.put(call.args[0], meta)


def _hsetnx(call: Call) -> None:
    call.arity(3, 3)
    db = call.db()
    meta = _hash(call, db, call.args[0])
    if db.view.get(db.sub(meta, call.args[1])) is None:
        set_field(db, meta, call.args[1], call.args[2])
        db.put(call.args[0], meta)


def _hdel(call: Call) -> None:
    call.arity(2)
    db = call.db()
    meta = db.typed(call.args[0], "hash")
    if meta is None:
        return
    for name in call.args[1:]:
        sub = db.sub(meta, name)
        if db.view.get(sub) is not None:
            db.view.delete(sub)
            meta.count -= 1
    db.save(call.args[0], meta)


def _field_value(call: Call) -> tuple[Db, Meta, bytes | None]:
    db = call.db()
    meta = _hash(call, db, call.args[0])
    return db, meta, (None if meta.count == 0 else db.view.get(db.sub(meta, call.args[1])))


def _hincrby(call: Call) -> None:
    call.arity(3, 3)
    increment = call.integer(call.args[2])
    db, meta, current = _field_value(call)
    try:
        total = add_int(0 if current is None else parse_int(current), increment)
    except NumberError as exc:
        raise call.error(f"hash value is not an integer or would overflow ({exc})") from None
    set_field(db, meta, call.args[1], str(total).encode())
    db.put(call.args[0], meta)


def _hincrbyfloat(call: Call) -> None:
    call.arity(3, 3)
    db, meta, current = _field_value(call)
    try:
        value = incr_long_double(current, call.args[2])
    except NumberError as exc:
        raise call.error(str(exc)) from None
    set_field(db, meta, call.args[1], value)
    db.put(call.args[0], meta)


HANDLERS: dict[str, Handler] = {
    "HSET": _hset,
    "HMSET": _hset,
    "HSETNX": _hsetnx,
    "HDEL": _hdel,
    "HINCRBY": _hincrby,
    "HINCRBYFLOAT": _hincrbyfloat,
}
