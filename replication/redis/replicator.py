"""The Redis replicator's main loop: master link -> commands -> rkv, exactly once.

1. Read the checkpoint (through rkv's log). With a ``streaming`` one, ask the
   master ``PSYNC <replid> <offset + 1>``; without, ``PSYNC ? -1``.
2. ``+FULLRESYNC``: load the RDB into a new generation (replication/redis/
   loader.py); its last transaction switches ``current`` and the checkpoint.
3. Stream: apply each command through a :class:`BatchView`; commit the batch
   and the checkpoint in one transaction when the link has nothing more
   ready, when the batch is full, or every 50 ms under load, never inside
   MULTI/EXEC. ``REPLCONF ACK`` reports the last committed offset.
4. A lost connection reconnects (with PSYNC from the checkpoint) after a
   pause (none when the master moved), to the master the source names then
   (:mod:`.sources`: a fixed server, or the one Redis Sentinel names, whose
   ``+switch-master`` also drops the connection at once). When the master's history lacks the
   checkpoint (after a failover), the PSYNC may ask for an earlier point of
   the same state (:mod:`.resume`: after the last data change, the stream is
   often PINGs and Sentinel's hellos); a :class:`ReplicationStop` (a command it
   cannot reproduce) commits what came before it and stops with the error.

Bounds (each a setting of ``rkv redis-replicate``, see docs/REDIS.md): the
link refuses a command larger than ``max_command_bytes`` (and the replicator a
MULTI/EXEC block, held whole until its EXEC) and a backlog on disk beyond
``max_spool_bytes``; the RDB parser a key whose value would take
more than ``max_rdb_value_bytes`` once decoded. Crossing one stops the
replicator (nothing past the last checkpoint is committed). Transactions are
sized to the node's ``--max-txn-ops``, read from its status at each
connection; a 413 all the same halves that and starts again from the
checkpoint; one command needing more writes than a transaction holds stops
the replicator, telling the operator to raise ``--max-txn-ops``.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from http_api.client import Fencing, RkvClient
from replication.redis.batch import (
    MIN_TXN_OPS,
    RKV_MAX_TXN_OPS,
    TXN_OVERHEAD,
    BatchView,
    RkvStore,
    TxnTooLarge,
)
from replication.redis.checkpoint import Checkpoint, checkpoint_name
from replication.redis.commands.dispatch import CommandContext, ReplicationStop, apply_command
from replication.redis.layout import Layout
from replication.redis.link.master_link import (
    DEFAULT_MAX_COMMAND_BYTES,
    DEFAULT_MAX_SPOOL_BYTES,
    MasterLink,
    RedisLinkError,
    ReplicatedCommand,
    SyncResult,
)
from replication.redis.link.types import MasterAddress
from replication.redis.loader import load_snapshot
from replication.redis.metrics import LastSync, ReplicatorMetrics, ReplicatorProgress
from replication.redis.prefetch import prefetch
from replication.redis.rdb import DEFAULT_MAX_VALUE_BYTES
from replication.redis.resume import ResumePoints, master_history
from replication.redis.sources import Source, open_source
from replication.redis.sweeper import sweep

logger = logging.getLogger(__name__)

COMMIT_EVERY = 0.05
"""Seconds a busy stream collects commands before committing them."""
IDLE_CHECKPOINT = 1.0
"""Seconds after which an advanced offset with no data (PINGs) is checkpointed."""
RECONNECT_PAUSE = 1.0
READ_AHEAD = 2000
"""Commands read from the link at once, so their keys are fetched in one round trip..."""
READ_AHEAD_BYTES = 8 * 1024 * 1024
"""... unless they already hold this many bytes of the stream (at least one is read)."""


@dataclass(frozen=True)
class ReplicatorConfig:
    source: Source
    prefix: bytes = b"redis/"
    spool_dir: Path | None = None
    status_interval: float = 5.0
    max_command_bytes: int = DEFAULT_MAX_COMMAND_BYTES
    max_spool_bytes: int = DEFAULT_MAX_SPOOL_BYTES
    max_rdb_value_bytes: int = DEFAULT_MAX_VALUE_BYTES


class Replicator:
    def __init__(
        self,
        config: ReplicatorConfig,
        client: RkvClient,
        make_client: Callable[[], RkvClient],
        status: Callable[[str], None] = logger.info,
        metrics: ReplicatorMetrics | None = None,
        *,
        fencing: Fencing | None = None,
    ) -> None:
        self.config = config
        self.store = RkvStore(client, self._checkpoint_name(), fencing=fencing)
        self.source = open_source(config.source)
        self._master: MasterAddress | None = None  # of the last connection
        self._last_sync: LastSync | None = None
        self._moved = False  # the source said the master moved: reconnect at once
        self._resume = ResumePoints()
        self._make_client = make_client
        self._status = status
        self._lock = threading.Lock()
        self._durable: int | None = None
        self._version = 0
        self._checkpoint: Checkpoint | None = None
        self.stop_event = threading.Event()
        self._link: MasterLink | None = None
        self._link_up = False
        self._full_sync_running = False
        self._applied = 0
        self._last_status = time.monotonic()
        self._caught_up_at = time.monotonic()
        self._txn_cap = RKV_MAX_TXN_OPS  # lowered by each 413 txn_too_large
        self.metrics = ReplicatorMetrics() if metrics is None else metrics
        self.metrics.watch(self.progress)

    # -- what a cluster shard (replication/redis/cluster/shard.py) changes ----------

    def _checkpoint_name(self) -> str:
        return checkpoint_name(self.config.prefix)

    def _source(self) -> MasterAddress:
        """The master to connect to (asked at each connection: a Sentinel source
        names the master it knows now)."""
        return self.source.locate()

    def _load(self, sync: SyncResult, checkpoint: Checkpoint | None) -> tuple[Checkpoint, int]:
        """A full sync: load ``sync``'s RDB; the streaming checkpoint and its version."""
        return load_snapshot(
            self.store,
            self.config.prefix,
            sync,
            checkpoint,
            version=self._version,
            status=self._status,
            make_store=self._new_store,
            max_value_bytes=self.config.max_rdb_value_bytes,
        )

    def _new_store(self) -> RkvStore:
        """A store of its own client (a full sync's writer threads, the sweeper), with
        the same checkpoint, transaction size and fencing token."""
        store = self.store
        return RkvStore(
            self._make_client(), store.checkpoint_name, store.max_txn_ops, store.fencing
        )

    def _context(self, layout: Layout, checkpoint: Checkpoint) -> CommandContext:
        return CommandContext(layout=layout, db=checkpoint.db, offset=checkpoint.offset)

    # -- public ---------------------------------------------------------------------

    @property
    def checkpoint(self) -> Checkpoint | None:
        return self._checkpoint

    @property
    def last_sync(self) -> LastSync | None:
        """How the last connection began: +CONTINUE or +FULLRESYNC, which master, when."""
        return self._last_sync

    def durable_offset(self) -> int | None:
        with self._lock:
            return self._durable

    def progress(self) -> ReplicatorProgress:
        """The link's state, the offsets and the lag, for the metrics (any thread)."""
        link = self._link
        up = self._link_up and link is not None
        received = link.received_offset if up and link is not None else None
        acknowledged = self.durable_offset()
        lag_bytes = lag_seconds = None
        if received is not None and acknowledged is not None and not self._full_sync_running:
            lag_bytes = max(0, received - acknowledged)
            lag_seconds = 0.0 if lag_bytes == 0 else time.monotonic() - self._caught_up_at
        return ReplicatorProgress(
            link_up=up,
            full_sync_running=self._full_sync_running,
            received_offset=received,
            acknowledged_offset=acknowledged,
            lag_bytes=lag_bytes,
            lag_seconds=lag_seconds,
        )

    def stop(self) -> None:
        self.stop_event.set()
        self.source.close()
        link = self._link
        if link is not None:
            link.close()

    def run(self) -> None:
        """Replicate until :meth:`stop`; raises ReplicationStop, CheckpointConflict,
        or a RedisLinkError that reconnecting cannot cure."""
        sweeper = threading.Thread(target=self._sweep_forever, name="redis-sweeper", daemon=True)
        sweeper.start()
        self.source.watch(self._master_moved)
        spool_root = self.config.spool_dir
        while not self.stop_event.is_set():
            with tempfile.TemporaryDirectory(
                prefix="rkv-redis-", dir=str(spool_root) if spool_root else None
            ) as spool:
                try:
                    self._run_link(Path(spool))
                except RedisLinkError as exc:
                    if not exc.retryable or self.stop_event.is_set():
                        if self.stop_event.is_set():
                            return
                        raise
                    self.metrics.link_losses.inc()
                    logger.warning("link to %s lost: %s; reconnecting", self.source, exc)
                except TxnTooLarge as exc:
                    # A node with a lower --max-txn-ops than learned (a new leader):
                    # smaller transactions, again from the checkpoint.
                    self._txn_cap = exc.size // 2
                    self._status(
                        f"redis-replicate: rkv refused a transaction of {exc.size} ops ({exc}); "
                        f"starting again from the checkpoint with at most {self._txn_cap}"
                    )
                finally:
                    self._link_up = self._full_sync_running = False
                    if self._link is not None:
                        self._link.close()
                        self._link = None
            self.stop_event.wait(0 if self._moved else RECONNECT_PAUSE)
            self._moved = False

    def _master_moved(self, master: MasterAddress, said_by: str) -> None:
        """The source's watcher thread: the master moved; drop the link to the old one."""
        link = self._link
        if link is None or _same_server(link.address, master):
            return
        self._status(
            f"redis-replicate: {said_by}: +switch-master to {master}: leaving {link.address}"
        )
        self._moved = True
        link.abort(f"the master moved to {master} ({said_by})")

    # -- one connection -----------------------------------------------------------

    def _learn_txn_limit(self) -> None:
        """Size transactions to the leader's --max-txn-ops (and below any 413 seen)."""
        told = self.store.learn_limits()
        limit = min(told or RKV_MAX_TXN_OPS, self._txn_cap)
        if limit < MIN_TXN_OPS:
            raise ReplicationStop(
                f"rkv takes at most {limit} ops in one transaction (the nodes' --max-txn-ops); "
                f"the replicator needs at least {MIN_TXN_OPS}: raise --max-txn-ops"
            )
        if limit != self.store.max_txn_ops:
            logger.info("transactions hold at most %d ops (the node's --max-txn-ops)", limit)
        self.store.max_txn_ops = limit

    def _run_link(self, spool: Path) -> None:
        self._learn_txn_limit()
        checkpoint, self._version = self.store.read_checkpoint()
        self._checkpoint = checkpoint
        config = self.config
        address = self._source()
        link = MasterLink(
            address,
            spool,
            self.durable_offset,
            max_spool_bytes=config.max_spool_bytes,
            max_command_bytes=config.max_command_bytes,
        )
        self._link = link
        with self._lock:
            self._durable = None
        if checkpoint is not None and checkpoint.state == "streaming":
            earlier = self._resume.choose(
                checkpoint.replid, checkpoint.offset, lambda: master_history(address)
            )
            if earlier is not None:
                logger.info(
                    "resuming after offset %d, not %d: same state", earlier[0], checkpoint.offset
                )
                checkpoint.offset, checkpoint.db = earlier
            sync = link.start(checkpoint.replid, checkpoint.offset + 1)
        else:
            sync = link.start()
        self._link_up = True
        previous, self._master = self._master, address
        switched = previous is not None and not _same_server(previous, address)
        self._last_sync = LastSync(
            "+FULLRESYNC" if sync.full else "+CONTINUE",
            f"{address.host}:{address.port}",
            sync.replid,
            sync.offset,
            time.time(),
            switched,
        )
        self.metrics.synced(self._last_sync)
        moved = f" (the master moved: was {previous})" if switched else ""
        if sync.full:
            self._full_sync_running = True
            asked = ""
            if checkpoint is not None and checkpoint.state == "streaming":
                asked = f" (PSYNC asked to continue after offset {checkpoint.offset})"
            self._status(
                f"redis-replicate: full resync (+FULLRESYNC) from {address} "
                f"at offset {sync.offset}{asked}{moved}"
            )
            checkpoint, self._version = self._load(sync, checkpoint)
            self._full_sync_running = False
        else:
            assert checkpoint is not None
            self._status(
                f"redis-replicate: partial resync (+CONTINUE) from {address} "
                f"after offset {sync.offset}{moved}"
            )
            if sync.replid != checkpoint.replid:
                checkpoint.replid = sync.replid
        self._checkpoint = checkpoint
        with self._lock:
            self._durable = checkpoint.offset
        self._stream(link, sync, checkpoint)

    def _stream(self, link: MasterLink, sync: SyncResult, checkpoint: Checkpoint) -> None:
        config = self.config
        layout = Layout(self.config.prefix, checkpoint.generation)
        view = BatchView(self.store)
        context = self._context(layout, checkpoint)
        committed = checkpoint
        last = checkpoint.offset
        self._caught_up_at = time.monotonic()  # a full sync just ended, or a reconnect
        self._resume.start(checkpoint.offset, checkpoint.db)
        first_pending: float | None = None
        in_multi = False
        safe_offset, safe_db = last, context.db
        since_mark: list[ReplicatedCommand] = []
        queue: deque[ReplicatedCommand] = deque()
        while not self.stop_event.is_set():
            if not queue:
                waiting = first_pending is not None and not in_multi
                self._read_ahead(link, queue, 0.002 if waiting else 0.5)
                if queue:
                    prefetch(view, layout, context.db, [c.args for c in queue])
            command = queue.popleft() if queue else None
            now = time.monotonic()
            if command is None and first_pending is None:
                self._caught_up_at = now  # everything received is committed
            if command is not None:
                if not in_multi:
                    # What a failing command (or MULTI block) is taken back to.
                    view.mark()
                    safe_offset, safe_db = last, context.db
                    since_mark = []
                since_mark.append(command)
                try:
                    if in_multi and command.end_offset - safe_offset > config.max_command_bytes:
                        raise ReplicationStop(
                            f"a MULTI/EXEC block of more than {config.max_command_bytes} bytes "
                            "(it is held and applied whole, like one command): raise "
                            "--max-command-bytes if such blocks are legitimate"
                        )
                    in_multi = self._apply(view, context, command, in_multi)
                    if len(view.pending) > self.store.max_batch_writes:
                        committed = self._apply_alone(
                            view,
                            context,
                            since_mark,
                            committed,
                            safe=(safe_offset, safe_db),
                            link=link,
                        )
                except ReplicationStop as stop:
                    view.rollback_to_mark()
                    if safe_offset > committed.offset:
                        self._commit(view, committed, safe_offset, safe_db, link)
                    raise ReplicationStop(
                        f"{stop} (at replication offset {command.end_offset}; the "
                        f"checkpoint stays at {safe_offset}: fix the cause and restart)"
                    ) from stop
                last = command.end_offset
                self._resume.note(command, in_multi, context.db)
                if first_pending is None:
                    first_pending = now
            due = first_pending is not None and (
                (command is None and (bool(view.pending) or now - first_pending >= IDLE_CHECKPOINT))
                or now - first_pending >= COMMIT_EVERY
                or view.full
            )
            if due and not in_multi and last > committed.offset:
                committed = self._commit(view, committed, last, context.db, link)
                first_pending = None
            if now - self._last_status >= self.config.status_interval:
                self._report(link, committed)

    def _apply_alone(
        self,
        view: BatchView,
        context: CommandContext,
        block: list[ReplicatedCommand],
        committed: Checkpoint,
        *,
        safe: tuple[int, int],
        link: MasterLink,
    ) -> Checkpoint:
        """Too much for one transaction with what came before: commit that first
        (up to the ``safe`` offset and db), then apply ``block`` (the command, or
        its MULTI block so far) again alone."""
        view.rollback_to_mark()
        context.db = safe[1]
        if safe[0] > committed.offset:
            committed = self._commit(view, committed, safe[0], safe[1], link)
        view.mark()
        for command in block:
            self._apply(view, context, command, True)
        needed = len(view.pending)
        if needed > self.store.max_batch_writes:
            name = block[-1].name.decode(errors="replace").upper()
            what = f"a MULTI/EXEC block ending with {name}" if len(block) > 1 else name
            limit = self.store.max_txn_ops
            if needed + TXN_OVERHEAD > RKV_MAX_TXN_OPS:
                advice = f"more than rkv takes in one transaction at most ({RKV_MAX_TXN_OPS})"
            else:
                advice = (
                    f"raise --max-txn-ops on the rkv nodes to at least {needed + TXN_OVERHEAD} "
                    "and restart the replicator"
                )
            raise ReplicationStop(
                f"{what} needs {needed} writes in one atomic transaction, more than one rkv "
                f"transaction holds here ({limit} ops with the checkpoint's {TXN_OVERHEAD}: "
                f"the nodes' --max-txn-ops): {advice}"
            )
        return committed

    def _read_ahead(
        self, link: MasterLink, queue: deque[ReplicatedCommand], timeout: float
    ) -> None:
        """The next command (waiting up to ``timeout``), then those already received."""
        start = link.delivered_offset
        names: list[bytes] = []
        command = link.read_command(timeout=timeout)
        while command is not None:
            queue.append(command)
            names.append(command.name)
            if len(queue) >= READ_AHEAD or command.end_offset - start >= READ_AHEAD_BYTES:
                break
            command = link.read_command(timeout=0)
        if names:
            self.metrics.count_commands(names)

    def _apply(
        self, view: BatchView, context: CommandContext, command: ReplicatedCommand, in_multi: bool
    ) -> bool:
        name = command.name
        if name == b"multi":
            return True
        if name == b"exec":
            return False
        context.offset = command.end_offset
        context.serial = 0
        context.now_ms = int(time.time() * 1000)
        apply_command(view, context, command.args)
        self._applied += 1
        return in_multi

    def _commit(
        self, view: BatchView, previous: Checkpoint, offset: int, db: int, link: MasterLink
    ) -> Checkpoint:
        checkpoint = replace(
            previous,
            replid=link.replid or previous.replid,
            offset=offset,
            db=db,
            state="streaming",
            master_offset=link.received_offset,
            updated_ms=int(time.time() * 1000),
        )
        last = self._last_sync
        if last is not None:  # for `--status`: how this connection began
            checkpoint.sync, checkpoint.master = last.path, last.master
            checkpoint.synced_ms = int(last.at * 1000)
        with self.metrics.batch_commit.time():
            self._version = view.commit(checkpoint, self._version)
        self._checkpoint = checkpoint
        self._resume.committed(checkpoint.replid, offset)
        with self._lock:
            self._durable = offset
        return checkpoint

    def _report(self, link: MasterLink, committed: Checkpoint) -> None:
        now = time.monotonic()
        lag_bytes = max(0, link.received_offset - committed.offset)
        lag_seconds = 0.0 if lag_bytes == 0 else now - self._caught_up_at
        rate = self._applied / max(now - self._last_status, 1e-9)
        self._status(
            f"redis-replicate: offset {committed.offset} committed (db {committed.db}), "
            f"lag {lag_bytes} bytes / {lag_seconds:.1f} s, {rate:.0f} commands/s"
        )
        self._applied = 0
        self._last_status = now

    # -- garbage --------------------------------------------------------------------

    def _sweep_forever(self) -> None:
        client = self._make_client()
        store = RkvStore(client, self.store.checkpoint_name, fencing=self.store.fencing)
        try:
            while not self.stop_event.wait(5.0):
                checkpoint = self._checkpoint
                if checkpoint is None or checkpoint.state != "streaming":
                    continue
                store.max_txn_ops = self.store.max_txn_ops
                try:
                    sweep(store, Layout(self.config.prefix, checkpoint.generation))
                except Exception:
                    logger.exception("sweeping garbage failed; trying again later")
        finally:
            client.close()


def _same_server(a: MasterAddress, b: MasterAddress) -> bool:
    return (a.host, a.port) == (b.host, b.port)
