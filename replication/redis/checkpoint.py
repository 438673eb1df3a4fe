"""The replicator's checkpoint: where it stands in the master's stream.

Stored as rkv's internal checkpoint record ``redis:<prefix>`` (node/keyspace.py)
and written in the SAME transaction as the data of the commands it covers, so
the data and the position can never disagree: after a crash the replicator
resumes with ``PSYNC <replid> <offset + 1>`` and neither loses nor repeats a
command. ``state`` is ``loading`` while a full sync fills ``generation`` (which
readers do not see yet) and ``streaming`` once it has been switched to.

A shard of a Redis Cluster (replication/redis/cluster/) has a checkpoint of its
own, ``redis:<prefix>@<shard>``, which also records the shard's ``slots``
(inclusive ranges), its ``nodes`` (the master's and replicas' node ids) and its
``epoch`` (the number of its full syncs, part of the ids of the objects it
creates); its state may also be ``resync`` (a full sync of its slots is due).
Those fields are absent from a single master's checkpoint.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

_PREFIX = re.compile(rb"[A-Za-z0-9._:/@-]{1,150}")


def checkpoint_name(prefix: bytes) -> str:
    return "redis:" + prefix.decode()


def shard_checkpoint_name(prefix: bytes, shard: str) -> str:
    """The checkpoint of one shard of a Redis Cluster replicated under ``prefix``."""
    return f"{checkpoint_name(prefix)}@{shard}"


def prefix_problem(prefix: bytes) -> str | None:
    """Why ``prefix`` cannot be a replication prefix, or None."""
    if not _PREFIX.fullmatch(prefix):
        return "the prefix is 1 to 150 characters of A-Z a-z 0-9 . _ : / @ -"
    return None


@dataclass
class Checkpoint:
    replid: str
    offset: int
    """The master's replication offset of the last byte whose effects are committed."""
    db: int
    """The Redis db selected at that point of the stream."""
    generation: int
    state: str  # "loading" or "streaming"
    master_offset: int = 0
    """The highest offset received from the master when this was written (lag)."""
    updated_ms: int = 0
    slots: list[list[int]] | None = None
    """Cluster shards only: the slots served, as inclusive [first, last] ranges."""
    nodes: list[str] | None = None
    """Cluster shards only: the node ids of the shard's master and replicas."""
    epoch: int | None = None
    """Cluster shards only: the shard's full syncs so far (in its object ids)."""
    sync: str | None = None
    """How the connection that streamed this began: ``+CONTINUE`` or ``+FULLRESYNC``
    (None: written before rkv recorded it)."""
    master: str | None = None
    """The master of that connection (``host:port``)."""
    synced_ms: int | None = None
    """When that connection began (ms since the epoch)."""

    def encode(self) -> bytes:
        fields = {k: v for k, v in asdict(self).items() if v is not None or k not in _OPTIONAL}
        return json.dumps(fields, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Checkpoint:
        data: dict[str, Any] = json.loads(raw)
        return cls(
            replid=str(data["replid"]),
            offset=int(data["offset"]),
            db=int(data["db"]),
            generation=int(data["generation"]),
            state=str(data["state"]),
            master_offset=int(data.get("master_offset", 0)),
            updated_ms=int(data.get("updated_ms", 0)),
            slots=[[int(a), int(b)] for a, b in data["slots"]] if "slots" in data else None,
            nodes=[str(n) for n in data["nodes"]] if "nodes" in data else None,
            epoch=int(data["epoch"]) if "epoch" in data else None,
            sync=str(data["sync"]) if "sync" in data else None,
            master=str(data["master"]) if "master" in data else None,
            synced_ms=int(data["synced_ms"]) if "synced_ms" in data else None,
        )


_OPTIONAL = frozenset({"slots", "nodes", "epoch", "sync", "master", "synced_ms"})
"""Fields left out of the record while None (a single master's checkpoint keeps the
shape older versions wrote; older versions ignore the ones they do not know)."""
