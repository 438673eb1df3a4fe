"""The pysyncobj SyncObj that carries rkv's entries.

One replicated method, :meth:`RkvSyncObj.apply_entry`, receives every entry
as bytes. pysyncobj numbers replicated methods by their sorted names, so a
second replicated method, or a rename, would silently change what journaled
entries do: never add one.

pysyncobj never fsyncs its journal. :class:`DurableTransport` fsyncs it
before any message that acknowledges entries to the leader, so an entry the
leader counts as replicated is on the follower's disk. It is a
:class:`~raft.transport.GuardedTransport`: the raft port's bounds against
strangers live there.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pysyncobj.syncobj as pysyncobj_core
from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.monotonic import monotonic as pysyncobj_clock
from pysyncobj.syncobj import _RAFT_STATE

from node import metrics
from raft import leader_lease, pre_vote, read_index
from raft.config import TransportLimits
from raft.journal import DiskJournal
from raft.log_throttle import ThrottledLog
from raft.transmission import Transmissions
from raft.transport import GuardedTransport

logger = logging.getLogger(__name__)

_LEADER = _RAFT_STATE.LEADER
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_TICK_HELD = 0.5
"""Seconds between two raft ticks beyond which the raft thread counts as held."""
_SOON_AFTER_LEADER_LOST = 0.15
"""A follower whose connection to the leader closed asks for pre-votes within this
many seconds (drawn at random, so that the followers do not all ask at once)."""
_FOLLOWER = _RAFT_STATE.FOLLOWER

EntryApplier = Callable[[int, bytes], Any]
"""Called on the raft thread with (raft index, entry bytes); returns the results."""


# pysyncobj builds its journal inside SyncObj.__init__ with the module's
# createJournal; RkvSyncObj swaps in DiskJournal for that call only.
_JOURNAL_SWAP = threading.Lock()


def journal_fd(journal: Any) -> int | None:
    """The file descriptor under the memory-mapped journal (DiskJournal, or
    pysyncobj 0.3.17's FileJournal)."""
    if isinstance(journal, DiskJournal):
        return journal.fileno()
    mapped = getattr(journal, "_FileJournal__journalFile", None)
    file = getattr(mapped, "_ResizableFile__f", None)
    return None if file is None else int(file.fileno())


class DurableTransport(GuardedTransport):
    """The raft transport, fsyncing the journal before acknowledging entries, and
    numbering the leader's append_entries for ReadIndex (raft/read_index.py): a
    follower's answer echoes the number of the message it answers."""

    def send(self, node: Any, message: Any) -> bool:
        if isinstance(message, dict):
            kind = message.get("type")
            if kind == "append_entries":
                message[read_index.ROUND] = self._syncObj.read_index.stamp()
                message[leader_lease.SENT] = self._syncObj.lease.stamp()
            elif kind == "next_node_idx":
                if message.get("success"):
                    self._syncObj.sync_journal()
                echo = self._syncObj.answering_round
                if echo is not None:
                    message[read_index.ROUND] = echo
                number = self._syncObj.answering_sent
                if number is not None:
                    message[leader_lease.SENT] = number
            elif kind == "timeout_now":
                self._syncObj.lease.revoke()  # its target campaigns without waiting
        sent: bool = super().send(node, message)
        if not sent and metrics.enabled:
            metrics.PEER_SEND_FAILURES.inc()
        return sent


class RkvSyncObj(SyncObj):  # type: ignore[misc]
    _SyncObj__raftElectionDeadline: float  # pysyncobj's, set by its own methods too

    def __init__(
        self,
        self_address: str,
        partner_addresses: list[str],
        conf: SyncObjConf,
        applier: EntryApplier,
        *,
        amnesiac: bool = False,
        journal_max_bytes: int | None = None,
        holding: Callable[[], bool] = lambda: False,
        transport_limits: TransportLimits | None = None,
        read_timeout: float = 5.0,
        check_quorum_after: float | None = None,
    ) -> None:
        # Set before SyncObj.__init__: its thread may replay the journal at once.
        self._rkv_amnesiac = amnesiac
        self._rkv_catch_up_target: int | None = None
        self._rkv_refused_terms: set[int] = set()
        self._rkv_transmissions = Transmissions()
        self._rkv_conflict: tuple[int, int] | None = None  # (term, index) refused last
        self._rkv_applier = applier
        self._rkv_synced: tuple[int, int] | None = None
        self._rkv_timeouts: tuple[float, float] | None = None
        self._rkv_election_holds: set[str] = set()
        self._rkv_holding = holding
        # The round number of the append_entries being answered (ReadIndex's echo), and
        # its send number (the leader's lease).
        self.answering_round: int | None = None
        self.answering_sent: int | None = None
        self.pre_vote = pre_vote.PreVote(
            VoterView(self),
            min_timeout=conf.raftMinTimeout,
            clock=pysyncobj_clock,
            may_vote_for=self._may_vote_for,
        )
        self._rkv_last_check = pysyncobj_clock()
        self._rkv_disk_log = ThrottledLog(logger)
        self.lease = leader_lease.LeaderLease(
            min_timeout=conf.raftMinTimeout,
            step_down_after=check_quorum_after or conf.raftMaxTimeout,
            clock=pysyncobj_clock,
        )
        self.read_index = read_index.ReadIndex(
            SyncObjView(self),
            timeout=read_timeout,
            echo_window=2 * conf.raftMaxTimeout,
            clock=pysyncobj_clock,
            wake=self._wake,
        )
        with _JOURNAL_SWAP:
            create = pysyncobj_core.createJournal
            pysyncobj_core.createJournal = lambda path: DiskJournal(path) if path else create(path)
            try:
                super().__init__(
                    self_address,
                    partner_addresses,
                    conf,
                    transportClass=functools.partial(DurableTransport, limits=transport_limits),
                )
            finally:
                pysyncobj_core.createJournal = create
        if journal_max_bytes is not None:
            self.addOnTickCallback(lambda: self._compact_journal_past(journal_max_bytes))
        self.addOnTickCallback(self.read_index.on_tick)
        self.addOnTickCallback(self._check_quorum)

    def _wake(self) -> None:
        """Wake the raft thread from its poll (a read is waiting for it)."""
        notifier = getattr(self, "_SyncObj__pipeNotifier", None)
        if notifier is not None:
            notifier.notify()

    def _compact_journal_past(self, max_bytes: int) -> None:
        """On the raft thread, each tick: ask for a raft marker (pysyncobj's log
        compaction) once the journal holds more than ``max_bytes``. pysyncobj
        compacts up to the applied index and skips a request it cannot serve yet."""
        journal = getattr(self, "_SyncObj__raftLog", None)
        if isinstance(journal, DiskJournal) and journal.size_bytes > max_bytes:
            self.forceLogCompaction()

    @property
    def journal_bytes(self) -> int:
        """The bytes the raft journal holds (0 when it is not a DiskJournal)."""
        journal = getattr(self, "_SyncObj__raftLog", None)
        return journal.size_bytes if isinstance(journal, DiskJournal) else 0

    def _SyncObj__applyLogEntries(self) -> bool:
        """pysyncobj's applying of committed entries, skipped while ``holding()``: the
        state has a gap before them (raft/gap.py). Entries keep arriving and being
        acknowledged into the journal meanwhile."""
        if self._rkv_holding():
            return False
        applied: bool = super()._SyncObj__applyLogEntries()
        return applied

    @replicated  # type: ignore[untyped-decorator]
    def apply_entry(self, entry: bytes) -> Any:
        # pysyncobj applies entries in order and bumps raftLastApplied after
        # each, so the entry being applied is the next index.
        return self._rkv_applier(self.raftLastApplied + 1, entry)

    def sync_journal(self) -> None:
        """Make pysyncobj's memory-mapped journal durable (it never does so itself).

        fdatasync on the journal's file descriptor writes the pages dirtied
        through the shared mapping, like msync, but skips the timestamp-only
        inode update msync pays for (0.3 ms against 0.7 ms here). Skipped when
        the journal's last entry is the one synced last time: an (index, term)
        pair names a unique entry, so truncations and snapshot loads, which
        change it, are always synced.
        """
        journal = getattr(self, "_SyncObj__raftLog", None)
        if journal is None or not len(journal):
            return
        _, index, term = journal[len(journal) - 1]
        if (index, term) == self._rkv_synced:
            return
        fd = journal_fd(journal)
        started = time.perf_counter()
        if fd is not None:
            os.fdatasync(fd)
        else:  # not pysyncobj 0.3.17's FileJournal: its own msync
            journal.flush()
        if metrics.enabled:
            metrics.JOURNAL_FSYNC.observe(time.perf_counter() - started)
        self._rkv_synced = (index, term)

    # -- a member that lost its raft state ----------------------------------------
    #
    # Raft's safety rests on every committed entry being held by a majority, and a
    # voter only granting its vote to a candidate whose log is at least as complete
    # as its own. A member restarted with an empty raft state (its data directory
    # wiped or lost, or restored from a snapshot) no longer holds what it
    # acknowledged, yet pysyncobj would let it vote at once, for any candidate. With
    # one other member behind (just restarted), the two could elect that member and
    # lose entries committed by the rest: the chaos campaign found exactly this. So
    # such a member ("amnesiac") grants no vote to a candidate that has any history
    # until it has caught up: its log reaches the commit index a leader announced in
    # the first append_entries it received. In a brand-new cluster every candidate's
    # log is still empty, so the first election is unaffected.

    @property
    def amnesiac(self) -> bool:
        """True while this member, started without raft state, has not caught up."""
        return self._rkv_amnesiac

    # -- pre-vote and check-quorum (raft/pre_vote.py, raft/leader_lease.py) ------------

    def _onTick(self, timeToWait: float = 0.0) -> None:
        self._gate_election()
        try:
            super()._onTick(timeToWait)
        except OSError as error:
            if error.errno not in _DISK_FULL:
                raise
            # The disk is full (the journal cannot grow, the meta file cannot be
            # written): the tick is retried until space is freed. One line per
            # interval, not a traceback per tick (pysyncobj's loop logs each one).
            self._rkv_disk_log.report(
                "disk_full", "raft", "raft cannot write to its disk, retrying: %s", error
            )
            time.sleep(max(timeToWait, 0.05))

    def _gate_election(self) -> None:
        """Before pysyncobj starts an election (its timer ran out): unless a majority
        granted a pre-vote for the term it would raise to, hold it back for another
        timeout and ask for pre-votes instead."""
        if self._SyncObj__raftState == _LEADER or self._SyncObj__selfNode is None:
            return
        now = pysyncobj_clock()
        if self._SyncObj__raftElectionDeadline >= now:
            return
        if not self._SyncObj__connectedToAnyone() or self._SyncObj__transferInProgress:
            return  # pysyncobj starts nothing / the leader asked for this election
        if self.pre_vote.may_campaign():
            return
        self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()
        if self.pre_vote.start():
            self._SyncObj__raftElectionDeadline = 0.0  # a majority by itself

    def _SyncObj__onNodeDisconnected(self, node: Any) -> None:
        """A connection closed. The leader's closing (it crashed or restarted) starts
        the pre-vote soon instead of after the whole election timeout: pre-vote keeps
        that from disturbing a leader that a majority still hears. A leader forgets
        when the member behind it last answered: its lease no longer counts it."""
        SyncObj._SyncObj__onNodeDisconnected(self, node)
        state = self._SyncObj__raftState
        if state == _LEADER:
            self.lease.lost(node, self._SyncObj__otherNodes)
        elif state == _FOLLOWER and node == self._SyncObj__raftLeader:
            self.pre_vote.leader_lost()
            soon = pysyncobj_clock() + random.uniform(0.0, _SOON_AFTER_LEADER_LOST)
            self._SyncObj__raftElectionDeadline = min(self._SyncObj__raftElectionDeadline, soon)

    def _may_vote_for(self, message: dict[str, Any]) -> bool:
        """A member that lost its raft state grants no pre-vote to a candidate with
        history either (see below)."""
        return not (
            self._rkv_amnesiac
            and (message.get("last_log_index", 0) > 1 or message.get("last_log_term", 0) > 0)
        )

    def _check_quorum(self) -> None:
        now = pysyncobj_clock()
        held, self._rkv_last_check = now - self._rkv_last_check, now
        if self._SyncObj__raftState != _LEADER:
            return
        if held > _TICK_HELD:
            # This thread was held (a long apply or fsync, no CPU): it sent nothing
            # meanwhile and has not read the answers waiting for it yet. Count from now.
            self.lease.resumed()
            return
        if self.lease.must_step_down(self._SyncObj__otherNodes):
            self.lease.step_downs += 1
            logger.warning(
                "stepping down: no majority of the members answered this leader within "
                "%.1f s (check-quorum)",
                self.lease.step_down_after,
            )
            self._SyncObj__setState(_FOLLOWER)
            self._SyncObj__raftLeader = None

    def holds_lease(self) -> bool:
        """This leader may serve a read from its own state (any thread)."""
        return bool(self._isLeader()) and pysyncobj_clock() < self.lease.until

    def won_election(self) -> None:
        """This member was elected: a majority found its log up to date, so it holds
        every committed entry and votes again. (A leader receives no append_entries, so
        the first leader of a new cluster, started without raft state like every member,
        would otherwise say it does not vote until it restarts.)"""
        self.lease.became_leader()
        if self._rkv_amnesiac:
            self._rkv_amnesiac = False
            logger.info("elected leader: this member votes again")

    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "next_node_idx":
            SyncObj._SyncObj__onMessageReceived(self, node, message)
            self.read_index.on_answer(node, message)
            if self._SyncObj__raftState == _LEADER:
                self.lease.on_answer(node, message, self._SyncObj__otherNodes)
            return
        if kind == pre_vote.REQUEST:
            self.pre_vote.on_request(node, message)
            return
        if kind == pre_vote.RESPONSE:
            if self.pre_vote.on_response(node, message):
                self._SyncObj__raftElectionDeadline = 0.0  # campaign at the next tick
            return
        if kind == read_index.REQUEST:
            self.read_index.on_request(node, message)
            return
        if kind == read_index.RESPONSE:
            self.read_index.on_response(message)
            return
        if kind == "append_entries":
            self.read_index.on_append_entries(node, message)
            if message.get("term", 0) >= self.raftCurrentTerm:
                self.pre_vote.heard_leader()
            message = self._rkv_transmissions.receive(node, message)
            message = self._after_a_conflict(message)
            message = self._without_held_entries(message)
        if (
            self._rkv_amnesiac
            and kind == "request_vote"
            and (message.get("last_log_index", 0) > 1 or message.get("last_log_term", 0) > 0)
        ):
            term = message.get("term", 0)
            if term not in self._rkv_refused_terms:
                self._rkv_refused_terms.add(term)
                logger.warning(
                    "refusing to vote in term %s: this member started without raft state "
                    "and has not caught up with a leader yet",
                    term,
                )
            return
        answering = kind == "append_entries"
        self.answering_round = message.get(read_index.ROUND) if answering else None
        self.answering_sent = message.get(leader_lease.SENT) if answering else None
        try:
            SyncObj._SyncObj__onMessageReceived(self, node, message)
        finally:
            self.answering_round = self.answering_sent = None
        if self._rkv_amnesiac and kind == "append_entries":
            if self._rkv_catch_up_target is None:
                self._rkv_catch_up_target = int(message.get("commit_index", 0))
            if self._SyncObj__getCurrentLogIndex() >= self._rkv_catch_up_target:
                self._rkv_amnesiac = False
                logger.info(
                    "caught up with the leader's log (index %d): this member votes again",
                    self._rkv_catch_up_target,
                )

    # -- append_entries after a conflict ------------------------------------------------
    #
    # A leader sends a follower everything from its next index in several batches per
    # tick, each one's prevLogIdx past the last, and applies the follower's answers in
    # order. A follower whose last entry conflicts (same index, older term) refuses the
    # first batch with "next index = that entry" and each later batch, whose prevLogIdx
    # is past its log, with "next index = my last + 1". The later answer wins, the
    # leader starts again after the conflicting entry, and the two repeat this forever:
    # the follower is connected, follows, and never catches up (the partition chaos
    # campaign caught it). So once this node has refused a batch for a conflict at an
    # index, it answers every later batch of the same term that starts past that index
    # with the same refusal, until the leader sends from before it.

    def _after_a_conflict(self, message: dict[str, Any]) -> dict[str, Any]:
        if "prevLogIdx" not in message or message.get("transmission") is not None:
            return message
        term, prev_index = int(message.get("term", 0)), int(message["prevLogIdx"])
        conflict = self._rkv_conflict
        if conflict is not None and conflict[0] == term and prev_index > conflict[1]:
            # Refused as the first one was: an index this node holds, with a term that
            # cannot match, so pysyncobj answers "next index = conflict[1]".
            return {**message, "prevLogIdx": conflict[1], "prevLogTerm": -1, "entries": []}
        ours = self._SyncObj__getEntries(prev_index, 1)
        if ours and ours[0][2] != message.get("prevLogTerm"):
            self._rkv_conflict = (term, prev_index)
        elif conflict is not None and (conflict[0] != term or prev_index < conflict[1]):
            self._rkv_conflict = None  # a new term, or the leader backed up before it
        return message

    # -- append_entries: truncate only on a conflict ---------------------------------
    #
    # pysyncobj's follower deletes every entry after prevLogIdx before appending the
    # message's entries, even when it already holds them. A leader resends a prefix
    # (a heartbeat from the follower's next index while newer entries are in
    # flight), so a follower often cut entries it had already acknowledged, and
    # applied ("truncating already-applied log entries"). The leader had counted
    # those acknowledgements towards a majority; with the leader then lost, the
    # entries were on fewer nodes than a majority, a member missing them could win
    # an election, and replicas diverged (the chaos campaign saw two replicas with
    # different offsets at the same raft index). Raft (section 5.3) deletes entries
    # only from the first one that conflicts (same index, other term). So entries
    # this node already holds with the same term are dropped from the message, and
    # pysyncobj only sees the rest.

    def _without_held_entries(self, message: dict[str, Any]) -> dict[str, Any]:
        if "prevLogIdx" not in message or message.get("transmission") is not None:
            return message
        prev_index, prev_term = message["prevLogIdx"], message["prevLogTerm"]
        last_index = self._SyncObj__getCurrentLogIndex()
        if prev_index >= last_index:
            return message  # nothing after prevLogIdx to lose
        ours = self._SyncObj__getEntries(prev_index, 1)
        if not ours or ours[0][2] != prev_term:
            return message  # a mismatch: pysyncobj answers failure, deletes nothing
        entries = message.get("entries") or []
        held = 0
        for entry in entries:
            index, term = entry[1], entry[2]
            ours = self._SyncObj__getEntries(index, 1) if index <= last_index else []
            if not ours or ours[0][2] != term:
                break
            held += 1
        if held < len(entries):
            if held == 0:
                return message  # entries[0] conflicts: pysyncobj deletes from there
            last_held = entries[held - 1]  # the rest conflicts or extends the log
            return {
                **message,
                "prevLogIdx": last_held[1],
                "prevLogTerm": last_held[2],
                "entries": entries[held:],
            }
        last_term = self._SyncObj__getCurrentLogTerm()
        if last_term == message.get("term"):
            # Everything the message carries is held, and so is everything after it:
            # this node's last entry is from the sender's own term, so (log matching)
            # the whole log is a prefix of the sender's. Answer for all of it.
            return {**message, "prevLogIdx": last_index, "prevLogTerm": last_term, "entries": []}
        # Held, but the entries after them come from older terms and are unverified:
        # pysyncobj deletes those, as Raft would once the leader's own ones arrive.
        index, term = (entries[-1][1], entries[-1][2]) if entries else (prev_index, prev_term)
        return {**message, "prevLogIdx": index, "prevLogTerm": term, "entries": []}

    def hold_elections(self, reason: str) -> None:
        """Do not campaign until every reason is released (a node joining a cluster
        must not disturb it with a raised term before it has been added; a node
        whose state has a gap must not lead)."""
        if reason in self._rkv_election_holds:
            return
        self._rkv_election_holds.add(reason)
        if self._rkv_timeouts is None:
            self._rkv_timeouts = (self.conf.raftMinTimeout, self.conf.raftMaxTimeout)
        never = 10.0**9
        self.conf.raftMinTimeout = never
        self.conf.raftMaxTimeout = never * 2
        self._SyncObj__raftElectionDeadline = pysyncobj_clock() + never

    def release_elections(self, reason: str) -> None:
        self._rkv_election_holds.discard(reason)
        timeouts = self._rkv_timeouts
        if timeouts is None or self._rkv_election_holds:
            return
        self.conf.raftMinTimeout, self.conf.raftMaxTimeout = timeouts
        self._rkv_timeouts = None
        self._SyncObj__raftElectionDeadline = pysyncobj_clock() + timeouts[1]
        logger.info("this node may stand for election again")

    def cluster_addresses(self) -> list[str]:
        """The raft addresses of every voting member, this node included."""
        return [self.selfNode.address, *(node.address for node in self.otherNodes)]

    def membership_change_pending(self) -> bool:
        """True while a membership change appended by this leader is not yet applied."""
        pending = getattr(self, "_SyncObj__changeClusterIDx", None)
        return pending is not None and int(self.raftLastApplied) < int(pending)

    def apply_lag(self) -> int:
        """How many entries the leader has committed that this node has not applied."""
        leader_commit = getattr(self, "_SyncObj__leaderCommitIndex", None)
        if leader_commit is None:
            return 0
        return max(0, int(leader_commit) - int(self.raftLastApplied))

    def leader_address(self) -> str | None:
        leader = self._getLeader()
        return None if leader is None else str(leader.address)

    def is_connected_to(self, address: str) -> bool:
        for node in self.otherNodes:
            if node.address == address:
                return bool(self.isNodeConnected(node))
        return False


class VoterView:
    """pysyncobj's state as pre-vote reads it (raft/pre_vote.py), on its thread."""

    def __init__(self, syncobj: RkvSyncObj) -> None:
        self._syncobj = syncobj

    def is_leader(self) -> bool:
        return bool(self._syncobj._isLeader())

    def term(self) -> int:
        return int(self._syncobj.raftCurrentTerm)

    def last_log(self) -> tuple[int, int]:
        syncobj = self._syncobj
        return int(syncobj._SyncObj__getCurrentLogIndex()), int(
            syncobj._SyncObj__getCurrentLogTerm()
        )

    def voters(self) -> Any:
        return self._syncobj._SyncObj__otherNodes

    def send(self, node: Any, message: dict[str, Any]) -> None:
        self._syncobj._SyncObj__transport.send(node, message)


class SyncObjView:
    """pysyncobj's state as ReadIndex reads it (raft/read_index.py), on its thread."""

    def __init__(self, syncobj: RkvSyncObj) -> None:
        self._syncobj = syncobj

    def is_leader(self) -> bool:
        return bool(self._syncobj._isLeader())

    def term(self) -> int:
        return int(self._syncobj.raftCurrentTerm)

    def commit_index(self) -> int:
        return int(self._syncobj.raftCommitIndex)

    def entry_term(self, index: int) -> int | None:
        entries = self._syncobj._SyncObj__getEntries(index, 1)
        return int(entries[0][2]) if entries else None

    def last_applied(self) -> int:
        return int(self._syncobj.raftLastApplied)

    def voters(self) -> Any:
        return self._syncobj._SyncObj__otherNodes  # read on the raft thread: no copy

    def leader(self) -> Any:
        return self._syncobj._getLeader()

    def send(self, node: Any, message: dict[str, Any]) -> None:
        self._syncobj._SyncObj__transport.send(node, message)

    def heartbeat(self) -> None:
        self._syncobj._SyncObj__sendAppendEntries()
