"""Deleting what replicated Redis data left behind, in the background.

Commands never delete a container's sub-keys or a flushed db's keys
themselves (that could take millions of writes inside one command's
transaction); they write a gc record instead (replication/redis/layout.py):

    P g<G>/gc/o/<object>     the sub-keys of an object no key refers to any more
    P g<G>/gc/n/<namespace>  every key of a flushed db namespace, and their objects
    P g<G>/gc/g/<old G>      a whole generation a full resync replaced

:func:`sweep` deletes that garbage in idempotent chunks and then the gc record,
so it may stop at any point and run again. Nothing live refers to garbage, so
it never races with the replicator's own writes.
"""

from __future__ import annotations

import logging

from replication.redis.batch import RkvStore
from replication.redis.layout import Layout, Meta, generation_root

logger = logging.getLogger(__name__)


_PAGE = 2000


def _delete_under(store: RkvStore, prefix: bytes) -> int:
    """Delete every key under ``prefix``, a page at a time; returns how many."""
    done = 0
    while keys := store.first(prefix, _PAGE):
        store.write(dict.fromkeys(key for key, _ in keys))
        done += len(keys)
    return done


def _delete_namespace(store: RkvStore, layout: Layout, namespace: str) -> int:
    done = 0
    while metas := store.first(layout.meta_prefix(namespace), _PAGE):
        for _, raw in metas:
            obj = Meta.decode(raw).obj
            if obj is not None:
                done += _delete_under(store, layout.object_prefix(obj))
        store.write(dict.fromkeys(key for key, _ in metas))
        done += len(metas)
    return done


def sweep(store: RkvStore, layout: Layout) -> int:
    """Delete every garbage item recorded in ``layout``'s generation; returns the
    number of keys deleted."""
    deleted = 0
    gc_prefix = layout.gc_prefix()
    for record, _ in store.first(gc_prefix, 10_000):
        what = record[len(gc_prefix) :]
        kind, _, name = what.partition(b"/")
        if kind == b"o":
            count = _delete_under(store, layout.object_prefix(name.decode()))
        elif kind == b"n":
            count = _delete_namespace(store, layout, name.decode())
        elif kind == b"g":
            count = _delete_under(store, generation_root(layout.prefix, int(name)))
        else:
            logger.warning("unknown gc record %r left alone", record)
            continue
        store.write({record: None})
        deleted += count
        logger.info("swept %s: %d keys deleted", what.decode(errors="replace"), count)
    return deleted
