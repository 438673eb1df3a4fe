"""Replicating a Redis Cluster: one :class:`ShardReplicator` per master, supervised.

At start, :class:`ClusterReplicator` asks the cluster for its shards
(:mod:`.topology`), finds each shard's checkpoint (the shards replicated
before are listed in ``P shards``; a shard is recognised by a node id it
shares with the one recorded in its checkpoint, so a failover while the
replicator was down keeps the shard), and starts one thread per shard, each
with its own link, checkpoint and rkv transactions. All of them write the
generation named by ``P current`` (created as generation 1 by the first start),
in db 0's namespace: the same layout a single master's replication has, so
``rkv redis-dump`` and every reader work unchanged.

Slots that moved while the replicator was down (the slots of a shard differ
from those in its checkpoint) make that shard reload its slots (its checkpoint
is set to ``resync`` before it starts). While running, the topology is asked
again every :data:`TOPOLOGY_INTERVAL` seconds; slots changing owner, or a
shard stopping with :class:`SlotsMoved`, stop every shard (each commits what
it applied): the shards whose slots changed are set to ``resync`` and
:meth:`ClusterReplicator.run` raises :class:`SlotsMoved` naming the slots.
Restarting reloads just those shards' slots; the others resume with PSYNC.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from http_api.client import Fencing, RkvClient
from replication.redis.batch import RkvStore
from replication.redis.checkpoint import Checkpoint, checkpoint_name, shard_checkpoint_name
from replication.redis.cluster.errors import SlotsMoved
from replication.redis.cluster.shard import TAG_CHARS, ShardReplicator, stopped_by_slots
from replication.redis.cluster.slots import format_slots, slots_of
from replication.redis.cluster.source import ClusterSource
from replication.redis.cluster.topology import ClusterShard, Topology, discover
from replication.redis.commands.dispatch import ReplicationStop
from replication.redis.link.master_link import RedisLinkError
from replication.redis.metrics import ReplicatorMetrics
from replication.redis.replicator import RECONNECT_PAUSE, ReplicatorConfig

logger = logging.getLogger(__name__)

TOPOLOGY_INTERVAL = 5.0
"""Seconds between two looks at the cluster's shards while replicating."""


@dataclass(frozen=True)
class _Known:
    shard_id: str
    checkpoint: Checkpoint | None
    version: int


class ClusterReplicator:
    def __init__(
        self,
        cluster: ClusterSource,
        config: ReplicatorConfig,
        client: RkvClient,
        make_client: Callable[[], RkvClient],
        status: Callable[[str], None] = logger.info,
        *,
        metrics: ReplicatorMetrics | None = None,
        fencing: Fencing | None = None,
    ) -> None:
        self.cluster = cluster
        self.fencing = fencing
        """The standby's fencing token (replication/redis/standby.py): on every store."""
        self.config = config
        self.client = client
        self._make_client = make_client
        self._status = status
        self.stop_event = threading.Event()
        self.shards: list[ShardReplicator] = []
        self._errors: list[tuple[ShardReplicator, BaseException]] = []
        self._changed = threading.Event()
        self.metrics = ReplicatorMetrics(shards=True) if metrics is None else metrics

    # -- public ---------------------------------------------------------------------

    def stop(self) -> None:
        self.stop_event.set()
        self._changed.set()
        for shard in self.shards:
            shard.stop()

    def run(self) -> None:
        """Replicate until :meth:`stop`; raises SlotsMoved (the shards affected are
        set to resync), or what a shard raised (ReplicationStop, CheckpointConflict,
        a RedisLinkError that reconnecting cannot cure)."""
        topology = self._first_look()
        if topology is None:
            return
        store = RkvStore(self.client, checkpoint_name(self.config.prefix), fencing=self.fencing)
        single, _ = store.read_checkpoint()
        if single is not None:
            raise ReplicationStop(
                f"the prefix {self.config.prefix.decode()!r} holds the replication of a single "
                f"Redis master (checkpoint {store.checkpoint_name}): replicate the cluster under "
                "another --prefix"
            )
        generation = self._generation(store)
        self.shards = self._shards(store, topology, generation)
        threads = [
            threading.Thread(target=self._run_shard, args=(s,), name=f"redis-shard-{s.tag}")
            for s in self.shards
        ]
        for thread in threads:
            thread.start()
        moved: tuple[SlotsMoved, set[str]] | None = None
        try:
            while not self.stop_event.is_set():
                self._changed.wait(TOPOLOGY_INTERVAL)
                if self._errors or self.stop_event.is_set():
                    break
                moved = self._look_again(topology)
                if moved is not None:
                    break
        finally:
            for shard in self.shards:
                shard.stop()
            for thread in threads:
                thread.join()
        self._finish(moved)

    # -- start ------------------------------------------------------------------------

    def _first_look(self) -> Topology | None:
        """The cluster's shards, asked again every second while no node answers
        (as a single master's link reconnects); None once stopped."""
        while True:
            try:
                return discover(self.cluster)
            except RedisLinkError as exc:
                if not exc.retryable:
                    raise
                self._status(f"redis-replicate: {exc}; trying again")
            if self.stop_event.wait(RECONNECT_PAUSE):
                return None

    def _generation(self, store: RkvStore) -> int:
        key = self.config.prefix + b"current"
        raw = store.get_many([key])[key]
        if raw is not None:
            return int(json.loads(raw)["generation"])
        store.write({key: json.dumps({"generation": 1}).encode()})
        return 1

    def _known(self, store: RkvStore) -> list[_Known]:
        key = self.config.prefix + b"shards"
        raw = store.get_many([key])[key]
        known = []
        for shard_id in json.loads(raw)["shards"] if raw is not None else []:
            reader = RkvStore(
                self.client,
                shard_checkpoint_name(self.config.prefix, shard_id),
                fencing=self.fencing,
            )
            checkpoint, version = reader.read_checkpoint()
            known.append(_Known(shard_id, checkpoint, version))
        return known

    def _shards(
        self, store: RkvStore, topology: Topology, generation: int
    ) -> list[ShardReplicator]:
        known = self._known(store)
        chosen: list[tuple[ClusterShard, str, Checkpoint | None]] = []
        for shard in topology.shards:
            matches = [
                k for k in known if k.checkpoint and set(k.checkpoint.nodes or ()) & shard.nodes
            ]
            if len(matches) > 1:
                raise ReplicationStop(
                    f"the cluster's shard {shard.describe()} matches the checkpoints of "
                    f"several shards ({', '.join(m.shard_id for m in matches)})"
                )
            match = matches[0] if matches else None
            if match is None:
                chosen.append((shard, shard.master_id, None))
            else:
                chosen.append((shard, match.shard_id, match.checkpoint))
        tags = [shard_id[:TAG_CHARS] for _, shard_id, _ in chosen]
        if len(set(tags)) != len(tags):
            raise ReplicationStop(f"two shards' ids begin alike ({tags}): cannot tell them apart")
        ids = [k.shard_id for k in known]
        ids += [shard_id for _, shard_id, _ in chosen if shard_id not in ids]
        store.write({self.config.prefix + b"shards": json.dumps({"shards": ids}).encode()})
        replicators: list[ShardReplicator] = []
        for shard, shard_id, checkpoint in chosen:
            replicator = ShardReplicator(
                self.config,
                self.client if not replicators else self._make_client(),
                self._make_client,
                cluster=self.cluster,
                shard_id=shard_id,
                shard=shard,
                generation=generation,
                members=frozenset(checkpoint.nodes or ()) if checkpoint else frozenset(),
                status=self._shard_status(shard_id, shard),
                metrics=self.metrics.for_shard(shard_id[:TAG_CHARS]),
                fencing=self.fencing,
            )
            if checkpoint is not None and checkpoint.state == "streaming":
                recorded = slots_of(checkpoint.slots or [])
                why = None
                if recorded != shard.slots:
                    why = f"slots {format_slots(recorded ^ shard.slots)} moved since the last run"
                elif checkpoint.generation != generation:
                    why = f"readers were switched to generation {generation} by someone else"
                if why is not None:
                    replicator.report(f"{why}: reloading the shard's slots with a full sync")
                    replicator.mark_resync()
            replicators.append(replicator)
        return replicators

    def _shard_status(self, shard_id: str, shard: ClusterShard) -> Callable[[str], None]:
        name = f"redis-replicate [shard {shard_id[:TAG_CHARS]} slots {format_slots(shard.slots)}]:"

        def status(line: str) -> None:
            self._status(line.replace("redis-replicate:", name, 1))

        return status

    # -- running ----------------------------------------------------------------------

    def _run_shard(self, shard: ShardReplicator) -> None:
        try:
            shard.run()
        except BaseException as exc:  # handed to run(), which raises it
            self._errors.append((shard, exc))
            self._changed.set()

    def _look_again(self, started: Topology) -> tuple[SlotsMoved, set[str]] | None:
        """Slots whose owner changed since the start, and the shards that served or
        serve them (None: no change)."""
        try:
            now = discover(self.cluster, started.addresses())
        except RedisLinkError as exc:
            logger.warning("cannot look at the cluster's shards: %s", exc)
            return None
        before, after = self._owners(started), self._owners(now)
        moved = {slot for slot in set(before) | set(after) if before.get(slot) != after.get(slot)}
        if not moved:
            return None
        concerned = {before[s] for s in moved if s in before} | {
            after[s] for s in moved if s in after
        }
        affected = [s for s in self.shards if s.shard_id in concerned]
        names = ", ".join(s.describe() for s in affected) or "no shard replicated"
        why = "changed owner in the cluster (a resharding)"
        return SlotsMoved(names, moved, why), {s.shard_id for s in affected}

    def _owners(self, topology: Topology) -> dict[int, str]:
        """Slot -> the replicated shard serving it (by members, so a failover is no change)."""
        owners = {}
        for shard in topology.shards:
            mine = [s.shard_id for s in self.shards if s.members & shard.nodes]
            owner = mine[0] if len(mine) == 1 else f"new:{shard.master_id}"
            owners.update(dict.fromkeys(shard.slots, owner))
        return owners

    def _finish(self, moved: tuple[SlotsMoved, set[str]] | None) -> None:
        """Set the shards that must reload to resync; raise what stopped the run."""
        stops = [] if moved is None else [moved[0]]
        resync = set() if moved is None else set(moved[1])
        first: BaseException | None = None
        for shard, exc in self._errors:
            stop = stopped_by_slots(exc)
            if stop is None:
                self._status(f"redis-replicate: {shard.describe()} stopped: {exc}")
                first = first or exc
                continue
            stops.append(SlotsMoved(shard.describe(), stop.slots, stop.why))
            resync.add(shard.shard_id)
            resync.update(s.shard_id for s in self.shards if s.slots & stop.slots)
        for shard in self.shards:
            if shard.shard_id in resync:
                shard.mark_resync()
                self._status(
                    f"redis-replicate: {shard.describe()} stopped: its slots are reloaded "
                    "(full sync) at the next start"
                )
        if first is not None:
            raise first
        if len(stops) == 1:
            raise stops[0]
        if stops:
            slots = frozenset().union(*(stop.slots for stop in stops))
            whys = {stop.why for stop in stops}
            if len(whys) == 1:
                raise SlotsMoved(", ".join(stop.shard for stop in stops), slots, whys.pop())
            why = "; ".join(f"{s.shard}: slots {format_slots(s.slots)} {s.why}" for s in stops)
            raise SlotsMoved("several shards", slots, f"moved or are moving ({why})")
