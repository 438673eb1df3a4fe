"""Replicating a Redis Cluster (``--source redis-cluster://host:port[,host:port...]``).

One link per master, each with its own checkpoint, all writing one layout
(docs/REDIS.md, "Redis Cluster"). Invariants:

- every shard writes the generation ``P current`` names, in db 0's namespace
  (a cluster has only db 0); a shard's full sync replaces only the keys of its
  slots (:mod:`.shard_loader`), never switches the generation;
- a shard's commit covers its stream only: ``redis:<prefix>@<shard>`` is
  guarded by its version, exactly once per shard as for a single master;
- object ids are ``<shard tag>.<epoch>.<id>``, unique per shard and full sync;
- a slot changing owner, a key migrating in (RESTORE) or a FLUSHALL is never
  applied from the streams: the shards concerned stop, naming the slots, and
  reload their slots at the next start (a key is never lost nor resurrected
  in the end state);
- a failover keeps the shard (recognised by its members' node ids) and its
  checkpoint: the link follows the new master and resumes with PSYNC.

Modules: :mod:`.slots` (key -> slot), :mod:`.source` (the URL),
:mod:`.topology` (``CLUSTER SHARDS``), :mod:`.shard` (one shard's
replicator), :mod:`.shard_loader` (its full sync), :mod:`.supervisor` (all of
them), :mod:`.errors`.
"""
