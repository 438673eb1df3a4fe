"""Decoders for the value of each RDB value type (every type but streams,
which live in :mod:`.stream`).

After a key's type byte and name comes its value, laid out by type:

==  ====================  ==================================================
 0  string                a string
 1  list                  count, then that many strings (before Redis 3.2)
 2  set                   count, strings
 3  zset                  count, (member string, text double) pairs
 4  hash                  count, (field, value) string pairs
 5  zset_2                count, (member, binary double); Redis writes the
                          skiplist from the highest score down
 6  module (pre-GA)       module id, opaque data: refused
 7  module_2              module id, opaque data: refused
 9  hash_zipmap           one zipmap blob (Redis < 2.6)
10  list_ziplist          one ziplist blob
11  set_intset            one intset blob
12  zset_ziplist          one ziplist blob: member, score, member, score...
13  hash_ziplist          one ziplist blob: field, value, field, value...
14  list_quicklist        count, then one ziplist blob per node
16  hash_listpack         one listpack blob: field, value...
17  zset_listpack         one listpack blob: member, score...
18  list_quicklist_2      count, then per node a container (1 plain: the blob
                          is one element; 2 packed: a listpack) and a blob
20  set_listpack          one listpack blob (RDB 11)
==  ====================  ==================================================

A blob is an RDB string (so possibly LZF-compressed); its decoding errors are
re-raised at the blob's position.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NoReturn

from .errors import RdbError
from .intset import decode_intset
from .listpack import ListpackItem, decode_listpack, item_bytes, listpack_strings
from .model import Value
from .reader import RdbReader, parse_float, read_blob
from .stream import read_stream_v1, read_stream_v2, read_stream_v3
from .ziplist import decode_ziplist
from .zipmap import decode_zipmap

Decoder = Callable[[RdbReader], Value]

_MODULE_CHARSET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _strings(items: Sequence[ListpackItem]) -> list[bytes]:
    return [item_bytes(item) for item in items]


def _pairs(items: Sequence[ListpackItem], what: str) -> list[tuple[bytes, bytes]]:
    if len(items) % 2:
        raise RdbError(f"{what} has an odd number ({len(items)}) of entries")
    it = iter(_strings(items))
    return list(zip(it, it, strict=False))


def _scored(items: Sequence[ListpackItem], what: str) -> list[tuple[bytes, float]]:
    if len(items) % 2:
        raise RdbError(f"{what} has an odd number ({len(items)}) of entries")
    out: list[tuple[bytes, float]] = []
    for i in range(0, len(items), 2):
        score = items[i + 1]
        value = float(score) if isinstance(score, int) else parse_float(score)
        out.append((item_bytes(items[i]), value))
    return out


def read_string_value(reader: RdbReader) -> bytes:
    return reader.read_string()


def read_list(reader: RdbReader) -> list[bytes]:
    read = reader.read_string
    return [read() for _ in range(reader.read_count("list element"))]


def read_set(reader: RdbReader) -> set[bytes]:
    read = reader.read_string
    return {read() for _ in range(reader.read_count("set member"))}


def read_zset_text(reader: RdbReader) -> list[tuple[bytes, float]]:
    count = reader.read_count("zset member", 2)
    return [(reader.read_string(), reader.read_string_double()) for _ in range(count)]


def read_zset_binary(reader: RdbReader) -> list[tuple[bytes, float]]:
    count = reader.read_count("zset member", 2)
    return [(reader.read_string(), reader.read_binary_double()) for _ in range(count)]


def read_hash(reader: RdbReader) -> dict[bytes, bytes]:
    read = reader.read_string
    return {read(): read() for _ in range(reader.read_count("hash field", 2))}


def read_list_ziplist(reader: RdbReader) -> list[bytes]:
    return _strings(read_blob(reader, decode_ziplist, "list ziplist"))


def read_set_intset(reader: RdbReader) -> set[bytes]:
    return {str(n).encode("ascii") for n in read_blob(reader, decode_intset, "intset")}


def read_set_listpack(reader: RdbReader) -> set[bytes]:
    return set(read_blob(reader, listpack_strings, "set listpack"))


def read_zset_ziplist(reader: RdbReader) -> list[tuple[bytes, float]]:
    items = read_blob(reader, decode_ziplist, "zset ziplist")
    return _scored(items, "zset ziplist")


def read_zset_listpack(reader: RdbReader) -> list[tuple[bytes, float]]:
    items = read_blob(reader, decode_listpack, "zset listpack")
    return _scored(items, "zset listpack")


def read_hash_ziplist(reader: RdbReader) -> dict[bytes, bytes]:
    return dict(_pairs(read_blob(reader, decode_ziplist, "hash ziplist"), "hash ziplist"))


def read_hash_listpack(reader: RdbReader) -> dict[bytes, bytes]:
    return dict(_pairs(read_blob(reader, decode_listpack, "hash listpack"), "hash listpack"))


def read_list_quicklist(reader: RdbReader) -> list[bytes]:
    out: list[bytes] = []
    for _ in range(reader.read_count("quicklist node")):
        out += _strings(read_blob(reader, decode_ziplist, "quicklist ziplist node"))
    return out


def read_list_quicklist2(reader: RdbReader) -> list[bytes]:
    out: list[bytes] = []
    for _ in range(reader.read_count("quicklist node")):
        start = reader.position
        container = reader.read_length()
        if container == 1:  # plain: one big element
            out.append(reader.read_string())
        elif container == 2:  # packed: a listpack of elements
            out += read_blob(reader, listpack_strings, "quicklist listpack node")
        else:
            raise RdbError(f"quicklist node has unknown container type {container}", start)
    return out


def module_type_name(module_id: int) -> str:
    """The 9-character name of a module type from its 64-bit RDB id (6 bits
    per character, most significant first, above a 10-bit encoding version)."""
    chars = [_MODULE_CHARSET[(module_id >> (10 + 6 * k)) & 63] for k in range(9)]
    return "".join(reversed(chars))


def refuse_module(reader: RdbReader, what: str) -> NoReturn:
    """Raise the error for module data, naming the module type."""
    start = reader.position
    module_id = reader.read_length()
    raise RdbError(
        f"{what} of module type {module_type_name(module_id)!r} "
        f"(encoding version {module_id & 1023}) cannot be parsed: module data is opaque "
        "to anything but the module itself",
        start,
    )


def _read_module(reader: RdbReader) -> Value:
    refuse_module(reader, "value")


def _pairs_of(pairs: dict[bytes, bytes]) -> int:
    return 2 * len(pairs)


def read_hash_zipmap(reader: RdbReader) -> dict[bytes, bytes]:
    return read_blob(reader, decode_zipmap, "hash zipmap", _pairs_of)


#: RDB value type code -> (Redis type, encoding name, decoder).
VALUE_TYPES: dict[int, tuple[str, str, Decoder]] = {
    0: ("string", "string", read_string_value),
    1: ("list", "list", read_list),
    2: ("set", "set", read_set),
    3: ("zset", "zset", read_zset_text),
    4: ("hash", "hash", read_hash),
    5: ("zset", "zset_2", read_zset_binary),
    6: ("module", "module_pre_ga", _read_module),
    7: ("module", "module_2", _read_module),
    9: ("hash", "hash_zipmap", read_hash_zipmap),
    10: ("list", "list_ziplist", read_list_ziplist),
    11: ("set", "set_intset", read_set_intset),
    12: ("zset", "zset_ziplist", read_zset_ziplist),
    13: ("hash", "hash_ziplist", read_hash_ziplist),
    14: ("list", "list_quicklist", read_list_quicklist),
    15: ("stream", "stream_listpacks", read_stream_v1),
    16: ("hash", "hash_listpack", read_hash_listpack),
    17: ("zset", "zset_listpack", read_zset_listpack),
    18: ("list", "list_quicklist_2", read_list_quicklist2),
    19: ("stream", "stream_listpacks_2", read_stream_v2),
    20: ("set", "set_listpack", read_set_listpack),
    21: ("stream", "stream_listpacks_3", read_stream_v3),
}
