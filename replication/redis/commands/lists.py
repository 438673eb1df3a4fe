"""List commands: pushes, pops (blocking forms included), LSET, LTRIM, LMOVE, LREM, LINSERT.

A list is an object whose sub-keys are positions head..end-1 (metadata ``h``
and ``e``): pushes extend either end, pops shrink it, LSET and LTRIM touch only
the positions concerned. LREM and LINSERT shift elements: they read the whole
list and rewrite the shorter side (O(n)). Blocking commands are applied like
their non-blocking forms (a Redis 7 master propagates those): the first
non-empty key is served, and nothing happens if the master would have blocked.
"""

from __future__ import annotations

from replication.redis.commands.common import Call, Db, Handler, check_timeout, index_range
from replication.redis.layout import Meta
from replication.redis.objects import element_key, scan_object

_SIDES = {"LEFT": True, "RIGHT": False}


def push(db: Db, meta: Meta, elements: list[bytes], left: bool) -> None:
    for element in elements:
        if left:
            meta.head -= 1
            position = meta.head
        else:
            position = meta.end
            meta.end += 1
        db.view.put(element_key(db.layout, meta, position), element)


def pop(db: Db, meta: Meta, count: int, left: bool) -> list[bytes]:
    """Remove up to ``count`` elements from one end; returns them."""
    popped = []
    for _ in range(min(count, meta.size)):
        if left:
            position = meta.head
            meta.head += 1
        else:
            meta.end -= 1
            position = meta.end
        key = element_key(db.layout, meta, position)
        popped.append(db.view.get(key) or b"")
        db.view.delete(key)
    return popped


def _push(call: Call) -> None:
    call.arity(2)
    db = call.db()
    meta = db.typed(call.args[0], "list")
    if meta is None:
        if call.name.endswith("X"):
            return
        meta = db.new_container("list", call.ctx)
    push(db, meta, call.args[1:], call.name.startswith("L"))
    db.put(call.args[0], meta)


def _pop(call: Call) -> None:
    call.arity(1, 2)
    count = 1 if len(call.args) == 1 else call.integer(call.args[1])
    if count < 0:
        raise call.error("value is out of range, must be positive")
    if count == 0:
        return
    _pop_from(call.db(), call.args[0], count, call.name == "LPOP")


def _pop_from(db: Db, key: bytes, count: int, left: bool) -> bool:
    """Pop from ``key`` if it is a non-empty list; False if there was nothing."""
    meta = db.typed(key, "list")
    if meta is None:
        return False
    pop(db, meta, count, left)
    db.save(key, meta)
    return True


def _bpop(call: Call) -> None:
    """BLPOP/BRPOP key [key ...] timeout: pop one from the first non-empty list."""
    call.arity(2)
    check_timeout(call, call.args[-1])
    db = call.db()
    for key in call.args[:-1]:
        if _pop_from(db, key, 1, call.name == "BLPOP"):
            return


def _mpop(call: Call) -> None:
    """[B]LMPOP [timeout] numkeys key [key ...] LEFT|RIGHT [COUNT count]."""
    args = call.args
    if call.name == "BLMPOP":
        call.arity(1)
        check_timeout(call, args[0])
        args = args[1:]
    if not args:
        raise call.error("wrong number of arguments")
    keys, side, count = _mpop_args(call, args)
    db = call.db()
    for key in keys:
        if _pop_from(db, key, count, side):
            return


def _mpop_args(call: Call, args: list[bytes]) -> tuple[list[bytes], bool, int]:
    numkeys = call.integer(args[0])
    if numkeys <= 0 or len(args) < numkeys + 2:
        raise call.error("numkeys should be greater than 0")
    keys, rest = args[1 : numkeys + 1], args[numkeys + 1 :]
    side = _SIDES.get(call.option(rest[0]))
    count = 1
    if len(rest) == 3 and call.option(rest[1]) == "COUNT":
        count = call.integer(rest[2])
    if side is None or len(rest) not in (1, 3) or count <= 0:
        raise call.error("syntax error")
    return keys, side, count


def _lset(call: Call) -> None:
    call.arity(3, 3)
    index = call.integer(call.args[1])
    db = call.db()
    meta = db.typed(call.args[0], "list")
    if meta is None:
        raise call.error("no such key")
    position = (meta.end if index < 0 else meta.head) + index
    if not meta.head <= position < meta.end:
        raise call.error("index out of range")
    db.view.put(element_key(db.layout, meta, position), call.args[2])


def _ltrim(call: Call) -> None:
    call.arity(3, 3)
    start, stop = call.integer(call.args[1]), call.integer(call.args[2])
    db = call.db()
    meta = db.typed(call.args[0], "list")
    if meta is None:
        return
    first, last = index_range(meta.size, start, stop)
    if first == last:
        db.delete(call.args[0], meta)
        return
    for position in [*range(meta.head, meta.head + first), *range(meta.head + last, meta.end)]:
        db.view.delete(element_key(db.layout, meta, position))
    meta.head, meta.end = meta.head + first, meta.head + last
    db.put(call.args[0], meta)


def move(call: Call, source: bytes, target: bytes, from_left: bool, to_left: bool) -> None:
    """LMOVE: push onto the target before the emptied source is deleted, so a
    one-element rotation (source == target) keeps the key and its expiry."""
    db = call.db()
    meta = db.typed(source, "list")
    if meta is None:
        return
    target_meta = meta if source == target else db.typed(target, "list")
    element = pop(db, meta, 1, from_left)
    if target_meta is None:
        target_meta = db.new_container("list", call.ctx)
    push(db, target_meta, element, to_left)
    db.put(target, target_meta)
    if source != target:
        db.save(source, meta)


def _lmove(call: Call) -> None:
    blocking = call.name == "BLMOVE"
    call.arity(4 + blocking, 4 + blocking)
    if blocking:
        check_timeout(call, call.args[4])
    sides = [_SIDES.get(call.option(arg)) for arg in call.args[2:4]]
    if sides[0] is None or sides[1] is None:
        raise call.error("syntax error")
    move(call, call.args[0], call.args[1], sides[0], sides[1])


def _rpoplpush(call: Call) -> None:
    blocking = call.name == "BRPOPLPUSH"
    call.arity(2 + blocking, 2 + blocking)
    if blocking:
        check_timeout(call, call.args[2])
    move(call, call.args[0], call.args[1], False, True)


def relayout(db: Db, meta: Meta, old: list[bytes], new: list[bytes]) -> None:
    """Turn list ``old`` (at meta's positions) into ``new`` with the fewest
    writes: keeping either the head or the end position in place."""
    old_at = {meta.head + i: element for i, element in enumerate(old)}
    plans = []
    for new_head in (meta.head, meta.end - len(new)):
        new_at = {new_head + i: element for i, element in enumerate(new)}
        puts = [(p, e) for p, e in new_at.items() if old_at.get(p) != e]
        deletes = [p for p in old_at if p not in new_at]
        plans.append((len(puts) + len(deletes), new_head, puts, deletes))
    _, new_head, puts, deletes = min(plans, key=lambda plan: plan[0])
    for position, element in puts:
        db.view.put(element_key(db.layout, meta, position), element)
    for position in deletes:
        db.view.delete(element_key(db.layout, meta, position))
    meta.head, meta.end = new_head, new_head + len(new)


def _elements(db: Db, meta: Meta) -> list[bytes]:
    return [element for _, element in scan_object(db.view, db.layout, meta)]


def _lrem(call: Call) -> None:
    call.arity(3, 3)
    count = call.integer(call.args[1])
    db = call.db()
    meta = db.typed(call.args[0], "list")
    if meta is None:
        return
    old = _elements(db, meta)
    indexes = [i for i, element in enumerate(old) if element == call.args[2]]
    if count > 0:
        indexes = indexes[:count]
    elif count < 0:
        indexes = indexes[count:]
    if not indexes:
        return
    removed = set(indexes)
    new = [element for i, element in enumerate(old) if i not in removed]
    if not new:
        db.delete(call.args[0], meta)
        return
    relayout(db, meta, old, new)
    db.put(call.args[0], meta)


def _linsert(call: Call) -> None:
    call.arity(4, 4)
    where = call.option(call.args[1])
    if where not in ("BEFORE", "AFTER"):
        raise call.error("syntax error")
    db = call.db()
    meta = db.typed(call.args[0], "list")
    if meta is None:
        return
    old = _elements(db, meta)
    if call.args[2] not in old:
        return
    index = old.index(call.args[2]) + (where == "AFTER")
    relayout(db, meta, old, [*old[:index], call.args[3], *old[index:]])
    db.put(call.args[0], meta)


HANDLERS: dict[str, Handler] = {
    "LPUSH": _push,
    "RPUSH": _push,
    "LPUSHX": _push,
    "RPUSHX": _push,
    "LPOP": _pop,
    "RPOP": _pop,
    "BLPOP": _bpop,
    "BRPOP": _bpop,
    "LMPOP": _mpop,
    "BLMPOP": _mpop,
    "LSET": _lset,
    "LTRIM": _ltrim,
    "LMOVE": _lmove,
    "BLMOVE": _lmove,
    "RPOPLPUSH": _rpoplpush,
    "BRPOPLPUSH": _rpoplpush,
    "LREM": _lrem,
    "LINSERT": _linsert,
}
