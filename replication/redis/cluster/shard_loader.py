"""A cluster shard's full sync: replace the shard's slots in the shared generation.

Every shard of a cluster writes the one generation ``P current`` names, so a
shard's full sync cannot load a generation of its own and switch to it
(readers would lose the other shards' keys). Instead, with the checkpoint set
to ``loading`` (which also claims it, as for a single master):

1. every key of rkv's namespace for db 0 whose slot the shard serves is deleted
   (its object handed to the sweeper), and the objects an interrupted load of
   this shard may have left without a key are dropped;
2. the RDB's keys are written with object ids ``<tag>.<epoch>.r<n>`` (the
   epoch counts the shard's full syncs, so ids never repeat in the generation);
   a key of a slot the shard does not serve stops the load (the slots moved);
3. the last transaction writes the ``streaming`` checkpoint at the FULLRESYNC
   offset, with the slots and the new epoch.

Steps 1 and 2 are each finished before the next begins (batches of one step
may land in any order, never across steps). Meanwhile readers see the shard's
slots emptied, then filling up: during a shard's full sync its keys are
missing or partial (other shards' keys are untouched and current). Step 1
scans every key replicated under the prefix.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from replication.redis.batch import BatchView, RkvStore
from replication.redis.checkpoint import Checkpoint
from replication.redis.cluster.errors import SlotsMoved
from replication.redis.cluster.slots import key_slot, slot_ranges
from replication.redis.commands.dispatch import ReplicationStop
from replication.redis.layout import Layout, Meta
from replication.redis.link.master_link import SyncResult
from replication.redis.loader import GuardedWriters, drop_prefix, rdb_events, rdb_value
from replication.redis.objects import delete_key, write_value
from replication.redis.rdb import KeyValue

logger = logging.getLogger(__name__)

NAMESPACE = Layout.default_namespace(0)
"""A cluster has only db 0."""
_PROGRESS_SECONDS = 2.0


def object_prefix(tag: str, epoch: int) -> str:
    """What the ids of the objects a shard creates in ``epoch`` begin with."""
    return f"{tag}.{epoch}."


def _clear_slots(
    view: BatchView, store: RkvStore, layout: Layout, slots: frozenset[int], writers: GuardedWriters
) -> int:
    meta_prefix = layout.meta_prefix(NAMESPACE)
    deleted = 0
    for raw_key, raw in store.scan(meta_prefix):
        key = raw_key[len(meta_prefix) :]
        if key_slot(key) in slots:
            delete_key(view, layout, NAMESPACE, key, Meta.decode(raw))
            deleted += 1
            if view.full:
                writers.submit(view.take_pending())
    if view.pending:
        writers.submit(view.take_pending())
    return deleted


def load_shard_snapshot(
    store: RkvStore,
    layout: Layout,
    sync: SyncResult,
    previous: Checkpoint | None,
    *,
    shard: str,
    tag: str,
    slots: frozenset[int],
    nodes: list[str],
    version: int,
    status: Callable[[str], None],
    make_store: Callable[[], RkvStore],
    max_value_bytes: int,
) -> tuple[Checkpoint, int]:
    """Replace the shard's slots in ``layout``'s generation with ``sync``'s RDB (see
    the module docstring); returns the streaming checkpoint and its version."""
    assert sync.payload is not None
    epoch = (previous.epoch or 0) + 1 if previous is not None else 1
    ranges = [list(pair) for pair in slot_ranges(slots)]

    def checkpoint(state: str) -> Checkpoint:
        return Checkpoint(
            sync.replid,
            sync.offset,
            0,
            layout.generation,
            state,
            updated_ms=int(time.time() * 1000),
            slots=ranges,
            nodes=nodes,
            epoch=epoch,
        )

    view = BatchView(store, cache_entries=0)
    version = view.commit(checkpoint("loading"), version)
    started = time.monotonic()
    with GuardedWriters(make_store, version) as writers:
        cleared = _clear_slots(view, store, layout, slots, writers)
    if previous is not None and previous.state == "loading" and previous.epoch is not None:
        interrupted = layout.root + b"o/" + object_prefix(tag, previous.epoch).encode()
        drop_prefix(store, interrupted)
    status(f"redis-replicate: full sync: {cleared} keys of the shard's slots cleared")
    keys = 0
    last = time.monotonic()
    ids = object_prefix(tag, epoch)
    with GuardedWriters(make_store, version) as writers:
        view.on_full = lambda: writers.submit(view.take_pending())
        for event in rdb_events(sync, max_value_bytes):
            if not isinstance(event, KeyValue):
                continue
            if event.db != 0:
                raise ReplicationStop(f"the snapshot of shard {shard} holds db {event.db}")
            slot = key_slot(event.key)
            if slot not in slots:
                raise SlotsMoved(shard, [slot], "are in the shard's snapshot but not its own")
            keys += 1
            try:
                write_value(
                    view,
                    layout,
                    NAMESPACE,
                    event.key,
                    event.type_name,
                    rdb_value(event),
                    event.expire_ms,
                    f"{ids}r{keys}",
                )
            except ValueError as exc:
                raise ReplicationStop(f"key {event.key!r}: {exc}") from exc
            now = time.monotonic()
            if now - last >= _PROGRESS_SECONDS:
                last = now
                status(f"redis-replicate: full sync: {keys} keys loaded")
        view.on_full = None
    final = checkpoint("streaming")
    version = view.commit(final, version)
    status(
        f"redis-replicate: full sync done: {keys} keys in {time.monotonic() - started:.1f}s "
        f"(epoch {epoch})"
    )
    return final, version
