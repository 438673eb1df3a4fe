"""replication/redis/objects.py: whole values written, read back, copied and deleted."""

from __future__ import annotations

import json

import pytest

from replication.redis.layout import Layout, Meta
from replication.redis.objects import (
    StreamValue,
    copy_value,
    delete_key,
    load_meta,
    read_value,
    write_value,
)
from replication.redis.view import MemoryView

LAYOUT = Layout(b"redis/", 3)
NS = "d0"
NOW = 1_700_000_000_000


def object_keys(view: MemoryView, obj: str) -> list[bytes]:
    prefix = LAYOUT.object_prefix(obj)
    return [key[len(prefix) :] for key, _ in view.scan(prefix)]


def test_a_string_round_trips_with_its_expiry() -> None:
    view = MemoryView()
    assert write_value(view, LAYOUT, NS, b"k", "string", b"v\x00\xff", NOW + 1500, None)
    assert read_value(view, LAYOUT, NS, b"k", NOW) == ("string", b"v\x00\xff", 1500)
    raw = view.get(b"redis/g3/d0/k/k")
    assert raw == b'{"t":"string","x":%d}\nv\x00\xff' % (NOW + 1500)


def test_a_key_without_expiry_has_pttl_minus_one_and_an_expired_one_is_still_returned() -> None:
    view = MemoryView()
    write_value(view, LAYOUT, NS, b"a", "string", b"1", None, None)
    write_value(view, LAYOUT, NS, b"b", "string", b"2", NOW - 10, None)
    assert read_value(view, LAYOUT, NS, b"a", NOW) == ("string", b"1", -1)
    assert read_value(view, LAYOUT, NS, b"b", NOW) == ("string", b"2", -10)
    assert read_value(view, LAYOUT, NS, b"missing", NOW) is None


def test_a_list_keeps_its_order_at_positions_zero_to_n() -> None:
    view = MemoryView()
    write_value(view, LAYOUT, NS, b"l", "list", [b"c", b"a", b"b", b"a"], None, "r1")
    assert read_value(view, LAYOUT, NS, b"l", NOW) == ("list", [b"c", b"a", b"b", b"a"], -1)
    meta = load_meta(view, LAYOUT, NS, b"l")
    assert meta is not None
    assert (meta.obj, meta.head, meta.end) == ("r1", 0, 4)
    assert object_keys(view, "r1")[0] == b"8000000000000000"


def test_a_set_reads_back_sorted_and_counts_distinct_members() -> None:
    view = MemoryView()
    write_value(view, LAYOUT, NS, b"s", "set", {b"b", b"a", b"\xff", b"c"}, None, "r2")
    assert read_value(view, LAYOUT, NS, b"s", NOW) == ("set", [b"a", b"b", b"c", b"\xff"], -1)
    write_value(view, LAYOUT, NS, b"t", "set", [b"x", b"x"], None, "r3")
    meta = load_meta(view, LAYOUT, NS, b"t")
    assert meta is not None and meta.count == 1


def test_a_hash_round_trips() -> None:
    view = MemoryView()
    value = {b"f": b"1", b"g/h": b"", b"\x00": b"\xff"}
    write_value(view, LAYOUT, NS, b"h", "hash", value, NOW + 5, "r4")
    assert read_value(view, LAYOUT, NS, b"h", NOW) == ("hash", value, 5)
    meta = load_meta(view, LAYOUT, NS, b"h")
    assert meta is not None and meta.count == 3


def test_a_zset_reads_back_in_zrange_order() -> None:
    view = MemoryView()
    pairs = [(b"top", float("inf")), (b"b", 1.5), (b"a", 1.5), (b"low", float("-inf")), (b"z", -2)]
    write_value(view, LAYOUT, NS, b"z", "zset", pairs, None, "r5")
    found = read_value(view, LAYOUT, NS, b"z", NOW)
    assert found == (
        "zset",
        [(b"low", float("-inf")), (b"z", -2.0), (b"a", 1.5), (b"b", 1.5), (b"top", float("inf"))],
        -1,
    )
    assert view.get(LAYOUT.object_prefix("r5") + b"top") == b"inf"


def test_a_stream_round_trips_with_its_metadata() -> None:
    view = MemoryView()
    stream = StreamValue(
        entries=[(1, 0, [(b"f", b"v")]), (1, 1, [(b"a", b"1"), (b"a", b"\xff")])],
        last_id=(5, 2),
        entries_added=9,
        max_deleted_id=(3, 0),
        first_id=(1, 0),
    )
    write_value(view, LAYOUT, NS, b"x", "stream", stream, None, "r6")
    found = read_value(view, LAYOUT, NS, b"x", NOW)
    assert found == (
        "stream",
        [("1-0", [(b"f", b"v")]), ("1-1", [(b"a", b"1"), (b"a", b"\xff")])],
        -1,
    )
    header = json.loads(view.get(b"redis/g3/d0/k/x") or b"")
    assert header == {
        "t": "stream",
        "x": None,
        "o": "r6",
        "n": 2,
        "last": "5-2",
        "added": 9,
        "maxdel": "3-0",
        "first": "1-0",
    }


def test_a_stream_may_be_given_as_a_dict_and_may_be_empty() -> None:
    view = MemoryView()
    fields = {"entries": [], "last_id": (7, 1), "entries_added": 3}
    assert write_value(view, LAYOUT, NS, b"x", "stream", fields, None, "r7")
    assert read_value(view, LAYOUT, NS, b"x", NOW) == ("stream", [], -1)
    meta = load_meta(view, LAYOUT, NS, b"x")
    assert meta is not None and meta.stream["last"] == "7-1"


@pytest.mark.parametrize(
    ("kind", "empty"), [("list", []), ("set", set()), ("hash", {}), ("zset", [])]
)
def test_empty_containers_are_not_written(kind: str, empty: object) -> None:
    view = MemoryView()
    assert not write_value(view, LAYOUT, NS, b"e", kind, empty, None, "r8")
    assert view.data == {}


def test_bad_input_is_a_value_error() -> None:
    view = MemoryView()
    with pytest.raises(ValueError, match="object id"):
        write_value(view, LAYOUT, NS, b"h", "hash", {b"f": b"v"}, None, None)
    with pytest.raises(ValueError, match="unknown Redis type"):
        write_value(view, LAYOUT, NS, b"h", "module", b"", None, "r1")


def test_deleting_a_container_leaves_its_sub_keys_to_the_sweeper() -> None:
    view = MemoryView()
    write_value(view, LAYOUT, NS, b"h", "hash", {b"f": b"v"}, None, "r9")
    assert delete_key(view, LAYOUT, NS, b"h")
    assert read_value(view, LAYOUT, NS, b"h", NOW) is None
    assert view.get(b"redis/g3/gc/o/r9") == b""
    assert object_keys(view, "r9") == [b"f"]  # the sweeper's job
    assert not delete_key(view, LAYOUT, NS, b"h")


def test_deleting_a_string_writes_no_gc_record() -> None:
    view = MemoryView()
    write_value(view, LAYOUT, NS, b"s", "string", b"v", None, None)
    assert delete_key(view, LAYOUT, NS, b"s")
    assert view.data == {}


def test_copy_value_copies_the_sub_keys_into_a_new_object() -> None:
    view = MemoryView()
    write_value(view, LAYOUT, NS, b"l", "list", [b"a", b"b"], NOW + 9, "r10")
    meta = load_meta(view, LAYOUT, NS, b"l")
    assert meta is not None
    copied = copy_value(view, LAYOUT, meta, "c5.0")
    assert (copied.obj, copied.head, copied.end, copied.expire_ms) == ("c5.0", 0, 2, NOW + 9)
    assert object_keys(view, "c5.0") == object_keys(view, "r10")
    string = copy_value(view, LAYOUT, Meta("string", None, b"v"), None)
    assert (string.value, string.obj) == (b"v", None)
