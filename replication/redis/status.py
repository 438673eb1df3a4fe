"""What ``rkv redis-replicate --status`` prints: the holder of a prefix's lock
(replication/redis/standby.py) and its checkpoints, read from rkv."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from http_api.client import LockHolder, RkvClient
from replication.redis.batch import RkvStore
from replication.redis.checkpoint import Checkpoint, checkpoint_name, shard_checkpoint_name
from replication.redis.cluster.slots import format_slots, slots_of


@dataclass(frozen=True)
class Holder:
    """Who leads a prefix's election, as ``--status`` shows it."""

    token: int
    since_ms: int
    host: str
    pid: int | None
    source: str

    @classmethod
    def of(cls, holder: LockHolder) -> Holder:
        try:
            value: Any = json.loads(holder.value)
        except ValueError:
            value = {}
        value = value if isinstance(value, dict) else {}
        pid = value.get("pid")
        return cls(
            token=holder.token,
            since_ms=holder.since_ms,
            host=str(value.get("host", "?")),
            pid=pid if isinstance(pid, int) else None,
            source=str(value.get("source", "?")),
        )

    def describe(self) -> str:
        pid = "" if self.pid is None else f" pid {self.pid}"
        return f"{self.host}{pid} (token {self.token}, replicating {self.source})"


def read_checkpoints(
    client: RkvClient, prefix: bytes
) -> list[tuple[str | None, Checkpoint | None]]:
    """The checkpoint of ``prefix`` (label None), or of each shard of the Redis Cluster
    replicated there (listed in ``P shards``), labelled with its tag and slots."""
    store = RkvStore(client, checkpoint_name(prefix))
    single, _version = store.read_checkpoint()
    listed = store.get_many([prefix + b"shards"])[prefix + b"shards"]
    if single is not None or listed is None:
        return [(None, single)]
    found: list[tuple[str | None, Checkpoint | None]] = []
    for shard_id in json.loads(listed)["shards"]:
        name = shard_checkpoint_name(prefix, str(shard_id))
        checkpoint, _version = RkvStore(client, name).read_checkpoint()
        slots = format_slots(slots_of(checkpoint.slots)) if checkpoint and checkpoint.slots else "?"
        found.append((f"{str(shard_id)[:12]} slots {slots}", checkpoint))
    return found


def status_lines(
    prefix: bytes,
    name: str,
    leader: LockHolder | None,
    checkpoints: list[tuple[str | None, Checkpoint | None]],
) -> list[str]:
    """``rkv redis-replicate --status``: who replicates ``prefix``, since when, and
    where each checkpoint stands (one, or one per shard of a Redis Cluster, each
    labelled)."""
    lines = [f"prefix:      {prefix.decode()}", f"lock:        {name}"]
    if leader is None:
        lines.append("holder:      none (no replicator is running for this prefix)")
    else:
        holder = Holder.of(leader)
        lines.append(f"holder:      {holder.describe()}")
        lines.append(f"since:       {clock(holder.since_ms)}")
    if not checkpoints or all(checkpoint is None for _, checkpoint in checkpoints):
        lines.append("checkpoint:  none (nothing replicated yet)")
        return lines
    for label, checkpoint in checkpoints:
        indent = ""
        if label is not None:
            lines.append(f"shard:       {label}")
            indent = "  "
        lines += [indent + line for line in _checkpoint_lines(checkpoint)]
    return lines


def _checkpoint_lines(checkpoint: Checkpoint | None) -> list[str]:
    if checkpoint is None:
        return ["checkpoint:  none (nothing replicated yet)"]
    lines = [
        f"checkpoint:  {checkpoint.state}, generation {checkpoint.generation}, replid "
        f"{checkpoint.replid}, offset {checkpoint.offset}, db {checkpoint.db}"
    ]
    if checkpoint.sync is not None and checkpoint.synced_ms is not None:
        lines.append(
            f"last sync:   {checkpoint.sync} from {checkpoint.master} at "
            f"{clock(checkpoint.synced_ms)}"
        )
    if checkpoint.updated_ms:
        lag = max(0, checkpoint.master_offset - checkpoint.offset)
        lines.append(
            f"committed:   {clock(checkpoint.updated_ms)}, {lag} bytes behind what had "
            "been received then"
        )
    return lines


def clock(since_ms: int) -> str:
    if since_ms <= 0:
        return "an unknown time"
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since_ms / 1000))
    return f"{when} ({max(0.0, time.time() - since_ms / 1000):.0f} s ago)"
