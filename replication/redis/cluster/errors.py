"""Why a cluster shard stops: slots it cannot follow exactly."""

from __future__ import annotations

from collections.abc import Iterable

from replication.redis.cluster.slots import format_slots
from replication.redis.commands.dispatch import ReplicationStop


class SlotsMoved(ReplicationStop):
    """A shard's slots changed in a way the replicator cannot follow exactly
    (a slot migrated to or from it, a FLUSHALL); the shard's checkpoint is set
    to ``resync`` and the next start reloads just its slots."""

    def __init__(self, shard: str, slots: Iterable[int], why: str) -> None:
        """``shard``: which shard(s), as the message names them (``shard 83a632e652af``)."""
        self.shard = shard
        self.slots = frozenset(slots)
        self.why = why
        super().__init__(
            f"{shard}: slots {format_slots(self.slots)} {why}; this cannot be followed "
            "exactly from the replication streams: the shards concerned stop and reload "
            "their slots with a full sync at the next start (restart rkv redis-replicate "
            "once the resharding is over)"
        )
