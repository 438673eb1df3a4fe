"""Whole Redis values in the rkv layout (replication/redis/layout.py).

:func:`write_value` stores a value as the RDB parser produces it (full sync),
:func:`read_value` gives it back as Redis would return it (``rkv redis-dump``),
:func:`delete_key` removes a key in O(1) writes: a container's metadata record
goes, and a gc record tells the background sweeper to delete its sub-keys.

Values are plain Python objects:

======  ==========================================  ============================
type    write_value accepts                         read_value returns
======  ==========================================  ============================
string  bytes                                       bytes
list    a sequence of bytes                         list[bytes], in order
set     an iterable of bytes                        list[bytes], sorted
hash    a mapping bytes -> bytes                    dict[bytes, bytes]
zset    an iterable of (member, score)              list[(member, score)] ordered
                                                    by (score, member) as ZRANGE
stream  :class:`StreamValue` (or a dict of its      list[("ms-seq", [(field,
        fields)                                     value), ...])], by id
======  ==========================================  ============================

Redis has no empty lists, sets, hashes or sorted sets, so those are not
written; streams can be empty (XTRIM, XDEL, XADD MAXLEN 0, XGROUP CREATE
MKSTREAM) and are. Consumer groups are not stored (documented limit: a
promoted rkv copy has no groups, and XINFO-only state is lost).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from replication.redis.layout import (
    Layout,
    Meta,
    decode_fields,
    encode_fields,
    format_score,
    list_position,
    parse_score,
    parse_stream_id_key,
    stream_id_key,
)
from replication.redis.view import View

StreamId = tuple[int, int]
StreamEntry = tuple[int, int, list[tuple[bytes, bytes]]]
RedisValue = (
    bytes
    | list[bytes]
    | dict[bytes, bytes]
    | list[tuple[bytes, float]]
    | list[tuple[str, list[tuple[bytes, bytes]]]]
)


@dataclass
class StreamValue:
    """A stream as the RDB parser gives it to :func:`write_value`."""

    entries: list[StreamEntry] = field(default_factory=list)  # (ms, seq, fields), by id
    last_id: StreamId = (0, 0)
    entries_added: int = 0
    max_deleted_id: StreamId = (0, 0)
    first_id: StreamId = (0, 0)


def format_stream_id(stream_id: StreamId) -> str:
    return f"{stream_id[0]}-{stream_id[1]}"


def parse_stream_id(text: str) -> StreamId:
    ms, _, seq = text.partition("-")
    return int(ms), int(seq)


def stream_state(meta: Meta) -> StreamValue:
    """A stream's metadata (no entries) as a :class:`StreamValue`."""
    info = meta.stream
    return StreamValue(
        last_id=parse_stream_id(str(info.get("last", "0-0"))),
        entries_added=int(info.get("added", 0)),
        max_deleted_id=parse_stream_id(str(info.get("maxdel", "0-0"))),
        first_id=parse_stream_id(str(info.get("first", "0-0"))),
    )


def set_stream_state(meta: Meta, state: StreamValue) -> None:
    meta.stream = {
        "last": format_stream_id(state.last_id),
        "added": state.entries_added,
        "maxdel": format_stream_id(state.max_deleted_id),
        "first": format_stream_id(state.first_id),
    }


# --- metadata records and sub-keys -----------------------------------------


def load_meta(view: View, layout: Layout, namespace: str, key: bytes) -> Meta | None:
    raw = view.get(layout.meta_key(namespace, key))
    return None if raw is None else Meta.decode(raw)


def store_meta(view: View, layout: Layout, namespace: str, key: bytes, meta: Meta) -> None:
    view.put(layout.meta_key(namespace, key), meta.encode())


def sub_key(layout: Layout, meta: Meta, sub: bytes) -> bytes:
    """The rkv key of a container's sub-key ``sub``."""
    assert meta.obj is not None, "strings have no sub-keys"
    return layout.object_prefix(meta.obj) + sub


def element_key(layout: Layout, meta: Meta, position: int) -> bytes:
    """The rkv key of the list element at absolute ``position``."""
    return sub_key(layout, meta, list_position(position))


def scan_object(view: View, layout: Layout, meta: Meta) -> list[tuple[bytes, bytes]]:
    """Every (sub-key, value) of a container, in sub-key order."""
    assert meta.obj is not None, "strings have no sub-keys"
    prefix = layout.object_prefix(meta.obj)
    return [(k[len(prefix) :], v) for k, v in view.scan(prefix)]


def release_object(view: View, layout: Layout, meta: Meta) -> None:
    """Hand a container's sub-keys to the sweeper (a gc record)."""
    if meta.obj is not None:
        view.put(layout.gc_object_key(meta.obj), b"")


def delete_key(
    view: View, layout: Layout, namespace: str, key: bytes, meta: Meta | None = None
) -> bool:
    """Delete a key: its metadata record, plus a gc record for a container's
    object. ``meta`` saves the read when the caller has it. False if absent."""
    if meta is None:
        meta = load_meta(view, layout, namespace, key)
        if meta is None:
            return False
    view.delete(layout.meta_key(namespace, key))
    release_object(view, layout, meta)
    return True


def copy_value(view: View, layout: Layout, meta: Meta, obj: str | None) -> Meta:
    """A copy of ``meta``'s value (its sub-keys copied into object ``obj``)."""
    copied = Meta(
        meta.type,
        meta.expire_ms,
        meta.value,
        obj,
        meta.count,
        meta.head,
        meta.end,
        dict(meta.stream),
    )
    if meta.type == "string":
        copied.obj = None
        return copied
    assert obj is not None, "a container copy needs an object id"
    prefix = layout.object_prefix(obj)
    for sub, value in scan_object(view, layout, meta):
        view.put(prefix + sub, value)
    return copied


# --- write_value -------------------------------------------------------------


def write_value(  # noqa: PLR0917 (the full-sync loader's positional contract)
    view: View,
    layout: Layout,
    namespace: str,
    key: bytes,
    type_name: str,
    value: Any,
    expire_ms: int | None,
    obj_id: str | None,
) -> bool:
    """Store a whole value (see the module docstring for the shapes) under a
    fresh object ``obj_id`` (ignored for strings). Does not read or delete a
    previous value of ``key``: use :func:`delete_key` first if there may be one.
    Returns False when nothing was written (an empty list/set/hash/zset)."""
    if type_name == "string":
        store_meta(view, layout, namespace, key, Meta("string", expire_ms, value=bytes(value)))
        return True
    if obj_id is None:
        raise ValueError(f"a {type_name} needs an object id")
    meta = Meta(type_name, expire_ms, obj=obj_id)
    writer = _WRITERS.get(type_name)
    if writer is None:
        raise ValueError(f"unknown Redis type {type_name!r}")
    if not writer(view, layout, meta, value) and type_name != "stream":
        return False
    store_meta(view, layout, namespace, key, meta)
    return True


def _write_list(view: View, layout: Layout, meta: Meta, value: Sequence[bytes]) -> bool:
    for position, element in enumerate(value):
        view.put(element_key(layout, meta, position), bytes(element))
    meta.head, meta.end = 0, len(value)
    return bool(value)


def _write_set(view: View, layout: Layout, meta: Meta, value: Iterable[bytes]) -> bool:
    members = set(value)
    for member in members:
        view.put(sub_key(layout, meta, bytes(member)), b"")
    meta.count = len(members)
    return bool(members)


def _write_hash(view: View, layout: Layout, meta: Meta, value: Mapping[bytes, bytes]) -> bool:
    for name, item in value.items():
        view.put(sub_key(layout, meta, bytes(name)), bytes(item))
    meta.count = len(value)
    return bool(value)


def _write_zset(
    view: View, layout: Layout, meta: Meta, value: Iterable[tuple[bytes, float]]
) -> bool:
    scores = {bytes(member): float(score) for member, score in value}
    for member, score in scores.items():
        view.put(sub_key(layout, meta, member), format_score(score))
    meta.count = len(scores)
    return bool(scores)


def _write_stream(
    view: View, layout: Layout, meta: Meta, value: StreamValue | Mapping[str, Any]
) -> bool:
    stream = value if isinstance(value, StreamValue) else StreamValue(**value)
    for ms, seq, pairs in stream.entries:
        view.put(sub_key(layout, meta, stream_id_key(ms, seq)), encode_fields(list(pairs)))
    meta.count = len(stream.entries)
    set_stream_state(meta, stream)
    return True


_WRITERS: dict[str, Callable[[View, Layout, Meta, Any], bool]] = {
    "list": _write_list,
    "set": _write_set,
    "hash": _write_hash,
    "zset": _write_zset,
    "stream": _write_stream,
}


# --- read_value --------------------------------------------------------------


def read_value(
    view: View, layout: Layout, namespace: str, key: bytes, now_ms: int
) -> tuple[str, RedisValue, int] | None:
    """(type, value, pttl) of ``key`` as Redis would return them; pttl is -1
    without an expiry. Keys past their expiry are still returned (negative
    pttl): the master decides expiry and sends DEL."""
    meta = load_meta(view, layout, namespace, key)
    if meta is None:
        return None
    pttl = -1 if meta.expire_ms is None else meta.expire_ms - now_ms
    return meta.type, read_meta_value(view, layout, meta), pttl


def read_meta_value(view: View, layout: Layout, meta: Meta) -> RedisValue:
    """The value behind a metadata record (see :func:`read_value`)."""
    if meta.type == "string":
        return meta.value
    items = scan_object(view, layout, meta)
    if meta.type == "list":
        return [element for _, element in items]
    if meta.type == "set":
        return [member for member, _ in items]
    if meta.type == "hash":
        return dict(items)
    if meta.type == "zset":
        return zset_items(items)
    return [(format_stream_id(parse_stream_id_key(sub)), decode_fields(raw)) for sub, raw in items]


def zset_items(items: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, float]]:
    """(member, score) pairs from zset sub-keys, in ZRANGE order."""
    pairs = [(member, parse_score(raw)) for member, raw in items]
    pairs.sort(key=lambda pair: (pair[1], pair[0]))
    return pairs
