"""RaftConsensus: the node's consensus log, built on pysyncobj.

Threads: pysyncobj runs its own tick thread, which applies entries to the
state machine and calls our callbacks. The asyncio loop proposes through the
group-commit proposer. The two meet in one place: outcomes collected on the
raft thread are handed to the loop with ``call_soon_threadsafe`` at the end of
each tick, after the fsync that makes them durable.

Durability point (documented in docs/OPERATIONS.md): at the end of every
tick in which this node applied entries that a local client waits for, it
msyncs pysyncobj's journal and fsyncs the commit log, and only then resolves
the clients' futures. Followers fsync their journal before acknowledging
entries (raft/syncobj_node.py), so an acknowledged write is on the disks of
a majority.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pysyncobj import SyncObjConf

from node import metrics
from node.errors import NodeNotReady, NotApplied
from node.state.commands import Command
from node.state.machine import StateMachine
from node.state.results import CommandResult
from node.storage.datadir import make_directories
from node.storage.recovery import NodeStorage
from raft.ack_syncer import AckSyncer
from raft.config import Member, RaftConfig
from raft.gap import CatchUp, GapFiller
from raft.marker import RaftMarkers
from raft.membership import Membership
from raft.outcomes import outcome
from raft.proposer import GroupCommitProposer
from raft.read_index import Failed, Outcome
from raft.syncobj_node import RkvSyncObj

logger = logging.getLogger(__name__)

_JOINING = "joining"
_BEHIND = "catching up"

JOURNAL_FILE = "raft.journal"
MARKER_FILE = "raft.marker"
_STATE_NAMES = {0: "follower", 1: "candidate", 2: "leader"}
_NEXT_INDEX = "next_node_idx_server_"  # pysyncobj getStatus() keys
_MATCH_INDEX = "match_idx_server_"
# A node further behind the leader's commit index than this is not ready.
_READY_LAG_ENTRIES = 100
# How often proposal deadlines are enforced: a write waits at most
# proposal_timeout plus this.
_SWEEP_SECONDS = 0.25


class _LoopReader:
    """A read waiting on the asyncio loop for ReadIndex's outcome (raft thread)."""

    __slots__ = ("_future", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[Outcome]) -> None:
        self._loop = loop
        self._future = future

    def deliver(self, outcome: Outcome) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(_settle, self._future, outcome)


def _settle(future: asyncio.Future[Outcome], outcome: Outcome) -> None:
    if not future.done():
        future.set_result(outcome)


def _count_results(results: tuple[CommandResult, ...]) -> None:
    """One increment per result code of an entry (most entries have one code)."""
    first = results[0].code if results else None
    if all(r.code is first for r in results):
        if first is not None:
            metrics.PROPOSALS_APPLIED.labels(first.value).inc(len(results))
        return
    for code, count in Counter(r.code for r in results).items():
        metrics.PROPOSALS_APPLIED.labels(code.value).inc(count)


class RaftConsensus:
    def __init__(
        self,
        config: RaftConfig,
        storage: NodeStorage,
        machine: StateMachine,
        catch_up: CatchUp,
    ) -> None:
        self._config = config
        self._storage = storage
        self._machine = machine
        self._holding_elections = False
        self._storage_error: str | None = None
        self._acks: list[tuple[int, Any, int]] = []
        self._calls: list[Callable[[], None]] = []
        self._acks_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._syncobj: RkvSyncObj | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.role_changes = 0
        # The leader's raft address at the last tick, None while there was none (metrics).
        self._leader_seen: str | None = None
        self._proposer = GroupCommitProposer(
            self._submit,
            max_commands_per_entry=config.max_commands_per_entry,
            max_entry_bytes=config.max_entry_bytes,
            max_entries_in_flight=config.max_entries_in_flight,
            max_pending_commands=config.max_pending_commands,
            proposal_timeout=config.proposal_timeout,
        )
        self._membership = Membership(
            config, storage, lambda: self._syncobj, self.leader_http_url, self.propose
        )
        self._gap = GapFiller(storage, catch_up, self.catch_up_sources, self._caught_up)
        self._markers = RaftMarkers(storage, config.self_member.node_id, self._gap)
        # Called on the raft thread with the number of records pulled, after a
        # catch-up from the leader's log (the composition root compacts then).
        self.catch_up_listeners: list[Callable[[int], None]] = []
        # Called on the raft thread with True when this node becomes leader, False when
        # it stops leading (the lease clock promotes itself before expiring anything).
        self.role_listeners: list[Callable[[bool], None]] = []
        self._syncer = AckSyncer(storage.commit_log.sync, self._deliver_threadsafe)

    # -- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._syncer.start()
        journal_dir = Path(self._config.journal_dir)
        make_directories(journal_dir)
        cfg = self._config
        conf = SyncObjConf(
            password=cfg.secret,
            # Always both: a journal without a dump file leaves a restarted node stuck.
            journalFile=str(journal_dir / JOURNAL_FILE),
            fullDumpFile=str(journal_dir / MARKER_FILE),
            serializer=self._markers.serialize,
            deserializer=self._markers.deserialize,
            raftMinTimeout=cfg.election_timeout_min,
            raftMaxTimeout=cfg.election_timeout_max,
            appendEntriesPeriod=cfg.heartbeat_interval,
            autoTickPeriod=cfg.tick_interval,
            connectionTimeout=max(3.5, cfg.election_timeout_max + 1.0),
            leaderFallbackTimeout=cfg.leader_fallback_timeout,
            # Send each entry (and each new commit index) at once instead of
            # waiting for the next heartbeat: one-client latency depends on it.
            appendEntriesUseBatch=False,
            commandsWaitLeader=False,
            logCompactionMinEntries=cfg.compaction_min_entries,
            logCompactionMinTime=cfg.compaction_min_seconds,
            onStateChanged=self._on_state_changed,
            # Members are added and removed at run time (one change at a time);
            # markers carry the member list and a restarted node takes it from
            # its marker and journal rather than from its flags.
            dynamicMembershipChange=True,
        )
        partners = [m.raft_address for m in cfg.peers]
        # No journal and no marker: a new member, or one whose raft state was lost.
        amnesiac = (
            not (journal_dir / JOURNAL_FILE).exists() and not (journal_dir / MARKER_FILE).exists()
        )
        self._syncobj = await self._loop.run_in_executor(
            None,
            functools.partial(
                RkvSyncObj,
                cfg.self_member.raft_address,
                partners,
                conf,
                self._apply,
                amnesiac=amnesiac,
                journal_max_bytes=cfg.compaction_max_bytes,
                holding=self._gap.holding,
                transport_limits=cfg.transport,
                read_timeout=cfg.proposal_timeout,
            ),
        )
        if cfg.joining:
            self._syncobj.hold_elections(_JOINING)
            self._holding_elections = True
        self._syncobj.addOnTickCallback(self._on_tick)
        self._sweeper = asyncio.create_task(self._sweep())

    async def stop(self) -> None:
        self._proposer.fail_pending(NotApplied("the node is shutting down"))
        await asyncio.get_running_loop().run_in_executor(None, self._gap.stop)
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        syncobj = self._syncobj
        if syncobj is not None:
            syncobj.destroy()
            thread = getattr(syncobj, "_SyncObj__thread", None)
            if thread is not None:
                await asyncio.get_running_loop().run_in_executor(None, thread.join, 10.0)
        await asyncio.get_running_loop().run_in_executor(None, self._syncer.stop)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(_SWEEP_SECONDS)
            self._proposer.expire()

    # -- the raft thread ------------------------------------------------------------

    def _apply(self, raft_index: int, entry: bytes) -> tuple[CommandResult, ...]:
        try:
            results = self._machine.apply(raft_index, entry)
        except Exception as exc:
            # pysyncobj will retry this entry on its next tick; until one succeeds
            # the node reports itself not ready.
            error = f"applying raft entry {raft_index} failed: {exc}"
            if error != self._storage_error:  # retried every tick: said once
                logger.exception("applying raft entry %d failed; it will be retried", raft_index)
            self._storage_error = error
            raise
        if self._storage_error is not None:
            logger.info("raft entry %d applied; the storage error has cleared", raft_index)
            self._storage_error = None
        if metrics.enabled:
            _count_results(results)
        return results

    def _caught_up(self, pulled: int) -> None:
        for listener in self.catch_up_listeners:
            listener(pulled)

    def _on_result(self, entry_id: int, result: Any, error: int) -> None:
        with self._acks_lock:
            self._acks.append((entry_id, result, error))

    async def on_apply_thread(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on pysyncobj's thread between ticks (where entries are applied)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def run() -> None:
            try:
                fn()
            except Exception as exc:
                loop.call_soon_threadsafe(done.set_exception, exc)
            else:
                loop.call_soon_threadsafe(done.set_result, None)

        with self._acks_lock:
            self._calls.append(run)
        await asyncio.wait_for(done, self._config.proposal_timeout)

    def _on_tick(self) -> None:
        assert self._syncobj is not None
        if self._gap.holding():
            # A node missing entries must never lead (it would answer nothing and
            # redirect leader reads to itself), and the calls that touch storage
            # wait: the gap filler is writing it.
            self._syncobj.hold_elections(_BEHIND)
        else:
            self._syncobj.release_elections(_BEHIND)
            with self._acks_lock:
                calls, self._calls = self._calls, []
            for call in calls:
                call()
        leader = self._syncobj.leader_address()
        if leader != self._leader_seen:
            # As etcd counts: a leader after none or after another (an election's end,
            # the same node re-elected included).
            if leader is not None and metrics.enabled:
                metrics.LEADER_CHANGES.inc()
            self._leader_seen = leader
        if self._holding_elections and leader is not None:
            self._holding_elections = False
            self._syncobj.release_elections(_JOINING)
        # At the end of every tick: entries this node appended during the tick
        # (as leader) are made durable while the followers work on them, so the
        # acknowledgement below rarely waits for the journal.
        assert self._syncobj is not None
        self._syncobj.sync_journal()
        with self._acks_lock:
            acks, self._acks = self._acks, []
        if not acks or self._loop is None:
            return
        if self._storage.commit_log.unsynced or self._syncer.busy:
            self._syncer.submit(acks)  # fsync the commit log, then answer
        else:  # nothing new to make durable (read barriers, failures)
            self._deliver_threadsafe(acks)

    def _deliver_threadsafe(self, acks: list[tuple[int, Any, int]]) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._deliver, acks)

    def _on_state_changed(self, old: int, new: int) -> None:
        self.role_changes += 1
        logger.info("raft role: %s -> %s", _STATE_NAMES.get(old, old), _STATE_NAMES.get(new, new))
        if _STATE_NAMES.get(new) == "leader" and self._syncobj is not None:
            self._syncobj.won_election()
        leading = _STATE_NAMES.get(new) == "leader"
        if self._syncobj is not None:
            self._syncobj.read_index.on_role_change()
        if leading != (_STATE_NAMES.get(old) == "leader"):
            for listener in self.role_listeners:
                listener(leading)

    # -- the asyncio loop -----------------------------------------------------------

    def _submit(self, entry_id: int, entry: bytes) -> None:
        assert self._syncobj is not None
        self._syncobj.apply_entry(entry, callback=functools.partial(self._on_result, entry_id))

    def _deliver(self, acks: list[tuple[int, Any, int]]) -> None:
        for entry_id, result, error in acks:
            self._proposer.complete(entry_id, outcome(result, error))

    def _check_can_propose(self) -> None:
        syncobj = self._syncobj
        if syncobj is None:
            raise NotApplied("raft is not running")
        if not syncobj.hasQuorum:
            raise NotApplied("this node cannot reach a majority of the cluster")

    async def propose(self, command: Command) -> CommandResult:
        self._check_can_propose()
        # A raised nospace alarm refuses it at apply anyway: spare the log the entry.
        refusal = self._machine.space_refusal(command)
        if refusal is not None:
            return refusal
        return await self._proposer.propose(command)

    async def read_barrier(self) -> None:
        """Wait until this node's state holds every write acknowledged before the call:
        by ReadIndex (raft/read_index.py), or a barrier entry where it cannot be used."""
        self._check_can_propose()
        syncobj = self._syncobj
        if self._config.read_index and syncobj is not None:
            loop = asyncio.get_running_loop()
            future: asyncio.Future[Outcome] = loop.create_future()
            syncobj.read_index.submit(_LoopReader(loop, future))
            try:
                found = await asyncio.wait_for(future, self._config.proposal_timeout + 1.0)
            except TimeoutError:
                raise NodeNotReady("linearizable read: raft gave no read index in time") from None
            if isinstance(found, int):
                if metrics.enabled:
                    metrics.LINEARIZABLE_READS.labels("read_index").inc()
                return
            if isinstance(found, Failed):
                raise NodeNotReady(f"linearizable read: {found.reason}")
        if metrics.enabled:
            metrics.LINEARIZABLE_READS.labels("barrier").inc()
        await self._proposer.read_barrier()

    # -- state ----------------------------------------------------------------------

    def is_leader(self) -> bool:
        return self._syncobj is not None and bool(self._syncobj._isLeader())

    def holds_lease(self) -> bool:
        """This node leads and a majority followed it within the minimum election
        timeout, so no other leader can exist (raft/leader_lease.py)."""
        return self._syncobj is not None and self._syncobj.holds_lease()

    def leader(self) -> Member | None:
        """The leader this node follows, if it is itself or still connected to it.

        pysyncobj forgets a leader only when an election starts; a node that
        does not campaign (stalled) would otherwise name a dead leader forever.
        """
        syncobj = self._syncobj
        if syncobj is None:
            return None
        address = syncobj.leader_address()
        if address is None:
            return None
        if address != self._config.self_member.raft_address and not syncobj.is_connected_to(
            address
        ):
            return None
        return self._membership.directory().get(address)

    def leader_http_url(self) -> str | None:
        leader = self.leader()
        return None if leader is None else leader.http_url

    def stuck_reason(self) -> str | None:
        """Why this node is stuck: a gap it failed to fill so far (it retries), or a
        failing apply (retried each tick); /v1/status shows it as ``stalled``."""
        return self._gap.stalled or self._storage_error

    def stalled_reason(self) -> str | None:
        """Why this node's state cannot be trusted now (it is stuck, or filling a gap
        behind a raft marker), so that it serves no reads; None if it may."""
        return self.stuck_reason() or self._gap.behind

    def readiness(self) -> dict[str, str | None]:
        """What keeps this node from being ready, by check (None: the check passes).

        ``storage``: the last apply did not fail; ``not_stalled``: no gap it failed
        to fill and none being filled behind a raft marker; ``leader``: a leader is
        known and connected; ``applied``: the commit index learned at start-up is
        applied and the node is at most _READY_LAG_ENTRIES behind the leader's."""
        syncobj = self._syncobj
        gap = self._gap.stalled or self._gap.behind
        if syncobj is None:
            leader: str | None = "raft is not running"
            applied: str | None = "raft is not running"
        else:
            leader = None if self.leader() is not None else "no leader known"
            lag = syncobj.apply_lag()
            if not syncobj.isReady():
                applied = "the commit index learned at start-up is not applied yet"
            elif lag > _READY_LAG_ENTRIES:
                applied = (
                    f"{lag} committed entries not applied here (the bound is {_READY_LAG_ENTRIES})"
                )
            else:
                applied = None
        return {
            "storage": self._storage_error,
            "not_stalled": gap,
            "leader": leader,
            "applied": applied,
        }

    def ready(self) -> bool:
        return all(problem is None for problem in self.readiness().values())

    def status(self) -> dict[str, Any]:
        syncobj = self._syncobj
        me = self._config.self_member
        if syncobj is None:
            return {"id": me.node_id, "role": "starting"}
        raw = syncobj.getStatus()
        leader = self.leader()
        members = [
            {
                "id": m.node_id,
                "raft_address": m.raft_address,
                "url": m.http_url,
                "self": m.raft_address == me.raft_address,
                "reachable": m.raft_address == me.raft_address
                or syncobj.is_connected_to(m.raft_address),
            }
            for m in self.members()
        ]
        # A leader's view of each follower's log (by the address it dials): the next
        # index it sends from and the highest index it knows the follower holds.
        progress: dict[str, dict[str, Any]] = {}
        for key, value in raw.items():
            if key.startswith(_NEXT_INDEX):
                address = key.removeprefix(_NEXT_INDEX)
                match = raw.get(_MATCH_INDEX + address)
                progress[address] = {"next_index": value, "match_index": match}
        return {
            "id": me.node_id,
            "url": me.http_url,
            "role": _STATE_NAMES.get(raw["state"], str(raw["state"])),
            "votes": not syncobj.amnesiac,
            "leader": None if leader is None else {"id": leader.node_id, "url": leader.http_url},
            "term": raw["raft_term"],
            "commit_index": raw["commit_idx"],
            "raft_last_applied": raw["last_applied"],
            "has_quorum": raw["has_quorum"],
            "raft_log_entries": raw["log_len"],
            "role_changes": self.role_changes,
            "stalled": self.stuck_reason(),
            "ready": self.ready(),
            "proposals": {
                "waiting": self._proposer.commands_waiting,
                "entries_submitted": self._proposer.entries_submitted,
                "commands_submitted": self._proposer.commands_submitted,
            },
            "members": members,
            "followers": progress if raw["state"] == 2 else {},
            "membership_change_pending": syncobj.membership_change_pending(),
            "time": time.time(),
        }

    # -- membership (raft/membership.py) ---------------------------------------------

    def members(self) -> list[Member]:
        """The voting members raft knows now (this node first), with ids and URLs."""
        return self._membership.members()

    def member_url(self, node_id: str) -> str | None:
        return self._membership.member_url(node_id)

    def catch_up_sources(self, author: str) -> list[str]:
        """Where a node behind a raft marker may fetch the state: the marker's
        author, the leader, then every other member (a marker is forwarded as it
        is, so its author may be this very node, wiped since it wrote it)."""
        me = self._config.self_member.node_id
        leader = self.leader()
        ids = [author, leader.node_id if leader is not None else None]
        ids += [m["id"] for m in self._membership.member_list()]
        urls: list[str] = []
        for node_id in ids:
            url = None if node_id in (None, me) else self.member_url(str(node_id))
            if url is not None and url not in urls:
                urls.append(url)
        return urls

    def member_list(self) -> list[dict[str, str]]:
        return self._membership.member_list()

    async def add_member(self, node_id: str, raft_address: str, url: str) -> dict[str, Any]:
        """Add a voting member (on the leader): record it, then raft's add."""
        return await self._membership.add_member(node_id, raft_address, url)

    async def remove_member(self, node_id: str) -> dict[str, Any]:
        """Remove a voting member (on the leader): raft's remove, then the record."""
        return await self._membership.remove_member(node_id)

    async def set_member_url(self, node_id: str, url: str) -> dict[str, Any]:
        """Change a member's HTTP URL (on the leader)."""
        return await self._membership.set_member_url(node_id, url)
