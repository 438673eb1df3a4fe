"""The Redis replicator's Prometheus metrics, in a registry of their own.

``rkv redis-replicate --metrics-listen HOST:PORT`` serves :attr:`ReplicatorMetrics.registry`
at ``/metrics`` (docs/OBSERVABILITY.md lists every metric). Counters are updated in
batches, never per command: the command counts once per read-ahead (up to 2,000
commands), the commit duration once per transaction. The offsets, the lag and the
link's state are read from the replicator when scraped (:class:`ReplicatorProgress`).
Command labels are the names the replicator knows (``set``, ``hset``...), ``other`` for
any other, so a master cannot grow the label set. Replicating a Redis Cluster, every
metric also has a ``shard`` label (the shard's tag, as in the status lines).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from replication.redis.commands.dispatch import HANDLERS, IGNORED

KNOWN_COMMANDS = frozenset(name.lower() for name in (*HANDLERS, *IGNORED, "MULTI", "EXEC"))
"""Values of the ``command`` label besides ``other``: the commands the replicator knows."""
_COMMIT_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True)
class ReplicatorProgress:
    """Where the replicator is, read at scrape time."""

    link_up: bool
    full_sync_running: bool
    received_offset: int | None
    acknowledged_offset: int | None
    lag_bytes: int | None
    lag_seconds: float | None


@dataclass(frozen=True)
class LastSync:
    """How the replicator's last connection to a master began (for a status display)."""

    path: str
    """``+CONTINUE`` (the stream resumed at the checkpoint) or ``+FULLRESYNC``."""
    master: str
    """The master's ``host:port``."""
    replid: str
    offset: int
    """``+CONTINUE``: the offset the stream resumed after; ``+FULLRESYNC``: the snapshot's."""
    at: float
    """When (Unix time, seconds)."""
    switched: bool
    """True when this master is not the one of the connection before (a failover)."""


# name -> help; the collector yields exactly these (docs/OBSERVABILITY.md).
SCRAPED: dict[str, str] = {
    "rkv_redis_master_link_up": "1 while connected to the master (syncing or streaming), else 0.",
    "rkv_redis_full_sync_running": "1 while a full sync (the master's RDB snapshot) loads.",
    "rkv_redis_received_offset": "The master's replication offset received so far (bytes).",
    "rkv_redis_acknowledged_offset": (
        "The replication offset committed in rkv and acknowledged to the master (REPLCONF ACK)."
    ),
    "rkv_redis_lag_bytes": "Bytes of the stream received and not yet committed in rkv.",
    "rkv_redis_lag_seconds": (
        "Seconds since everything received was last committed (0 when caught up)."
    ),
}


class ReplicatorMetrics:
    """The replicator's counters and histograms, and a collector of its progress.

    ``ReplicatorMetrics(shards=True)`` is a Redis Cluster's: every metric has a
    ``shard`` label, and :meth:`for_shard` gives each shard's replicator its view.
    """

    def __init__(self, shards: bool = False) -> None:
        self.registry = CollectorRegistry()
        label = ["shard"] if shards else []
        self._shard: list[str] = []
        self.active = Gauge(
            "rkv_redis_replicator_active",
            "1 while this replicator holds its prefix's lock and replicates; 0 while it "
            "stands by (docs/REDIS.md, High availability).",
            registry=self.registry,
        )
        self.active_since = Gauge(
            "rkv_redis_replicator_active_since_seconds",
            "When this replicator took its prefix's lock (Unix time; 0 while standing by).",
            registry=self.registry,
        )
        self.takeovers = Counter(
            "rkv_redis_replicator_takeovers",
            "Times this replicator took its prefix's lock and began replicating.",
            registry=self.registry,
        )
        self.fenced = Counter(
            "rkv_redis_replicator_fenced",
            "Times rkv refused this replicator's write with its old fencing token (another "
            "replicator had taken the lock) and it stepped down.",
            registry=self.registry,
        )
        self.commands = Counter(
            "rkv_redis_commands",
            "Commands received from the master's stream, by command (lower case; other: "
            "a name the replicator does not know). A stream resent after a reconnect counts "
            "again.",
            [*label, "command"],
            registry=self.registry,
        )
        self.full_syncs = Counter(
            "rkv_redis_full_syncs",
            "Full syncs begun (the master answered +FULLRESYNC and sent its RDB snapshot).",
            label,
            registry=self.registry,
        )
        self.partial_syncs = Counter(
            "rkv_redis_partial_syncs",
            "Partial syncs (the master answered +CONTINUE: the stream resumed at the checkpoint).",
            label,
            registry=self.registry,
        )
        self.link_losses = Counter(
            "rkv_redis_master_link_losses",
            "Connections to the master lost and retried.",
            label,
            registry=self.registry,
        )
        self.master_switches = Counter(
            "rkv_redis_master_switches",
            "Connections to a master other than the previous one (a Sentinel failover), by "
            "how the stream went on: continue (+CONTINUE) or fullresync (+FULLRESYNC).",
            [*label, "path"],
            registry=self.registry,
        )
        if not shards:
            for path in ("continue", "fullresync"):
                self.master_switches.labels(path)
        self.master = Info(
            "rkv_redis_master",
            "The master of the last connection: its address (host:port) and replication id.",
            label,
            registry=self.registry,
        )
        self.batch_commit = Histogram(
            "rkv_redis_batch_commit_duration_seconds",
            "Duration of one rkv transaction committing a batch of commands and the checkpoint.",
            label,
            unit="seconds",
            buckets=_COMMIT_SECONDS,
            registry=self.registry,
        )
        self._collector = _ProgressCollector(label)
        self.registry.register(self._collector)

    def for_shard(self, shard: str) -> ReplicatorMetrics:
        """The metrics of one shard: the same registry, its ``shard`` label set."""
        bound = copy.copy(self)
        bound._shard = [shard]
        bound.full_syncs = self.full_syncs.labels(shard)
        bound.partial_syncs = self.partial_syncs.labels(shard)
        bound.link_losses = self.link_losses.labels(shard)
        bound.batch_commit = self.batch_commit.labels(shard)
        return bound

    def count_commands(self, names: Iterable[bytes]) -> None:
        counts: dict[str, int] = {}
        for raw in names:
            name = raw.decode("latin-1")
            name = name if name in KNOWN_COMMANDS else "other"
            counts[name] = counts.get(name, 0) + 1
        for name, count in counts.items():
            self.commands.labels(*self._shard, name).inc(count)

    def synced(self, sync: LastSync) -> None:
        """Count a connection's start (``sync.path``) and show its master."""
        path = "continue" if sync.path == "+CONTINUE" else "fullresync"
        (self.partial_syncs if path == "continue" else self.full_syncs).inc()
        if sync.switched:
            self.master_switches.labels(*self._shard, path).inc()
        master = self.master.labels(*self._shard) if self._shard else self.master
        master.info({"address": sync.master, "replid": sync.replid})

    def watch(self, progress: Callable[[], ReplicatorProgress]) -> None:
        """Report ``progress()`` at each scrape, in place of the one watched before
        with the same labels (a standby builds new replicators at each takeover)."""
        self._collector.add(self._shard, progress)


class _ProgressCollector(Collector):
    def __init__(self, label: list[str]) -> None:
        self._label = label
        self._sources: dict[tuple[str, ...], Callable[[], ReplicatorProgress]] = {}

    def add(self, labels: list[str], progress: Callable[[], ReplicatorProgress]) -> None:
        self._sources[tuple(labels)] = progress

    def describe(self) -> Iterator[Any]:
        for name, help_text in SCRAPED.items():
            yield GaugeMetricFamily(name, help_text, labels=self._label)

    def collect(self) -> Iterator[Any]:
        families = {
            name: GaugeMetricFamily(name, help_text, labels=self._label)
            for name, help_text in SCRAPED.items()
        }
        for labels, progress in list(self._sources.items()):
            now = progress()
            values: dict[str, float | None] = {
                "rkv_redis_master_link_up": now.link_up,
                "rkv_redis_full_sync_running": now.full_sync_running,
                "rkv_redis_received_offset": now.received_offset,
                "rkv_redis_acknowledged_offset": now.acknowledged_offset,
                "rkv_redis_lag_bytes": now.lag_bytes,
                "rkv_redis_lag_seconds": now.lag_seconds,
            }
            for name, value in values.items():
                if value is not None:
                    families[name].add_metric(list(labels), float(value))
        for family in families.values():
            if family.samples:
                yield family
