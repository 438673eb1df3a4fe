"""`rkv role grant|revoke`'s targets that name internal keys a command line cannot
type: a lock's, every lock's under a prefix, every checkpoint's under a prefix."""

from __future__ import annotations

import argparse

from node.cli import role
from node.keyspace import CHECKPOINTS_PREFIX
from node.state.leases import LOCKS_PREFIX


def _args(**given: str) -> argparse.Namespace:
    fields = dict.fromkeys(
        ("exact_key", "prefix", "checkpoint", "lock", "lock_prefix", "checkpoint_prefix")
    )
    fields.update(given)
    return argparse.Namespace(**fields)


def test_a_lock_is_its_internal_key_and_a_lock_prefix_its_internal_prefix() -> None:
    named = _args(lock="redis-replicate:cache")
    assert role._key(named) == b"\x00rkv/locks/redis-replicate:cache"
    assert role._key(named) == LOCKS_PREFIX + b"redis-replicate:cache"
    assert role._prefix(named) is None
    under = _args(lock_prefix="jobs/")
    assert role._prefix(under) == LOCKS_PREFIX + b"jobs/" and role._key(under) is None


def test_a_checkpoint_prefix_covers_a_clusters_shards() -> None:
    shards = _args(checkpoint_prefix="redis:cache/@")
    assert role._prefix(shards) == CHECKPOINTS_PREFIX + b"redis:cache/@"


def test_plain_keys_and_prefixes_are_the_bytes_typed() -> None:
    assert role._key(_args(exact_key="a/b")) == b"a/b"
    assert role._prefix(_args(prefix="a/")) == b"a/"
    assert role._key(_args()) is None and role._prefix(_args()) is None
