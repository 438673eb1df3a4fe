"""Reading ahead what a run of commands will read, in two round trips instead of one each.

Applying a command reads its keys' metadata records (a SET must know whether
it replaces a container) and, for field commands (HSET, SADD, ...), whether
each field exists. One rkv read per key would cap the replicator at a few
hundred commands a second. :func:`prefetch` looks at the commands waiting in
the link, reads every metadata record they name in one transaction of gets,
then the named fields of the containers found, so that applying them meets
warm cache entries. A guess that turns out wrong (a SWAPDB in between) only
costs the read it failed to save.
"""

from __future__ import annotations

from collections.abc import Sequence

from replication.redis.batch import BatchView
from replication.redis.commands.common import load_dbs, namespace_of
from replication.redis.layout import Layout, Meta

_NO_KEYS = frozenset(
    {b"ping", b"replconf", b"select", b"multi", b"exec", b"discard", b"flushdb", b"flushall"}
    | {b"swapdb", b"publish", b"spublish", b"function", b"script"}
)
_ALL_ARGS = frozenset({b"del", b"unlink"})
_TWO_KEYS = frozenset(
    {b"rename", b"renamenx", b"smove", b"lmove", b"blmove", b"rpoplpush", b"brpoplpush"} | {b"copy"}
)
_PAIRS = frozenset({b"mset", b"msetnx"})
# Field commands: where their field arguments start and the step between them.
_FIELDS = {
    b"hset": (2, 2),
    b"hmset": (2, 2),
    b"hsetnx": (2, 2),
    b"hdel": (2, 1),
    b"hincrby": (2, 2),
    b"hincrbyfloat": (2, 2),
    b"sadd": (2, 1),
    b"srem": (2, 1),
    b"zrem": (2, 1),
    b"zincrby": (3, 1),
}


def command_keys(argv: Sequence[bytes]) -> list[bytes]:
    """The Redis keys a command names (a best guess; only used to read ahead)."""
    name = argv[0].lower()
    if name in _NO_KEYS or len(argv) < 2:
        return []
    if name in _ALL_ARGS:
        return list(argv[1:])
    if name in _TWO_KEYS:
        return list(argv[1:3])
    if name in _PAIRS:
        return list(argv[1::2])
    return [argv[1]]


def prefetch(view: BatchView, layout: Layout, db: int, commands: Sequence[list[bytes]]) -> None:
    """Warm ``view``'s cache for ``commands`` (applied from db ``db`` on)."""
    dbs = load_dbs(view, layout)
    metas: list[tuple[bytes, list[bytes], bytes]] = []  # meta key, argv, key
    for argv in commands:
        name = argv[0].lower()
        if name == b"select" and len(argv) > 1 and argv[1].isdigit():
            db = int(argv[1])
            continue
        namespace = namespace_of(dbs, db)
        for key in command_keys(argv):
            metas.append((layout.meta_key(namespace, key), argv, key))
    if not metas:
        return
    view.prefetch(meta_key for meta_key, _, _ in metas)
    fields: list[bytes] = []
    for meta_key, argv, key in metas:
        where = _FIELDS.get(argv[0].lower())
        raw = view.get(meta_key) if where is not None and key == argv[1] else None
        if raw is None or where is None:
            continue
        meta = Meta.decode(raw)
        if meta.obj is None:
            continue
        start, step = where
        prefix = layout.object_prefix(meta.obj)
        fields.extend(prefix + field for field in argv[start::step])
    if fields:
        view.prefetch(fields)
