"""String commands: SET and its variants, GET-and-modify commands, counters, APPEND, SETRANGE.

A string lives entirely in its metadata record. SET (and MSET, GETSET,
SETEX...) replaces a key of any type and clears its expiry unless KEEPTTL;
commands that modify a string in place (INCR*, APPEND, SETRANGE, SETBIT) keep
it. INCRBYFLOAT uses Redis' long double arithmetic (replication/redis/commands/numeric.py)
although a Redis 7 master propagates it as ``SET key <result> KEEPTTL``.
"""

from __future__ import annotations

from dataclasses import dataclass

from replication.redis.commands.common import (
    Call,
    Db,
    Handler,
    absolute_expiry,
    relative_expiry,
)
from replication.redis.commands.numeric import (
    INT64_MIN,
    NumberError,
    add_int,
    incr_long_double,
    parse_int,
)
from replication.redis.layout import Meta

MAX_STRING = 512 * 1024 * 1024  # proto-max-bulk-len: the largest string Redis builds
_EXPIRY_UNITS = {"EX": (1000, False), "PX": (1, False), "EXAT": (1000, True), "PXAT": (1, True)}


@dataclass
class SetOptions:
    nx: bool = False
    xx: bool = False
    get: bool = False
    keep_ttl: bool = False
    persist: bool = False
    expire_ms: int | None = None


def parse_set_options(call: Call, args: list[bytes], getex: bool = False) -> SetOptions:
    """SET's (or, with ``getex``, GETEX's) options, validated as Redis does."""
    options = SetOptions()
    expiry_given = False
    i = 0
    while i < len(args):
        word = call.option(args[i])
        if word in _EXPIRY_UNITS and i + 1 < len(args) and not expiry_given:
            if options.keep_ttl or options.persist:
                raise call.error("syntax error")
            unit, absolute = _EXPIRY_UNITS[word]
            parse = absolute_expiry if absolute else relative_expiry
            options.expire_ms = parse(call, args[i + 1], unit)
            expiry_given = True
            i += 2
            continue
        if not _set_flag(options, word, getex, expiry_given):
            raise call.error("syntax error")
        i += 1
    return options


def _set_flag(options: SetOptions, word: str, getex: bool, expiry_given: bool) -> bool:
    if getex:
        if word == "PERSIST" and not expiry_given and not options.persist:
            options.persist = True
            return True
        return False
    if word == "NX" and not options.xx:
        options.nx = True
    elif word == "XX" and not options.nx:
        options.xx = True
    elif word == "GET":
        options.get = True
    elif word == "KEEPTTL" and not expiry_given:
        options.keep_ttl = True
    else:
        return False
    return True


def store_string(db: Db, key: bytes, value: bytes, expire_ms: int | None, keep_ttl: bool) -> None:
    """SET semantics: replace ``key`` (any type) by a string."""
    old = db.get(key)
    if old is not None:
        db.release(old)
        if keep_ttl:
            expire_ms = old.expire_ms
    db.put(key, Meta("string", expire_ms, value=value))


def string_meta(db: Db, key: bytes) -> Meta | None:
    return db.typed(key, "string")


def _set(call: Call) -> None:
    call.arity(2)
    key, value = call.args[0], call.args[1]
    options = parse_set_options(call, call.args[2:])
    db = call.db()
    old = string_meta(db, key) if options.get else db.get(key)
    if (options.nx and old is not None) or (options.xx and old is None):
        return
    store_string(db, key, value, options.expire_ms, options.keep_ttl)


def _setex(unit_ms: int) -> Handler:
    def handler(call: Call) -> None:
        call.arity(3, 3)
        expire_ms = relative_expiry(call, call.args[1], unit_ms)
        store_string(call.db(), call.args[0], call.args[2], expire_ms, False)

    return handler


def _setnx(call: Call) -> None:
    call.arity(2, 2)
    db = call.db()
    if db.get(call.args[0]) is None:
        store_string(db, call.args[0], call.args[1], None, False)


def _mset(call: Call) -> None:
    pairs = call.pairs(0)
    db = call.db()
    for key, value in pairs:
        store_string(db, key, value, None, False)


def _msetnx(call: Call) -> None:
    pairs = call.pairs(0)
    db = call.db()
    if any(db.get(key) is not None for key, _ in pairs):
        return
    for key, value in pairs:
        store_string(db, key, value, None, False)


def _getset(call: Call) -> None:
    call.arity(2, 2)
    db = call.db()
    string_meta(db, call.args[0])
    store_string(db, call.args[0], call.args[1], None, False)


def _getdel(call: Call) -> None:
    call.arity(1, 1)
    db = call.db()
    meta = string_meta(db, call.args[0])
    if meta is not None:
        db.delete(call.args[0], meta)


def _getex(call: Call) -> None:
    call.arity(1)
    options = parse_set_options(call, call.args[1:], getex=True)
    db = call.db()
    meta = string_meta(db, call.args[0])
    if meta is None:
        return
    if options.persist:
        meta.expire_ms = None
    elif options.expire_ms is not None:
        meta.expire_ms = options.expire_ms
    else:
        return
    db.put(call.args[0], meta)


def _incr_by(call: Call, key: bytes, increment: int) -> None:
    db = call.db()
    meta = string_meta(db, key)
    try:
        current = 0 if meta is None else parse_int(meta.value)
        total = add_int(current, increment)
    except NumberError as exc:
        raise call.error(f"value is not an integer or out of range ({exc})") from None
    _put_value(db, key, meta, str(total).encode())


def _put_value(db: Db, key: bytes, meta: Meta | None, value: bytes) -> None:
    """Replace a string's bytes, keeping its expiry (a new key has none)."""
    if meta is None:
        meta = Meta("string", None)
    meta.value = value
    db.put(key, meta)


def _incr(call: Call) -> None:
    call.arity(1, 1)
    _incr_by(call, call.args[0], 1 if call.name == "INCR" else -1)


def _incrby(call: Call) -> None:
    call.arity(2, 2)
    increment = call.integer(call.args[1])
    if call.name == "DECRBY":
        if increment == INT64_MIN:
            raise call.error("decrement would overflow")
        increment = -increment
    _incr_by(call, call.args[0], increment)


def _incrbyfloat(call: Call) -> None:
    call.arity(2, 2)
    db = call.db()
    meta = string_meta(db, call.args[0])
    try:
        value = incr_long_double(None if meta is None else meta.value, call.args[1])
    except NumberError as exc:
        raise call.error(str(exc)) from None
    _put_value(db, call.args[0], meta, value)


def _append(call: Call) -> None:
    call.arity(2, 2)
    db = call.db()
    meta = string_meta(db, call.args[0])
    current = b"" if meta is None else meta.value
    if len(current) + len(call.args[1]) > MAX_STRING:
        raise call.error("string exceeds maximum allowed size")
    _put_value(db, call.args[0], meta, current + call.args[1])


def _setrange(call: Call) -> None:
    call.arity(3, 3)
    offset = call.integer(call.args[1])
    patch = call.args[2]
    if offset < 0:
        raise call.error("offset is out of range")
    db = call.db()
    meta = string_meta(db, call.args[0])
    if not patch:
        return
    if offset + len(patch) > MAX_STRING:
        raise call.error("string exceeds maximum allowed size")
    current = b"" if meta is None else meta.value
    padded = current.ljust(offset, b"\0")
    _put_value(db, call.args[0], meta, padded[:offset] + patch + padded[offset + len(patch) :])


def _setbit(call: Call) -> None:
    call.arity(3, 3)
    offset = call.integer(call.args[1])
    if not 0 <= offset < MAX_STRING * 8:
        raise call.error("bit offset is not an integer or out of range")
    if call.args[2] not in (b"0", b"1"):
        raise call.error("bit is not an integer or out of range")
    db = call.db()
    meta = string_meta(db, call.args[0])
    data = bytearray(b"" if meta is None else meta.value)
    index, mask = offset >> 3, 0x80 >> (offset & 7)
    if len(data) <= index:
        data.extend(bytes(index + 1 - len(data)))
    data[index] = data[index] | mask if call.args[2] == b"1" else data[index] & ~mask
    _put_value(db, call.args[0], meta, bytes(data))


HANDLERS: dict[str, Handler] = {
    "SET": _set,
    "SETEX": _setex(1000),
    "PSETEX": _setex(1),
    "SETNX": _setnx,
    "MSET": _mset,
    "MSETNX": _msetnx,
    "GETSET": _getset,
    "GETDEL": _getdel,
    "GETEX": _getex,
    "INCR": _incr,
    "DECR": _incr,
    "INCRBY": _incrby,
    "DECRBY": _incrby,
    "INCRBYFLOAT": _incrbyfloat,
    "APPEND": _append,
    "SETRANGE": _setrange,
    "SETBIT": _setbit,
}
