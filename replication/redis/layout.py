"""How replicated Redis data is laid out in rkv keys (documented in docs/REDIS.md).

Everything lives under one prefix P (``--prefix``, default ``redis/``)::

    P current                      {"generation": G}  the generation readers use
    P g<G>/dbs                     {"0": "d1", ...}   Redis db -> namespace (SWAPDB, FLUSHDB)
    P g<G>/<ns>/k/<key>            one metadata record per Redis key (below)
    P g<G>/o/<id>/<sub>            the sub-keys of container object <id>
    P g<G>/gc/<what>               garbage to delete: an object or a namespace

A metadata record is one JSON line, then (strings only) the raw value::

    {"t": "string", "x": null}\\n<value bytes>
    {"t": "hash", "x": 1735689600000, "o": "r17", "n": 3}
    {"t": "list", "x": null, "o": "c4711.0", "h": -2, "e": 5}   elements at positions h..e-1
    {"t": "stream", "x": null, "o": "r19", "n": 2, "last": "1-5", "added": 7, "maxdel": "0-0"}

``x`` is the absolute expiry in Unix milliseconds (or null); ``o`` the object
holding the sub-keys; ``n`` the number of fields / members / entries. Sub-keys
of an object, by type: hash ``<field>`` -> value; set ``<member>`` -> empty;
zset ``<member>`` -> the score as text (``1.5``, ``inf``); list
``<position as 16 hex digits of position + 2**63>`` -> element; stream
``<ms:016x>-<seq:016x>`` -> the entry's fields as JSON pairs (base64 where not
UTF-8, see :func:`encode_fields`). Object ids and namespaces are allocated
deterministically: ``r<n>`` for the n-th object of a full-sync load,
``c<offset>.<k>`` for the k-th created by the command ending at replication
offset <offset> (namespaces likewise ``f<offset>.<k>``; a db never renamed
uses ``d<db>``), so replaying a command after a crash allocates the same ones.

A full resync loads generation G+1 while readers keep reading G; the load's
last write switches ``current`` (and the replicator's checkpoint) to G+1 in
one transaction, then G is deleted in the background.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass, field
from typing import Any

TYPES = ("string", "list", "set", "zset", "hash", "stream")
_POSITION_BIAS = 1 << 63
_STREAM_FIELDS = ("last", "added", "maxdel", "first")


@dataclass
class Meta:
    """A Redis key's metadata record."""

    type: str
    expire_ms: int | None = None
    value: bytes = b""  # strings only
    obj: str | None = None  # containers: the object id
    count: int = 0  # hash fields, set/zset members, stream entries
    head: int = 0  # lists: first position
    end: int = 0  # lists: one past the last position
    stream: dict[str, Any] = field(default_factory=dict)  # last, added, maxdel, first

    def encode(self) -> bytes:
        header: dict[str, Any] = {"t": self.type, "x": self.expire_ms}
        if self.type == "string":
            return json.dumps(header, separators=(",", ":")).encode() + b"\n" + self.value
        header["o"] = self.obj
        if self.type == "list":
            header.update(h=self.head, e=self.end)
        else:
            header["n"] = self.count
        if self.type == "stream":
            header.update(self.stream)
        return json.dumps(header, separators=(",", ":")).encode() + b"\n"

    @classmethod
    def decode(cls, raw: bytes) -> Meta:
        line, _, rest = raw.partition(b"\n")
        header = json.loads(line)
        kind = header["t"]
        meta = cls(kind, header.get("x"))
        if kind == "string":
            meta.value = rest
            return meta
        meta.obj = str(header["o"])
        if kind == "list":
            meta.head, meta.end = int(header["h"]), int(header["e"])
        else:
            meta.count = int(header.get("n", 0))
        if kind == "stream":
            meta.stream = {k: header[k] for k in _STREAM_FIELDS if k in header}
        return meta

    @property
    def size(self) -> int:
        """Elements in the container (list length or count)."""
        return self.end - self.head if self.type == "list" else self.count


@dataclass(frozen=True)
class Layout:
    """Key builders for one prefix and generation."""

    prefix: bytes
    generation: int

    @property
    def current_key(self) -> bytes:
        return self.prefix + b"current"

    @property
    def root(self) -> bytes:
        return self.prefix + b"g%d/" % self.generation

    @property
    def dbs_key(self) -> bytes:
        return self.root + b"dbs"

    @staticmethod
    def default_namespace(db: int) -> str:
        return f"d{db}"

    def meta_prefix(self, namespace: str) -> bytes:
        return self.root + namespace.encode() + b"/k/"

    def meta_key(self, namespace: str, key: bytes) -> bytes:
        return self.meta_prefix(namespace) + key

    def object_prefix(self, obj: str) -> bytes:
        return self.root + b"o/" + obj.encode() + b"/"

    def gc_prefix(self) -> bytes:
        return self.root + b"gc/"

    def gc_object_key(self, obj: str) -> bytes:
        return self.gc_prefix() + b"o/" + obj.encode()

    def gc_namespace_key(self, namespace: str) -> bytes:
        return self.gc_prefix() + b"n/" + namespace.encode()


def generation_root(prefix: bytes, generation: int) -> bytes:
    return Layout(prefix, generation).root


def list_position(position: int) -> bytes:
    return b"%016x" % (position + _POSITION_BIAS)


def stream_id_key(ms: int, seq: int) -> bytes:
    return b"%016x-%016x" % (ms, seq)


def parse_stream_id_key(sub: bytes) -> tuple[int, int]:
    ms, _, seq = sub.partition(b"-")
    return int(ms, 16), int(seq, 16)


def format_score(score: float) -> bytes:
    if math.isinf(score):
        return b"inf" if score > 0 else b"-inf"
    return repr(float(score)).encode()


def parse_score(raw: bytes) -> float:
    return float(raw)


def _text(data: bytes) -> str | dict[str, str]:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def _bytes(item: str | dict[str, str]) -> bytes:
    if isinstance(item, dict):
        return base64.b64decode(item["base64"])
    return item.encode("utf-8")


def encode_fields(pairs: list[tuple[bytes, bytes]]) -> bytes:
    """A stream entry's fields: JSON [[field, value], ...], base64 objects where not UTF-8."""
    return json.dumps([[_text(f), _text(v)] for f, v in pairs], separators=(",", ":")).encode()


def decode_fields(raw: bytes) -> list[tuple[bytes, bytes]]:
    return [(_bytes(f), _bytes(v)) for f, v in json.loads(raw)]
