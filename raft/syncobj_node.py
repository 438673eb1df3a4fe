"""The pysyncobj SyncObj that carries rkv's entries.

One replicated method, :meth:`RkvSyncObj.apply_entry`, receives every entry
as bytes. pysyncobj numbers replicated methods by their sorted names, so a
second replicated method, or a rename, would silently change what journaled
entries do: never add one.

pysyncobj never fsyncs its journal. :class:`DurableTransport` fsyncs it
before any message that acknowledges entries to the leader, so an entry the
leader counts as replicated is on the follower's disk.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.monotonic import monotonic as pysyncobj_clock
from pysyncobj.transport import TCPTransport

logger = logging.getLogger(__name__)

EntryApplier = Callable[[int, bytes], Any]
"""Called on the raft thread with (raft index, entry bytes); returns the results."""


def journal_fd(journal: Any) -> int | None:
    """The file descriptor under pysyncobj 0.3.17's memory-mapped FileJournal."""
    mapped = getattr(journal, "_FileJournal__journalFile", None)
    file = getattr(mapped, "_ResizableFile__f", None)
    return None if file is None else int(file.fileno())


class DurableTransport(TCPTransport):  # type: ignore[misc]
    """pysyncobj's TCP transport, fsyncing the journal before acknowledging entries."""

    def send(self, node: Any, message: Any) -> bool:
        if (
            isinstance(message, dict)
            and message.get("type") == "next_node_idx"
            and message.get("success")
        ):
            self._syncObj.sync_journal()
        sent: bool = super().send(node, message)
        return sent


class RkvSyncObj(SyncObj):  # type: ignore[misc]
    def __init__(
        self,
        self_address: str,
        partner_addresses: list[str],
        conf: SyncObjConf,
        applier: EntryApplier,
    ) -> None:
        # Set before SyncObj.__init__: its thread may replay the journal at once.
        self._rkv_applier = applier
        self._rkv_synced: tuple[int, int] | None = None
        self._rkv_timeouts: tuple[float, float] | None = None
        super().__init__(self_address, partner_addresses, conf, transportClass=DurableTransport)

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
        if fd is not None:
            os.fdatasync(fd)
        else:  # not pysyncobj 0.3.17's FileJournal: its own msync
            journal.flush()
        self._rkv_synced = (index, term)

    def stop_campaigning(self) -> None:
        """Never start an election again (this process): a stalled node must not lead.

        pysyncobj draws each election deadline from its conf's timeouts, so
        pushing them far out stops this node from becoming a candidate; it
        still follows and votes.
        """
        never = 10.0**9
        self.conf.raftMinTimeout = never
        self.conf.raftMaxTimeout = never * 2
        self._SyncObj__raftElectionDeadline = pysyncobj_clock() + never
        logger.warning("this node will not stand for election any more")

    def hold_elections(self) -> None:
        """Do not campaign until :meth:`release_elections` (a node joining a cluster
        must not disturb it with a raised term before it has been added)."""
        self._rkv_timeouts = (self.conf.raftMinTimeout, self.conf.raftMaxTimeout)
        never = 10.0**9
        self.conf.raftMinTimeout = never
        self.conf.raftMaxTimeout = never * 2
        self._SyncObj__raftElectionDeadline = pysyncobj_clock() + never

    def release_elections(self) -> None:
        timeouts = self._rkv_timeouts
        if timeouts is None:
            return
        self.conf.raftMinTimeout, self.conf.raftMaxTimeout = timeouts
        self._rkv_timeouts = None
        self._SyncObj__raftElectionDeadline = pysyncobj_clock() + timeouts[1]
        logger.info("member of the cluster: this node may stand for election again")

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
