"""`rkv redis-dump`: the replicated dataset as JSON Lines, one Redis key per line.

Each line is ``{"db", "key", "type", "value", "pttl"}`` with the value as
Redis would return it: a string; a hash as an object; a set as a sorted list;
a list in order; a zset as ``[member, score]`` pairs in ZRANGE order; a
stream as ``[id, {field: value}]`` entries. Byte strings are UTF-8 text where
valid and ``{"base64": ...}`` otherwise; a hash field or stream field name
that is not UTF-8 becomes ``"base64:" + base64``. Infinite scores are the
strings ``"inf"``/``"-inf"``. ``pttl`` is -1 without an expiry, else the
milliseconds left. Lines are ordered by db, then key bytes. The same format
is what the tests produce from the real Redis to compare.
"""

from __future__ import annotations

import base64
import json
import math
import time
from collections.abc import Iterator
from typing import Any, TextIO

from replication.redis.batch import BatchView
from replication.redis.layout import Layout
from replication.redis.objects import read_value
from replication.redis.view import View

MAX_DBS = 16


class NothingReplicated(Exception):
    """No generation under the prefix: nothing has been replicated there yet."""


def text(data: bytes) -> str | dict[str, str]:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def name_text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()


def score_json(score: float) -> float | str:
    if math.isinf(score):
        return "inf" if score > 0 else "-inf"
    return score


def value_json(kind: str, value: Any) -> Any:
    """A value as read_value returns it, in the dump's JSON form."""
    if kind == "string":
        return text(value)
    if kind == "hash":
        return {name_text(f): text(v) for f, v in sorted(value.items())}
    if kind in ("set", "list"):
        return [text(item) for item in value]
    if kind == "zset":
        return [[text(member), score_json(score)] for member, score in value]
    if kind == "stream":
        return [
            [entry_id, {name_text(f): text(v) for f, v in fields}] for entry_id, fields in value
        ]
    raise ValueError(f"unknown type {kind!r}")


def line(db: int, key: bytes, kind: str, value: Any, pttl: int) -> str:
    record = {"db": db, "key": text(key), "type": kind, "value": value_json(kind, value)}
    record["pttl"] = pttl
    return json.dumps(record, sort_keys=False, ensure_ascii=False)


def current_layout(view: View, prefix: bytes) -> Layout:
    raw = view.get(prefix + b"current")
    if raw is None:
        raise NothingReplicated(f"nothing has been replicated under the prefix {prefix!r}")
    return Layout(prefix, int(json.loads(raw)["generation"]))


def namespaces(view: View, layout: Layout, db: int | None) -> Iterator[tuple[int, str]]:
    mapping: dict[str, str] = json.loads(view.get(layout.dbs_key) or b"{}")
    top = max([MAX_DBS - 1, *(int(k) for k in mapping)])
    for number in [db] if db is not None else range(top + 1):
        yield number, mapping.get(str(number), Layout.default_namespace(number))


def dump(view: BatchView, prefix: bytes, out: TextIO, db: int | None = None) -> int:
    """Write the dump of ``prefix`` (every db, or ``db``); returns the keys written."""
    layout = current_layout(view, prefix)
    now_ms = int(time.time() * 1000)
    written = 0
    for number, namespace in namespaces(view, layout, db):
        meta_prefix = layout.meta_prefix(namespace)
        for meta_key, meta in view.scan(meta_prefix):
            view.remember(meta_key, meta)  # read_value reads it again
            key = meta_key[len(meta_prefix) :]
            found = read_value(view, layout, namespace, key, now_ms)
            if found is None:
                continue
            kind, value, pttl = found
            out.write(line(number, key, kind, value, pttl) + "\n")
            written += 1
    return written
