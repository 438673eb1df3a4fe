"""The materialized state in LMDB: the only module that imports lmdb.

Two named databases:

- ``data``: LMDB key -> ``version u64 | create_version u64 | suffix_len u16 |
  key suffix | value`` (big-endian)

A key is stored under its LMDB key (node/storage/key_order.py: itself up
to 511 bytes, else its first 495 bytes and a digest); for a long key, the
rest of the key travels in the value. Scans therefore stay in key order
except among long keys that share their first 495 bytes (ordered by digest
there); a scan still returns every key exactly once, because cursors are
positions in LMDB order.
- ``meta``: ``applied_index`` and ``applied_offset`` (u64 each)

LMDB is a cache of the commit log (RIP-22: the KV state needs no WAL of its
own). It is opened without fsync on commit: a process crash loses nothing
(the pages are in the kernel), and after a power loss the node replays the
log from LMDB's applied offset, or rebuilds LMDB from the log entirely if it
cannot be trusted. :meth:`LmdbStore.sync` flushes it at checkpoints.

When the map is full the write is retried after doubling the map size; map
growth waits for in-flight reads to finish (LMDB requires no active
transaction in the process while the map is resized).

Long reads (a consistency audit's export, node/audit/export.py) use a
:class:`DetachedView`: opened on the apply thread right after an entry's
commit, handed to a worker thread, closed there. A resize does not wait for
one to finish: it interrupts it (the view's ``interrupted`` event is set, the
export stops at its next chunk, fails with a clear error, and closes the view)
and goes on once it is closed. Waiting instead would stall the apply thread,
and with it every write of the cluster on a leader, for as long as the export
runs. To make that rare, opening a detached view first doubles the map when
more than half of it is in use (and no other detached view is open): the
export can then absorb as much new data as the whole store holds before the
map fills. A worker holding a detached view must never open another reader
(``reader()`` waits behind a resize that waits for the detached view).
"""

from __future__ import annotations

import os
import shutil
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple, cast

import lmdb

from node import metrics
from node.errors import StoreCorruptError, StoreError, StoreFullError
from node.keyspace import RESERVED_PREFIX
from node.storage.datadir import fsync_directory, make_directories
from node.storage.key_order import LMDB_KEY_LIMIT, LONG_KEY_PREFIX, lmdb_key
from node.storage.record import Record, RecordOp

_VALUE_HEADER = struct.Struct(">QQH")
_U64 = struct.Struct(">Q")
_APPLIED_INDEX = b"applied_index"
_APPLIED_OFFSET = b"applied_offset"
# The first key after every key that starts with RESERVED_PREFIX.
_RESERVED_END = RESERVED_PREFIX[:-1] + bytes((RESERVED_PREFIX[-1] + 1,))
_MAX_GROWTHS = 16


class StoredValue(NamedTuple):
    version: int
    create_version: int
    value: bytes


Change = tuple[bytes, StoredValue | None]
"""A decided change to one key: its new stored value, or None for a delete."""


def _pack(key: bytes, version: int, create_version: int, value: bytes) -> bytes:
    if len(key) <= LMDB_KEY_LIMIT:
        return _VALUE_HEADER.pack(version, create_version, 0) + value
    suffix = key[LONG_KEY_PREFIX:]
    return _VALUE_HEADER.pack(version, create_version, len(suffix)) + suffix + value


def _decode_value(raw: bytes) -> StoredValue:
    version, create_version, suffix_len = _VALUE_HEADER.unpack_from(raw, 0)
    return StoredValue(version, create_version, raw[_VALUE_HEADER.size + suffix_len :])


def _decode_item(stored_key: bytes, raw: bytes) -> tuple[bytes, StoredValue]:
    version, create_version, suffix_len = _VALUE_HEADER.unpack_from(raw, 0)
    start = _VALUE_HEADER.size
    key = stored_key
    if suffix_len:
        key = stored_key[:LONG_KEY_PREFIX] + raw[start : start + suffix_len]
    return key, StoredValue(version, create_version, raw[start + suffix_len :])


class _ReaderGate:
    """Lets many readers in at once, or one map resize with no reader.

    A long reader (a :class:`DetachedView`) registers an event that a resize sets
    before it waits: the holder is asked to let go instead of being waited for.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._resizing = False
        self._long: set[threading.Event] = set()

    def enter(self, interrupt: threading.Event | None = None) -> None:
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._readers += 1
            if interrupt is not None:
                self._long.add(interrupt)

    def leave(self, interrupt: threading.Event | None = None) -> None:
        with self._cond:
            self._readers -= 1
            if interrupt is not None:
                self._long.discard(interrupt)
            self._cond.notify_all()

    @property
    def long_readers(self) -> int:
        with self._cond:
            return len(self._long)

    @contextmanager
    def reading(self) -> Iterator[None]:
        self.enter()
        try:
            yield
        finally:
            self.leave()

    @contextmanager
    def resizing(self) -> Iterator[None]:
        with self._cond:
            self._resizing = True
            for interrupt in self._long:
                interrupt.set()
            while self._readers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._resizing = False
                self._cond.notify_all()


class ReadView:
    """Reads from one LMDB snapshot; valid only inside :meth:`LmdbStore.reader`."""

    def __init__(
        self,
        txn: lmdb.Transaction,
        data_db: lmdb._Database,
        meta_db: lmdb._Database | None = None,
    ) -> None:
        self._txn = txn
        self._data = data_db
        self._meta = meta_db

    def get(self, key: bytes) -> StoredValue | None:
        stored_key = key if len(key) <= LMDB_KEY_LIMIT else lmdb_key(key)  # hot path inline
        raw = self._txn.get(stored_key, db=self._data)
        return None if raw is None else _decode_value(cast(bytes, raw))

    def get_many(self, keys: Sequence[bytes]) -> list[StoredValue | None]:
        """:meth:`get` of each key, in order (one loop: a bulk load's chunk)."""
        get, data = self._txn.get, self._data
        found: list[StoredValue | None] = []
        append = found.append
        for key in keys:
            raw = get(key if len(key) <= LMDB_KEY_LIMIT else lmdb_key(key), db=data)
            append(None if raw is None else _decode_value(cast(bytes, raw)))
        return found

    def scan(
        self,
        prefix: bytes = b"",
        start_after: bytes | None = None,
        limit: int = 100,
        include_internal: bool = False,
    ) -> list[tuple[bytes, StoredValue]]:
        """Up to ``limit`` keys starting with ``prefix``, in LMDB order, after ``start_after``."""
        return self.scan_page(prefix, start_after, limit, include_internal=include_internal)[0]

    def scan_page(
        self,
        prefix: bytes = b"",
        start_after: bytes | None = None,
        limit: int = 100,
        max_bytes: int | None = None,
        *,
        include_internal: bool = False,
    ) -> tuple[list[tuple[bytes, StoredValue]], bool]:
        """:meth:`scan`, stopping also before the keys and values would pass ``max_bytes``
        (the first item always comes); and whether more items follow the page."""
        items: list[tuple[bytes, StoredValue]] = []
        cursor = self._txn.cursor(db=self._data)
        range_prefix = prefix[:LONG_KEY_PREFIX]
        skip = None if start_after is None else lmdb_key(start_after)
        start = range_prefix if skip is None or skip < range_prefix else skip
        if not cursor.set_range(start):
            return items, False
        size = 0
        while len(items) <= limit:
            stored_key = cast(bytes, cursor.key())  # buffers=False: always bytes
            if not stored_key.startswith(range_prefix):
                break
            if stored_key == skip:
                pass
            elif not include_internal and stored_key.startswith(RESERVED_PREFIX):
                if not cursor.set_range(_RESERVED_END):
                    break
                continue
            else:
                key, stored = _decode_item(stored_key, cast(bytes, cursor.value()))
                if key.startswith(prefix):
                    size += len(key) + len(stored.value)
                    if len(items) == limit or (
                        max_bytes is not None and items and size > max_bytes
                    ):
                        return items, True  # a next item exists: the page ends before it
                    items.append((key, stored))
            if not cursor.next():
                break
        return items, False

    def applied(self) -> tuple[int, int]:
        """The applied raft index and offset as of this snapshot (not the live ones)."""
        if self._meta is None:
            raise StoreError("this read view was opened without the meta database")
        return (
            _read_u64(cast("bytes | None", self._txn.get(_APPLIED_INDEX, db=self._meta))),
            _read_u64(cast("bytes | None", self._txn.get(_APPLIED_OFFSET, db=self._meta))),
        )

    def all_items(
        self,
        chunk_items: int = 1000,
        chunk_bytes: int = 4 * 1024 * 1024,
        *,
        after: bytes | None = None,
    ) -> Iterator[list[tuple[bytes, StoredValue]]]:
        """Every key (after the key ``after``, if given), internal ones included, in
        LMDB order, in lists of at most ``chunk_items`` items or about ``chunk_bytes``
        of values (memory stays bounded by one chunk). Valid only while the view is:
        consume it inside ``reader()``."""
        cursor = self._txn.cursor(db=self._data)
        if after is not None:
            start = lmdb_key(after)
            if not cursor.set_range(start):
                return
            if cursor.key() == start and not cursor.next():
                return
        else:
            cursor.first()
        chunk: list[tuple[bytes, StoredValue]] = []
        size = 0
        for stored_key, raw in cursor.iternext(keys=True, values=True):
            item = _decode_item(cast(bytes, stored_key), cast(bytes, raw))
            chunk.append(item)
            size += len(item[0]) + len(item[1].value)
            if len(chunk) >= chunk_items or size >= chunk_bytes:
                yield chunk
                chunk, size = [], 0
        if chunk:
            yield chunk

    def lmdb_keys(self) -> Iterator[bytes]:
        """Every LMDB key in order, internal ones included, without the values. A key
        longer than 511 bytes appears as it is stored: its first 495 bytes and a
        digest (so ``lmdb_key[:495]`` is always a prefix of the user key)."""
        cursor = self._txn.cursor(db=self._data)
        for stored_key in cursor.iternext(keys=True, values=False):
            yield cast(bytes, stored_key)

    def count_prefix(self, prefix: bytes) -> int:
        """How many keys start with ``prefix`` (at most 495 bytes, so that LMDB's
        order keeps them together), reading keys only."""
        if len(prefix) > LONG_KEY_PREFIX:
            raise ValueError(f"a counted prefix is at most {LONG_KEY_PREFIX} bytes")
        cursor = self._txn.cursor(db=self._data)
        if not cursor.set_range(prefix):
            return 0
        count = 0
        for key in cursor.iternext(values=False):
            if not cast(bytes, key).startswith(prefix):
                break
            count += 1
        return count

    def count(self, include_internal: bool = False) -> int:
        total: int = self._txn.stat(self._data)["entries"]
        if include_internal:
            return total
        cursor = self._txn.cursor(db=self._data)
        internal = 0
        if cursor.set_range(RESERVED_PREFIX):
            for key in cursor.iternext(values=False):
                if not cast(bytes, key).startswith(RESERVED_PREFIX):
                    break
                internal += 1
        return total - internal


class DetachedView(ReadView):
    """A read view that outlives the call that opened it: :meth:`LmdbStore.open_detached`
    opens it on the apply thread, another thread reads it and calls :meth:`close`.

    py-lmdb opens every environment with MDB_NOTLS (its documentation: read
    transactions may migrate freely across threads), so a read transaction begun
    on one thread may be used and aborted on another, as long as one thread uses
    it at a time. Only the thread that owns the view may read it; ``close`` is
    safe from any thread, and more than once.

    ``interrupted`` is set when a map resize (or a state install) needs every
    transaction closed: the owner must stop reading and close the view soon (see
    the module docs). Until it is closed LMDB cannot reuse the pages it sees.
    """

    def __init__(
        self,
        txn: lmdb.Transaction,
        data_db: lmdb._Database,
        meta_db: lmdb._Database,
        gate: _ReaderGate,
        interrupted: threading.Event,
    ) -> None:
        super().__init__(txn, data_db, meta_db)
        self._gate = gate
        self._close_lock = threading.Lock()
        self._closed = False
        self.interrupted = interrupted

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._txn.abort()
        finally:
            self._gate.leave(self.interrupted)


class LmdbStore:
    def __init__(self, env: lmdb.Environment, path: Path) -> None:
        """Use :meth:`open`."""
        self.path = path
        self._env = env
        self._data = env.open_db(b"data")
        self._meta = env.open_db(b"meta")
        self._gate = _ReaderGate()
        with env.begin(db=self._meta) as txn:
            self.applied_index = _read_u64(txn.get(_APPLIED_INDEX))
            self.applied_offset = _read_u64(txn.get(_APPLIED_OFFSET))

    @staticmethod
    def _open_env(path: Path, map_size: int) -> lmdb.Environment:
        return lmdb.open(
            str(path),
            map_size=map_size,
            max_dbs=4,
            sync=False,
            metasync=False,
            readahead=False,
            max_readers=256,
        )

    @classmethod
    def open(cls, path: Path, map_size: int) -> LmdbStore:
        make_directories(path)
        try:
            store = cls(cls._open_env(path, map_size), path)
        except (lmdb.CorruptedError, lmdb.InvalidError, lmdb.PageNotFoundError) as exc:
            raise StoreCorruptError(f"LMDB at {path} is damaged: {exc}") from exc
        except lmdb.Error as exc:
            raise StoreError(f"cannot open LMDB at {path}: {exc}") from exc
        fsync_directory(path)  # the names of the files LMDB may just have created
        return store

    @staticmethod
    def destroy(path: Path) -> None:
        """Remove an LMDB environment from disk (it will be rebuilt from the log)."""
        shutil.rmtree(path, ignore_errors=True)

    @property
    def map_size(self) -> int:
        size: int = self._env.info()["map_size"]
        return size

    # -- reading ---------------------------------------------------------------

    @contextmanager
    def reader(self) -> Iterator[ReadView]:
        """A consistent snapshot for several reads; keep it short."""
        with self._gate.reading(), self._env.begin(buffers=False) as txn:
            yield ReadView(txn, self._data, self._meta)

    def get(self, key: bytes) -> StoredValue | None:
        with self.reader() as view:
            return view.get(key)

    def open_detached(self, grow_first: bool = True) -> DetachedView:
        """A read view of the state as of now, for a long read on another thread
        (:class:`DetachedView`); the caller must see that it is closed.

        With ``grow_first`` only the apply thread calls this (between writes): when
        more than half the map is in use and no other detached view is open, the map
        is doubled first. Without it any thread may (a later resize interrupts the
        view instead).
        """
        if grow_first and self._gate.long_readers == 0 and 2 * self.used_bytes > self.map_size:
            self._grow()
        view: DetachedView | None = None
        interrupt = threading.Event()
        self._gate.enter(interrupt)
        try:
            txn = self._env.begin(buffers=False)
            view = DetachedView(txn, self._data, self._meta, self._gate, interrupt)
        finally:
            if view is None:
                self._gate.leave(interrupt)
        return view

    @property
    def used_bytes(self) -> int:
        """How much of the map holds pages (LMDB's last page number times the page size)."""
        info = self._env.info()
        stat = self._env.stat()
        return (int(info["last_pgno"]) + 1) * int(stat["psize"])

    # -- writing (only the apply thread) -----------------------------------------

    def write(self, changes: Sequence[Change], applied_index: int, applied_offset: int) -> None:
        """Write decided changes (key -> new value, or None to delete) and advance
        the applied index and offset, in one write transaction."""
        self._retrying_on_full_map(
            lambda txn: self._put_changes(txn, changes), applied_index, applied_offset
        )

    def apply_records(self, records: Sequence[Record], applied_index: int) -> None:
        """Apply log records (replay): a put takes the create version it logged; a
        tombstone removes the key."""
        applied_offset = records[-1].offset if records else self.applied_offset
        self._retrying_on_full_map(
            lambda txn: self._put_records(txn, records), applied_index, applied_offset
        )

    def _retrying_on_full_map(
        self,
        body: Callable[[lmdb.Transaction], None],
        applied_index: int,
        applied_offset: int,
    ) -> None:
        for _ in range(_MAX_GROWTHS):
            started = time.perf_counter()
            try:
                with self._env.begin(write=True) as txn:
                    body(txn)
                    txn.put(_APPLIED_INDEX, _U64.pack(applied_index), db=self._meta)
                    txn.put(_APPLIED_OFFSET, _U64.pack(applied_offset), db=self._meta)
            except lmdb.MapFullError:
                self._grow()
                continue
            except lmdb.DiskError as exc:  # ENOSPC
                raise StoreFullError(f"LMDB write failed in {self.path}: {exc}") from exc
            except lmdb.Error as exc:
                raise StoreError(f"LMDB write failed in {self.path}: {exc}") from exc
            if metrics.enabled:
                metrics.LMDB_WRITE.observe(time.perf_counter() - started)
            self.applied_index = applied_index
            self.applied_offset = applied_offset
            return
        raise StoreFullError(
            f"LMDB map in {self.path} is still full after growing to {self.map_size}"
        )

    # A put first tries MDB_APPEND, which succeeds only for a key above every key
    # stored: LMDB then fills the last leaf page instead of splitting it in half, so
    # keys written in ascending order (bulk loads, a restore in key order) take about
    # 1.3x their bytes with 1 KiB values instead of 2x. Any other key falls back to an
    # ordinary put (the failed attempt only compares with the last key).

    def _put_changes(self, txn: lmdb.Transaction, changes: Sequence[Change]) -> None:
        data = self._data
        pack = _VALUE_HEADER.pack
        if len(changes) > 1 and self._put_all(txn, changes):
            return
        put = txn.put
        for key, new in changes:
            if len(key) > LMDB_KEY_LIMIT:
                if new is None:
                    txn.delete(lmdb_key(key), db=data)
                else:
                    packed = _pack(key, new.version, new.create_version, new.value)
                    put(lmdb_key(key), packed, db=data)
            elif new is None:  # the common, short-key case, inlined: the apply hot path
                txn.delete(key, db=data)
            else:
                packed = pack(new.version, new.create_version, 0) + new.value
                if not put(key, packed, db=data, append=True):
                    put(key, packed, db=data)

    def _put_all(self, txn: lmdb.Transaction, changes: Sequence[Change]) -> bool:
        """Many puts of short keys (a bulk load's entry) in one C loop (putmulti), tried
        with MDB_APPEND first; False, with nothing written, for any other changes. If a
        key is not above every key stored the append stops adding: then every item is
        put again the ordinary way (the same values: the result is the same)."""
        pack = _VALUE_HEADER.pack
        items = []
        for key, new in changes:
            if new is None or len(key) > LMDB_KEY_LIMIT:
                return False
            items.append((key, pack(new.version, new.create_version, 0) + new.value))
        cursor = txn.cursor(db=self._data)
        _, added = cursor.putmulti(items, append=True)
        if added < len(items):
            cursor.putmulti(items)
        return True

    def _put_records(self, txn: lmdb.Transaction, records: Sequence[Record]) -> None:
        data = self._data
        for record in records:
            key = record.key
            stored_key = lmdb_key(key)
            if record.op is RecordOp.PUT:
                create = record.create_version
                if not create:  # a record from before create versions were logged
                    old = txn.get(stored_key, db=data)
                    create = record.offset if old is None else _VALUE_HEADER.unpack_from(old)[1]
                packed = _pack(key, record.offset, create, record.value)
                if not txn.put(stored_key, packed, db=data, append=True):
                    txn.put(stored_key, packed, db=data)
            else:
                txn.delete(stored_key, db=data)

    def replace_with(self, source: Path) -> None:
        """Swap this store's files for the closed, synced environment in ``source``.

        Readers wait at the gate meanwhile and then see the new state; only the
        apply thread calls this (it also writes). ``source`` is consumed.
        """
        with self._gate.resizing():
            map_size = max(self.map_size, lmdb_file_size(source))
            self._env.sync(True)
            self._env.close()
            old = self.path.with_name(self.path.name + ".replaced")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(self.path, old)
            os.replace(source, self.path)
            fsync_directory(self.path.parent)
            shutil.rmtree(old)
            self._env = self._open_env(self.path, map_size)
            self._data = self._env.open_db(b"data")
            self._meta = self._env.open_db(b"meta")
            with self._env.begin(db=self._meta) as txn:
                self.applied_index = _read_u64(txn.get(_APPLIED_INDEX))
                self.applied_offset = _read_u64(txn.get(_APPLIED_OFFSET))

    def _grow(self) -> None:
        with self._gate.resizing():
            new_size = self.map_size * 2
            self._env.set_mapsize(new_size)

    def sync(self) -> None:
        self._env.sync(True)

    def clear_stale_readers(self) -> int:
        """Free the reader slots of processes that died (an HTTP worker killed while
        reading would otherwise pin old pages until the node restarts)."""
        cleared: int = self._env.reader_check()
        return cleared

    def close(self) -> None:
        self._env.sync(True)
        self._env.close()


def lmdb_file_size(path: Path) -> int:
    """The size of the environment's data file in ``path`` (0 if absent)."""
    try:
        return (path / "data.mdb").stat().st_size
    except FileNotFoundError:
        return 0


def _read_u64(raw: bytes | None) -> int:
    return 0 if raw is None else int(_U64.unpack(raw)[0])


_SWAP_WAIT_SECONDS = 2.0
"""How long a read-only reader waits for the owner's swap of the files (a state install)
to finish: the directory is missing for the moment between its two renames."""


class ReadOnlyStore:
    """Another process's view of a node's LMDB (the HTTP workers, node/cli/http_worker.py):
    opened read-only, never written.

    The owner may swap the whole directory for an installed state
    (:meth:`LmdbStore.replace_with`) or grow the map: each :meth:`reader` first checks
    that the data file is still the one it opened (else it reopens the new one) and
    adopts a grown map, so a read transaction begun after the owner applied something
    sees it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._env: lmdb.Environment | None = None
        self._identity: tuple[int, int] | None = None
        self._open()

    def _file_identity(self) -> tuple[int, int] | None:
        try:
            stat = os.stat(self.path / "data.mdb")
        except FileNotFoundError:
            return None
        return stat.st_dev, stat.st_ino

    def _open(self) -> None:
        deadline = time.monotonic() + _SWAP_WAIT_SECONDS
        identity = self._file_identity()
        while identity is None:
            if time.monotonic() >= deadline:
                raise StoreError(f"no LMDB at {self.path}")
            time.sleep(0.005)
            identity = self._file_identity()
        if self._env is not None:
            self._env.close()
            self._env = None
        try:
            env = lmdb.open(
                str(self.path),
                readonly=True,
                create=False,
                max_dbs=4,
                readahead=False,
                max_readers=256,
            )
            self._data = env.open_db(b"data", create=False)
            self._meta = env.open_db(b"meta", create=False)
        except lmdb.Error as exc:
            raise StoreError(f"cannot open LMDB at {self.path} read-only: {exc}") from exc
        self._env = env
        self._identity = identity

    def _begin(self) -> lmdb.Transaction:
        if self._env is None or self._file_identity() != self._identity:
            self._open()
        assert self._env is not None
        try:
            return self._env.begin(buffers=False)
        except lmdb.MapResizedError:
            self._env.set_mapsize(0)  # adopt the size the owner grew the map to
            return self._env.begin(buffers=False)

    @contextmanager
    def reader(self) -> Iterator[ReadView]:
        """A consistent snapshot of what the owner had committed when it began."""
        txn = self._begin()
        try:
            yield ReadView(txn, self._data, self._meta)
        finally:
            txn.abort()

    def get(self, key: bytes) -> StoredValue | None:
        with self.reader() as view:
            return view.get(key)

    @property
    def applied_offset(self) -> int:
        """The owner's applied offset now, read from LMDB's meta (not a cached value)."""
        with self.reader() as view:
            return view.applied()[1]

    @property
    def applied_index(self) -> int:
        """The owner's applied raft index now, read from LMDB's meta."""
        with self.reader() as view:
            return view.applied()[0]

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
