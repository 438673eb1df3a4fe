"""One shard of a Redis Cluster, replicated by a :class:`Replicator` of its own.

What differs from a single master:

- the checkpoint is ``redis:<prefix>@<shard>`` (replication/redis/checkpoint.py)
  and also records the shard's slots, members and epoch;
- the master is looked up again at each connection (``CLUSTER SHARDS``): after
  a failover the shard's link follows the replica that took over, recognised
  by its node id among the shard's members, and resumes with PSYNC from the
  checkpoint (``+CONTINUE`` under PSYNC2, else a full sync of the shard);
- a full sync replaces the shard's slots in the generation every shard shares
  (:mod:`.shard_loader`) instead of loading a generation of its own;
- object ids begin with the shard's tag and epoch (``<tag>.<epoch>.c<offset>.<k>``),
  so shards never allocate the same one;
- what cannot be followed exactly stops the shard with :class:`SlotsMoved`
  naming the slots: the master's slots are not those recorded, a ``RESTORE``
  in the stream (a key migrating in), a ``FLUSHALL``/``FLUSHDB`` (which would
  flush the shared namespace). :meth:`ShardReplicator.mark_resync` then asks
  the next start for a full sync of the shard.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from http_api.client import Fencing, RkvClient
from replication.redis.batch import BatchView
from replication.redis.checkpoint import Checkpoint, shard_checkpoint_name
from replication.redis.cluster.errors import SlotsMoved
from replication.redis.cluster.shard_loader import load_shard_snapshot, object_prefix
from replication.redis.cluster.slots import format_slots, key_slot
from replication.redis.cluster.source import ClusterSource
from replication.redis.cluster.topology import ClusterShard, discover, migrating_slots
from replication.redis.commands.dispatch import CommandContext, ReplicationStop
from replication.redis.layout import Layout
from replication.redis.link.master_link import (
    MasterAddress,
    MasterLink,
    RedisLinkError,
    ReplicatedCommand,
    SyncResult,
)
from replication.redis.metrics import ReplicatorMetrics
from replication.redis.replicator import Replicator, ReplicatorConfig

logger = logging.getLogger(__name__)

TAG_CHARS = 12
"""Hex digits of the shard's id in its object ids."""
_FLUSHES = frozenset({b"flushall", b"flushdb"})
_RESTORES = frozenset({b"restore", b"restore-asking"})


class ShardReplicator(Replicator):
    def __init__(
        self,
        config: ReplicatorConfig,
        client: RkvClient,
        make_client: Callable[[], RkvClient],
        *,
        cluster: ClusterSource,
        shard_id: str,
        shard: ClusterShard,
        generation: int,
        members: frozenset[str] = frozenset(),
        status: Callable[[str], None] = logger.info,
        metrics: ReplicatorMetrics | None = None,
        fencing: Fencing | None = None,
    ) -> None:
        self.shard_id = shard_id
        self.tag = shard_id[:TAG_CHARS]
        self.slots = shard.slots
        self.members = set(members | shard.nodes)
        self.generation = generation
        self._cluster = cluster
        self._shard_master = shard.master
        super().__init__(
            replace(config, source=shard.master),
            client,
            make_client,
            status,
            metrics,
            fencing=fencing,
        )

    def describe(self) -> str:
        return f"shard {self.tag} (slots {format_slots(self.slots)})"

    def report(self, what: str) -> None:
        """A status line naming the shard."""
        self._status(f"redis-replicate: {what}")

    # -- the Replicator's hooks -------------------------------------------------------

    def _checkpoint_name(self) -> str:
        return shard_checkpoint_name(self.config.prefix, self.shard_id)

    def _source(self) -> MasterAddress:
        try:
            topology = discover(self._cluster, [self._shard_master])
        except RedisLinkError as exc:
            if not exc.retryable:
                raise
            logger.warning("%s: %s; trying the last master known", self.describe(), exc)
            return self._shard_master
        found = [shard for shard in topology.shards if shard.nodes & self.members]
        if len(found) != 1:
            moved = self.slots - frozenset().union(*(s.slots for s in found))
            raise SlotsMoved(
                f"shard {self.tag}",
                moved or self.slots,
                "are served by no shard of the cluster holding this shard's nodes"
                if not found
                else "are now served by several shards",
            )
        shard = found[0]
        if shard.slots != self.slots:
            raise SlotsMoved(
                f"shard {self.tag}",
                shard.slots ^ self.slots,
                f"moved (the shard served {format_slots(self.slots)}, its master "
                f"{shard.master.host}:{shard.master.port} now serves {format_slots(shard.slots)})",
            )
        try:
            migrating = migrating_slots(shard.master)
        except (OSError, ConnectionError):
            migrating = frozenset()  # the connection that follows says why
        if migrating:
            raise SlotsMoved(
                f"shard {self.tag}",
                migrating,
                "are migrating (its master has them MIGRATING or IMPORTING)",
            )
        if shard.master != self._shard_master:
            self._status(
                f"redis-replicate: the shard's master is now {shard.master.host}:"
                f"{shard.master.port} (a failover); resuming from the checkpoint"
            )
        self.members |= shard.nodes
        self._shard_master = shard.master
        return shard.master

    def _load(self, sync: SyncResult, checkpoint: Checkpoint | None) -> tuple[Checkpoint, int]:
        return load_shard_snapshot(
            self.store,
            Layout(self.config.prefix, self.generation),
            sync,
            checkpoint,
            shard=f"shard {self.tag}",
            tag=self.tag,
            slots=self.slots,
            nodes=sorted(self.members),
            version=self._version,
            status=self._status,
            make_store=self._new_store,
            max_value_bytes=self.config.max_rdb_value_bytes,
        )

    def _context(self, layout: Layout, checkpoint: Checkpoint) -> CommandContext:
        context = super()._context(layout, checkpoint)
        context.id_prefix = object_prefix(self.tag, checkpoint.epoch or 0)
        return context

    def _apply(
        self, view: BatchView, context: CommandContext, command: ReplicatedCommand, in_multi: bool
    ) -> bool:
        name = command.name
        if name in _RESTORES:
            slot = key_slot(command.args[1]) if len(command.args) > 1 else None
            raise SlotsMoved(
                f"shard {self.tag}",
                [slot] if slot is not None else self.slots,
                f"are migrating (the master received {name.decode().upper()}: a key migrated in)",
            )
        if name in _FLUSHES:
            raise SlotsMoved(
                f"shard {self.tag}",
                self.slots,
                f"were flushed ({name.decode().upper()}, which the shared namespace cannot "
                "follow per shard)",
            )
        return super()._apply(view, context, command, in_multi)

    def _commit(
        self, view: BatchView, previous: Checkpoint, offset: int, db: int, link: MasterLink
    ) -> Checkpoint:
        previous.nodes = sorted(self.members)
        return super()._commit(view, previous, offset, db, link)

    # -- stopping ---------------------------------------------------------------------

    def mark_resync(self) -> None:
        """Set the checkpoint to ``resync``: the next start loads the shard's slots
        from a full sync (what came before is committed and stays until then)."""
        checkpoint, version = self.store.read_checkpoint()
        if checkpoint is None or checkpoint.state != "streaming":
            return  # nothing yet, or a load that the next start redoes anyway
        checkpoint.state = "resync"
        self.store.commit({}, checkpoint, version)


def stopped_by_slots(exc: BaseException) -> SlotsMoved | None:
    """The :class:`SlotsMoved` behind ``exc`` (the replicator wraps a stop in
    another ReplicationStop naming the offset), or None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, SlotsMoved):
            return seen
        seen = seen.__cause__ if isinstance(seen, ReplicationStop) else None
    return None
