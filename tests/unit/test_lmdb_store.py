"""Keys longer than LMDB's 511-byte limit, up to rkv's 4096."""

from __future__ import annotations

from pathlib import Path

from node.keyspace import MAX_KEY_BYTES
from node.state.commands import Batch, Put, encode_entry
from node.storage.config import StorageConfig
from node.storage.datadir import STATE_DIR
from node.storage.key_order import LMDB_KEY_LIMIT
from node.storage.lmdb_store import LmdbStore, StoredValue
from node.storage.recovery import open_storage
from tests.support.state import machine_of


def keys_for_test() -> list[bytes]:
    shared = b"s" * 600  # long keys sharing far more than 495 bytes
    return [
        b"a",
        b"m" * LMDB_KEY_LIMIT,
        b"m" * (LMDB_KEY_LIMIT + 1),
        b"m" * MAX_KEY_BYTES,
        *(shared + b"%03d" % i for i in range(40)),
        b"z" * 3000 + b"end",
    ]


def scan_all(storage_store: LmdbStore, prefix: bytes, page: int) -> list[bytes]:
    seen: list[bytes] = []
    after = None
    while True:
        with storage_store.reader() as view:
            items = view.scan(prefix, after, page)
        seen += [k for k, _ in items]
        if len(items) < page:
            return seen
        after = items[-1][0]


def test_long_keys_store_scan_and_replay(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, StorageConfig())
    keys = keys_for_test()
    commands = tuple(Put(k, b"value of %d" % len(k)) for k in keys)
    results = machine_of(storage).apply(1, encode_entry(Batch(commands, 1)))
    assert all(r.ok for r in results)
    for key in keys:
        found = storage.store.get(key)
        assert found is not None and found.value == b"value of %d" % len(key)
    assert storage.store.get(b"s" * 600 + b"999") is None  # same 495-byte head, absent
    for page in (1, 7, 1000):
        assert sorted(scan_all(storage.store, b"", page)) == sorted(keys)
        assert len(scan_all(storage.store, b"", page)) == len(keys)
    long_prefix = b"s" * 600 + b"01"
    assert sorted(scan_all(storage.store, long_prefix, 3)) == [
        b"s" * 600 + b"%03d" % i for i in range(10, 20)
    ]
    # order is lexicographic wherever keys differ within their first 495 bytes
    heads = [k[:10] for k in scan_all(storage.store, b"", 1000)]
    assert heads == sorted(heads)
    storage.close()
    LmdbStore.destroy(tmp_path / STATE_DIR)
    rebuilt = open_storage(tmp_path, StorageConfig())
    assert sorted(scan_all(rebuilt.store, b"", 1000)) == sorted(keys)
    rebuilt.close()


def test_many_puts_in_one_write_land_whatever_their_order(tmp_path: Path) -> None:
    """A write of many short-key puts goes through putmulti with MDB_APPEND, and puts
    everything again the ordinary way when a key is not above every key stored."""
    storage = open_storage(tmp_path / "node", StorageConfig())
    try:
        store = storage.store
        first = [(b"k%03d" % i, StoredValue(i, i, b"a%d" % i)) for i in range(0, 100, 2)]
        store.write(first, 1, 100)  # ascending, above everything: appended
        mixed = [
            (b"k%03d" % i, StoredValue(200 + i, i if i % 2 == 0 else 200 + i, b"b%d" % i))
            for i in (99, 3, 50, 1, 98, 0)
        ]
        store.write(mixed, 2, 300)  # unordered, new keys between old ones, updates
        for key, stored in mixed:
            assert store.get(key) == stored
        assert store.get(b"k002") == StoredValue(2, 2, b"a2")
        deleting = [(b"k004", None), (b"k%03d" % 7, StoredValue(400, 400, b"c"))]
        store.write(deleting, 3, 400)  # a delete among them: the per-change path
        assert store.get(b"k004") is None and store.get(b"k007") == StoredValue(400, 400, b"c")
        assert store.applied_index == 3 and store.applied_offset == 400
        long_key = b"L" * (LMDB_KEY_LIMIT + 10)
        store.write([(long_key, StoredValue(500, 500, b"long"))], 4, 500)
        with store.reader() as view:
            found = view.get_many([b"k007", b"absent", long_key, b"k004"])
        assert found == [StoredValue(400, 400, b"c"), None, StoredValue(500, 500, b"long"), None]
    finally:
        storage.close()
