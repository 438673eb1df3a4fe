"""High availability for the Redis replicator: one replicates per prefix, the others stand by.

Every ``rkv redis-replicate`` for a prefix campaigns in the rkv election named by
:func:`lock_name` (docs/LEASES.md), with a lease of ``lock_ttl`` seconds kept alive
in the background. The leader replicates; every transaction it sends carries the
election's fencing token (``Rkv-Fencing``), so once its lease has ended and another
replicator leads, rkv refuses its writes (409 ``fenced``): a paused or partitioned
former leader can never commit again, whatever it believes. The store enforces it,
not the replicator's good will.

The others wait in the campaign. The one that takes over reads the checkpoint
through rkv's log and resumes with ``PSYNC <replid> <offset + 1>``: no full resync
while the master's backlog still covers the time the prefix had no leader.

Stepping down: a lease lost (its keepalives failed for its TTL) stops the replicator
at once (its link closes; nothing it had not committed was acknowledged to the
master); a fenced write does too. Either way it campaigns again, as a standby. A stop
on request (SIGTERM, SIGINT) resigns, so a standby takes over without waiting for
the TTL. The election's value says who leads (host, pid, source) and
``rkv redis-replicate --status`` shows it with the holder's token and since when.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Protocol

from http_api.client import Election, Fencing, LockHolder, RkvClient
from http_api.client.errors import (
    ClusterUnreachableError,
    Fenced,
    LockLost,
    UnavailableError,
)
from replication.redis.metrics import ReplicatorMetrics
from replication.redis.replicator import Replicator, ReplicatorConfig
from replication.redis.status import Holder, clock

logger = logging.getLogger(__name__)

DEFAULT_LOCK_TTL = 10
"""Seconds of the lock's lease: how long a standby waits after the leader vanished."""
RETRY_PAUSE = 2.0
"""Seconds between two campaigns while rkv cannot be reached."""
_WATCH_EVERY = 0.2
"""Seconds between two looks at the lease while replicating."""


def lock_name(prefix: bytes) -> str:
    """The election the replicators of ``prefix`` campaign in: ``redis-replicate:``
    and the prefix without its last ``/`` (a lock name has no empty part)."""
    text = prefix.decode()
    return "redis-replicate:" + (text[:-1] if text.endswith("/") else text)


class Replicating(Protocol):
    """What a leader runs: a :class:`Replicator`, or a Redis Cluster's supervisor."""

    def run(self) -> None: ...

    def stop(self) -> None: ...


class StopRequested(Exception):
    """Raised by a signal handler to end a standby's wait in the campaign."""


def candidate_value(config: ReplicatorConfig) -> str:
    """What this process proclaims as the election's value."""
    return json.dumps(
        {"host": socket.gethostname(), "pid": os.getpid(), "source": str(config.source)},
        separators=(",", ":"),
    )


class Standby:
    """Campaign for the prefix's lock; replicate while holding it (module docstring)."""

    def __init__(
        self,
        config: ReplicatorConfig,
        make_client: Callable[[], RkvClient],
        status: Callable[[str], None] = logger.info,
        metrics: ReplicatorMetrics | None = None,
        lock_ttl: int = DEFAULT_LOCK_TTL,
        *,
        shards: bool = False,
    ) -> None:
        self.config = config
        self.name = lock_name(config.prefix)
        self.lock_ttl = lock_ttl
        self.metrics = ReplicatorMetrics(shards=shards) if metrics is None else metrics
        self._make_client = make_client
        self._status = status
        self._stop = threading.Event()
        self._replicator: Replicating | None = None
        self._campaigning = False
        self.build: Callable[[RkvClient, Fencing], Replicating] = self._single_master
        """What a leader runs, given its client and fencing token (a Redis Cluster's
        supervisor replaces the default, one master's :class:`Replicator`)."""

    def _single_master(self, client: RkvClient, fencing: Fencing) -> Replicating:
        return Replicator(
            self.config, client, self._make_client, self._status, self.metrics, fencing=fencing
        )

    @property
    def replicator(self) -> Replicating | None:
        """The replicator of the current term of leading (None while standing by)."""
        return self._replicator

    @property
    def campaigning(self) -> bool:
        """True while waiting for the lock (a signal handler raises StopRequested then)."""
        return self._campaigning

    def stop(self) -> None:
        """Stop replicating (the replicator commits nothing more) and resign."""
        self._stop.set()
        replicator = self._replicator
        if replicator is not None:
            replicator.stop()

    def stop_from_signal(self) -> None:
        """For a signal handler (it runs in the main thread, between two steps of
        :meth:`run`): a standby's wait in the campaign ends with StopRequested; a
        leader stops from another thread, after its current batch."""
        self._stop.set()
        if self._campaigning:
            raise StopRequested
        threading.Thread(target=self.stop, name="redis-stop", daemon=True).start()

    def run(self) -> None:
        """Campaign and replicate until :meth:`stop`. Raises what the replicator
        raises when it stops for good (ReplicationStop, CheckpointConflict...)."""
        client = self._make_client()
        first = True
        try:
            while not self._stop.is_set():
                election = Election(client, self.name, self.lock_ttl)
                try:
                    leadership = self._campaign(election)
                except (UnavailableError, ClusterUnreachableError) as exc:
                    if first:
                        raise
                    self._status(f"redis-replicate: rkv unreachable ({exc}); campaigning again")
                    self._stop.wait(RETRY_PAUSE)
                    continue
                except StopRequested:
                    return
                finally:
                    first = False
                try:
                    self._lead(client, election, leadership)
                finally:
                    self._resign(election)
        finally:
            client.close()

    # -- standing by ----------------------------------------------------------------

    def _campaign(self, election: Election) -> LockHolder:
        current = election.leader()
        if current is not None:
            holder = Holder.of(current)
            self._status(
                f"redis-replicate: standing by: {self.name} is held by {holder.describe()} "
                f"since {clock(holder.since_ms)}"
            )
        self._campaigning = True
        try:
            if self._stop.is_set():
                raise StopRequested
            return election.campaign(candidate_value(self.config))
        finally:
            self._campaigning = False

    def _resign(self, election: Election) -> None:
        try:
            election.resign()
        except LockLost:
            pass  # already lost: the lease ended, a standby may lead by now
        except Exception as exc:  # rkv unreachable: the lease ends by itself (its TTL)
            logger.warning(
                "resigning %s failed (%s); its lease ends within its TTL", self.name, exc
            )

    # -- leading --------------------------------------------------------------------

    def _lead(self, client: RkvClient, election: Election, leadership: LockHolder) -> None:
        self.metrics.takeovers.inc()
        self.metrics.active.set(1)
        self.metrics.active_since.set(time.time())
        self._status(
            f"redis-replicate: took {self.name} (token {leadership.token}): replicating "
            f"from {self.config.source}"
        )
        replicator = self.build(client, leadership.fencing)
        self._replicator = replicator
        if self._stop.is_set():
            replicator.stop()
        ended = threading.Event()
        watcher = threading.Thread(
            target=self._watch_lease,
            args=(election, replicator, ended),
            name="redis-lease-watch",
            daemon=True,
        )
        watcher.start()
        try:
            replicator.run()
        except Fenced as exc:
            self.metrics.fenced.inc()
            self._status(
                f"redis-replicate: fenced: rkv refused a write with token {leadership.token} "
                f"of {self.name} ({exc}); another replicator holds it: standing by"
            )
        finally:
            ended.set()
            watcher.join()
            self._replicator = None
            self.metrics.active.set(0)
            self.metrics.active_since.set(0)

    def _watch_lease(
        self, election: Election, replicator: Replicating, ended: threading.Event
    ) -> None:
        while not ended.wait(_WATCH_EVERY):
            if election.lost.is_set():
                lease = election.lease
                reason = lease.reason if lease is not None else None
                self._status(
                    f"redis-replicate: the lease of {self.name} is lost ({reason}): "
                    "stopping, then standing by"
                )
                replicator.stop()
                return
