"""Set commands: SADD, SREM, SMOVE, SPOP, SINTERSTORE, SUNIONSTORE, SDIFFSTORE.

A set is an object with one empty sub-key per member. SPOP picks members at
random: a Redis 7 master propagates it as SREM (or DEL when it empties the
set), and only the forms whose outcome is certain are applied here (a count
of 0, or at least the set's size); any other SPOP raises UnsupportedCommand.
"""

from __future__ import annotations

from replication.redis.commands.common import Call, Db, Handler, UnsupportedCommand
from replication.redis.layout import Meta
from replication.redis.objects import scan_object


def add_member(db: Db, meta: Meta, member: bytes) -> bool:
    sub = db.sub(meta, member)
    if db.view.get(sub) is not None:
        return False
    db.view.put(sub, b"")
    meta.count += 1
    return True


def remove_member(db: Db, meta: Meta, member: bytes) -> bool:
    sub = db.sub(meta, member)
    if db.view.get(sub) is None:
        return False
    db.view.delete(sub)
    meta.count -= 1
    return True


def _sadd(call: Call) -> None:
    call.arity(2)
    db = call.db()
    meta = db.typed(call.args[0], "set") or db.new_container("set", call.ctx)
    for member in call.args[1:]:
        add_member(db, meta, member)
    db.put(call.args[0], meta)


def _srem(call: Call) -> None:
    call.arity(2)
    db = call.db()
    meta = db.typed(call.args[0], "set")
    if meta is None:
        return
    for member in call.args[1:]:
        remove_member(db, meta, member)
    db.save(call.args[0], meta)


def _smove(call: Call) -> None:
    call.arity(3, 3)
    source, target, member = call.args
    db = call.db()
    meta = db.typed(source, "set")
    if meta is None:
        return
    db.typed(target, "set")  # the master refuses a target of another type
    if source == target or not remove_member(db, meta, member):
        return
    db.save(source, meta)
    target_meta = db.typed(target, "set") or db.new_container("set", call.ctx)
    add_member(db, target_meta, member)
    db.put(target, target_meta)


def _spop(call: Call) -> None:
    call.arity(1, 2)
    count = 1 if len(call.args) == 1 else call.integer(call.args[1])
    if count < 0:
        raise call.error("value is out of range, must be positive")
    db = call.db()
    meta = db.typed(call.args[0], "set")
    if meta is None or count == 0:
        return
    if count < meta.count:
        raise UnsupportedCommand(
            call.name, "pops random members (a Redis 7 master propagates SREM instead)"
        )
    db.delete(call.args[0], meta)


def set_members(db: Db, key: bytes) -> set[bytes]:
    meta = db.typed(key, "set")
    if meta is None:
        return set()
    return {member for member, _ in scan_object(db.view, db.layout, meta)}


def store_set(call: Call, db: Db, key: bytes, members: set[bytes]) -> None:
    """Replace ``key`` (any type, expiry cleared) by a set of ``members``, or delete it."""
    db.delete(key)
    if not members:
        return
    meta = db.new_container("set", call.ctx)
    for member in sorted(members):
        add_member(db, meta, member)
    db.put(key, meta)


def _store(call: Call) -> None:
    call.arity(2)
    db = call.db()
    sources = [set_members(db, key) for key in call.args[1:]]
    result = set(sources[0])
    for other in sources[1:]:
        if call.name == "SINTERSTORE":
            result &= other
        elif call.name == "SUNIONSTORE":
            result |= other
        else:
            result -= other
    store_set(call, db, call.args[0], result)


HANDLERS: dict[str, Handler] = {
    "SADD": _sadd,
    "SREM": _srem,
    "SMOVE": _smove,
    "SPOP": _spop,
    "SINTERSTORE": _store,
    "SUNIONSTORE": _store,
    "SDIFFSTORE": _store,
}
