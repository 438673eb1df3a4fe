"""Loading a full sync's RDB into a new generation, then switching readers to it.

The keys go into generation G+1 (``P g<G+1>/...``) in transactions that also
write the checkpoint as ``loading`` (so a second replicator is fenced during
the load too). Readers keep using G: ``P current`` still names it. The last
transaction writes ``P current`` = G+1, the ``streaming`` checkpoint at the
FULLRESYNC offset and a gc record for G, together. A load cut off half-way
is abandoned: the next attempt deletes that generation and loads G+2.
Progress (keys, MB, rate, ETA when the size is known) goes to ``status``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from replication.redis.batch import BatchView, RkvStore
from replication.redis.checkpoint import Checkpoint
from replication.redis.commands.dispatch import ReplicationStop
from replication.redis.layout import Layout, generation_root
from replication.redis.link.master_link import SyncResult
from replication.redis.objects import StreamValue, write_value
from replication.redis.rdb import Event, KeyValue, RdbError, RdbLimitError, Stream, parse_rdb

logger = logging.getLogger(__name__)

_PROGRESS_SECONDS = 2.0
WRITERS = 2
"""Batches of a full sync in flight at once."""
_DELETE_PAGE = 2000


def serving_generation(store: RkvStore, prefix: bytes) -> int | None:
    raw = store.get_many([prefix + b"current"])[prefix + b"current"]
    return None if raw is None else int(json.loads(raw)["generation"])


def drop_generation(store: RkvStore, prefix: bytes, generation: int) -> int:
    return drop_prefix(store, generation_root(prefix, generation))


def drop_prefix(store: RkvStore, root: bytes) -> int:
    """Delete every key under ``root``; returns how many."""
    dropped = 0
    while keys := store.first(root, _DELETE_PAGE):
        store.write(dict.fromkeys(key for key, _ in keys))
        dropped += len(keys)
    return dropped


def rdb_value(event: KeyValue) -> Any:
    value = event.value
    if isinstance(value, Stream):
        return StreamValue(
            entries=[(e.id.ms, e.id.seq, list(e.fields)) for e in value.entries],
            last_id=(value.last_id.ms, value.last_id.seq),
            entries_added=value.entries_added,
            max_deleted_id=(value.max_deleted_id.ms, value.max_deleted_id.seq),
            first_id=(value.first_id.ms, value.first_id.seq),
        )
    return value


def rdb_events(sync: SyncResult, max_value_bytes: int) -> Iterator[Event]:
    assert sync.payload is not None
    try:
        yield from parse_rdb(sync.payload, max_value_bytes=max_value_bytes)
    except RdbLimitError as exc:
        raise ReplicationStop(
            f"the master's snapshot (RDB) holds a key too big to load: {exc}; raise "
            f"--max-rdb-value-bytes (now {max_value_bytes}) if it is legitimate"
        ) from exc
    except RdbError as exc:
        raise ReplicationStop(f"the master's snapshot (RDB) cannot be parsed: {exc}") from exc


class GuardedWriters:
    """Up to WRITERS guarded batch writes in flight, each thread with its own client:
    parsing the RDB overlaps with rkv committing what was parsed before."""

    def __init__(self, make_store: Callable[[], RkvStore], version: int) -> None:
        self._make_store = make_store
        self._version = version
        self._local = threading.local()
        self._stores: list[RkvStore] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(WRITERS, thread_name_prefix="redis-load")
        self._futures: deque[Future[None]] = deque()

    def _write(self, changes: dict[bytes, bytes | None]) -> None:
        store = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = self._make_store()
            with self._lock:
                self._stores.append(store)
        store.write_guarded(changes, self._version)

    def submit(self, changes: dict[bytes, bytes | None]) -> None:
        while len(self._futures) >= WRITERS:
            self._futures.popleft().result()
        self._futures.append(self._pool.submit(self._write, changes))

    def __enter__(self) -> GuardedWriters:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            while self._futures:
                self._futures.popleft().result()
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)
            for store in self._stores:
                store.client.close()


def load_snapshot(
    store: RkvStore,
    prefix: bytes,
    sync: SyncResult,
    previous: Checkpoint | None,
    *,
    version: int,
    status: Callable[[str], None],
    make_store: Callable[[], RkvStore],
    max_value_bytes: int,
) -> tuple[Checkpoint, int]:
    """Load ``sync.payload`` into a new generation and switch to it; returns the
    streaming checkpoint and its version. A payload that cannot be parsed, or a
    key whose value would take more than ``max_value_bytes`` once decoded,
    raises ReplicationStop (the load is abandoned; readers keep the generation
    they had)."""
    assert sync.payload is not None
    serving = serving_generation(store, prefix)
    generation = max(previous.generation if previous else 0, serving or 0) + 1
    if previous is not None and previous.state == "loading":
        dropped = drop_generation(store, prefix, previous.generation)
        status(f"redis-replicate: dropped {dropped} keys of an interrupted load")
    dropped = drop_generation(store, prefix, generation)  # leftovers of a crashed attempt
    if dropped:
        status(f"redis-replicate: dropped {dropped} leftover keys of generation {generation}")
    layout = Layout(prefix, generation)
    loading = Checkpoint(sync.replid, sync.offset, 0, generation, "loading")
    loading.updated_ms = int(time.time() * 1000)
    view = BatchView(store, cache_entries=0)
    # Claim the prefix: every batch of the load is guarded by this version.
    version = view.commit(loading, version)
    started = last = time.monotonic()
    keys = 0
    with GuardedWriters(make_store, version) as writers:
        view.on_full = lambda: writers.submit(view.take_pending())
        for event in rdb_events(sync, max_value_bytes):
            if not isinstance(event, KeyValue):
                continue
            keys += 1
            try:
                write_value(
                    view,
                    layout,
                    Layout.default_namespace(event.db),
                    event.key,
                    event.type_name,
                    rdb_value(event),
                    event.expire_ms,
                    f"r{keys}",
                )
            except ValueError as exc:
                raise ReplicationStop(f"key {event.key!r} of db {event.db}: {exc}") from exc
            now = time.monotonic()
            if now - last >= _PROGRESS_SECONDS:
                last = now
                status(
                    f"redis-replicate: full sync: {keys} keys loaded "
                    f"({keys / (now - started):.0f} keys/s)"
                )
        view.on_full = None
    # Every batch has landed; the switch goes with the last writes.
    view.put(layout.current_key, json.dumps({"generation": generation}).encode())
    if serving is not None:
        view.put(layout.gc_prefix() + b"g/%d" % serving, b"")
    final = Checkpoint(
        sync.replid, sync.offset, 0, generation, "streaming", updated_ms=int(time.time() * 1000)
    )
    version = view.commit(final, version)
    status(
        f"redis-replicate: full sync done: {keys} keys in {time.monotonic() - started:.1f}s; "
        f"readers now see generation {generation}"
    )
    return final, version
