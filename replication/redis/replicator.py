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
   pause; a :class:`ReplicationStop` (a command it cannot reproduce) commits
   what came before it and stops with the error.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from http_api.client import RkvClient
from replication.redis.batch import BatchView, RkvStore
from replication.redis.checkpoint import Checkpoint, checkpoint_name
from replication.redis.commands.dispatch import CommandContext, ReplicationStop, apply_command
from replication.redis.layout import Layout
from replication.redis.link.master_link import (
    MasterAddress,
    MasterLink,
    RedisLinkError,
    ReplicatedCommand,
    SyncResult,
)
from replication.redis.loader import load_snapshot
from replication.redis.prefetch import prefetch
from replication.redis.sweeper import sweep

logger = logging.getLogger(__name__)

COMMIT_EVERY = 0.05
"""Seconds a busy stream collects commands before committing them."""
IDLE_CHECKPOINT = 1.0
"""Seconds after which an advanced offset with no data (PINGs) is checkpointed."""
RECONNECT_PAUSE = 1.0
TXN_WRITES = 9_900
"""Writes one commit may hold (rkv takes 10,000 compares and ops per transaction)."""
READ_AHEAD = 2000
"""Commands read from the link at once, so their keys are fetched in one round trip."""


@dataclass(frozen=True)
class ReplicatorConfig:
    source: MasterAddress
    prefix: bytes = b"redis/"
    spool_dir: Path | None = None
    status_interval: float = 5.0


class Replicator:
    def __init__(
        self,
        config: ReplicatorConfig,
        client: RkvClient,
        make_client: Callable[[], RkvClient],
        status: Callable[[str], None] = logger.info,
    ) -> None:
        self.config = config
        self.store = RkvStore(client, checkpoint_name(config.prefix))
        self._make_client = make_client
        self._status = status
        self._lock = threading.Lock()
        self._durable: int | None = None
        self._version = 0
        self._checkpoint: Checkpoint | None = None
        self.stop_event = threading.Event()
        self._link: MasterLink | None = None
        self._applied = 0
        self._last_status = time.monotonic()
        self._caught_up_at = time.monotonic()

    # -- public ---------------------------------------------------------------------

    @property
    def checkpoint(self) -> Checkpoint | None:
        return self._checkpoint

    def durable_offset(self) -> int | None:
        with self._lock:
            return self._durable

    def stop(self) -> None:
        self.stop_event.set()
        link = self._link
        if link is not None:
            link.close()

    def run(self) -> None:
        """Replicate until :meth:`stop`; raises ReplicationStop, CheckpointConflict,
        or a RedisLinkError that reconnecting cannot cure."""
        sweeper = threading.Thread(target=self._sweep_forever, name="redis-sweeper", daemon=True)
        sweeper.start()
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
                    logger.warning("link to %s lost: %s; reconnecting", self.config.source, exc)
                finally:
                    if self._link is not None:
                        self._link.close()
                        self._link = None
            self.stop_event.wait(RECONNECT_PAUSE)

    # -- one connection -----------------------------------------------------------

    def _run_link(self, spool: Path) -> None:
        checkpoint, self._version = self.store.read_checkpoint()
        self._checkpoint = checkpoint
        link = MasterLink(self.config.source, spool, self.durable_offset)
        self._link = link
        with self._lock:
            self._durable = None
        if checkpoint is not None and checkpoint.state == "streaming":
            sync = link.start(checkpoint.replid, checkpoint.offset + 1)
        else:
            sync = link.start()
        if sync.full:
            self._status(
                f"redis-replicate: full resync (+FULLRESYNC) from {self.config.source} "
                f"at offset {sync.offset}"
            )
            checkpoint, self._version = load_snapshot(
                self.store,
                self.config.prefix,
                sync,
                checkpoint,
                version=self._version,
                status=self._status,
                make_store=lambda: RkvStore(self._make_client(), self.store.checkpoint_name),
            )
        else:
            assert checkpoint is not None
            self._status(
                f"redis-replicate: partial resync (+CONTINUE) from {self.config.source} "
                f"after offset {sync.offset}"
            )
            if sync.replid != checkpoint.replid:
                checkpoint.replid = sync.replid
        self._checkpoint = checkpoint
        with self._lock:
            self._durable = checkpoint.offset
        self._stream(link, sync, checkpoint)

    def _stream(self, link: MasterLink, sync: SyncResult, checkpoint: Checkpoint) -> None:
        layout = Layout(self.config.prefix, checkpoint.generation)
        view = BatchView(self.store)
        context = CommandContext(layout=layout, db=checkpoint.db, offset=checkpoint.offset)
        committed = checkpoint
        last = checkpoint.offset
        self._caught_up_at = time.monotonic()  # a full sync just ended, or a reconnect
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
                    in_multi = self._apply(view, context, command, in_multi)
                    if len(view.pending) > TXN_WRITES:
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
        if len(view.pending) > TXN_WRITES:
            raise ReplicationStop(
                f"{block[-1].name.decode().upper()} needs {len(view.pending)} writes, "
                f"more than one rkv transaction holds ({TXN_WRITES})"
            )
        return committed

    @staticmethod
    def _read_ahead(link: MasterLink, queue: deque[ReplicatedCommand], timeout: float) -> None:
        """The next command (waiting up to ``timeout``), then those already received."""
        command = link.read_command(timeout=timeout)
        while command is not None:
            queue.append(command)
            if len(queue) >= READ_AHEAD:
                return
            command = link.read_command(timeout=0)

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
        checkpoint = Checkpoint(
            replid=link.replid or previous.replid,
            offset=offset,
            db=db,
            generation=previous.generation,
            state="streaming",
            master_offset=link.received_offset,
            updated_ms=int(time.time() * 1000),
        )
        self._version = view.commit(checkpoint, self._version)
        self._checkpoint = checkpoint
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
        store = RkvStore(client, self.store.checkpoint_name)
        try:
            while not self.stop_event.wait(5.0):
                checkpoint = self._checkpoint
                if checkpoint is None or checkpoint.state != "streaming":
                    continue
                try:
                    sweep(store, Layout(self.config.prefix, checkpoint.generation))
                except Exception:
                    logger.exception("sweeping garbage failed; trying again later")
        finally:
            client.close()
