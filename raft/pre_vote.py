"""Pre-vote (Raft thesis §9.6): a member asks whether it could win before it raises
its term.

pysyncobj starts an election as soon as a follower's election timer runs out: it
raises its term and asks for votes. A member back from a pause or a partition
does that at once, and its higher term deposes a healthy leader (writes pause
for an election or two). With pre-vote, a member whose timer ran out first asks
every other member whether it *would* vote for it in the next term, changing
nothing on either side. A member answers yes only if it has not heard from a
leader for the minimum election timeout (and is not the leader itself), the
asker's log is at least as up to date as its own, and the asker's next term is
above its own. Only with a majority of yeses (its own included) does the member
start the real election; otherwise it waits another election timeout and asks
again. So a member that cannot reach the leader but is alone in that never
raises the term, and a leader that a majority still hears is never deposed.

A leadership transfer (pysyncobj's ``timeout_now``) skips the pre-vote: the
leader asked for it, and the members that hear that leader would refuse.

Members of an older rkv do not answer pre-votes: during a rolling upgrade a new
member cannot win an election until a majority runs the new version (the old
members still elect among themselves as before).

Everything here runs on the raft thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Hashable
from typing import Any, Protocol

logger = logging.getLogger(__name__)

REQUEST = "rkv_pre_vote"
RESPONSE = "rkv_pre_vote_response"


class VoterView(Protocol):
    """What pre-vote reads of pysyncobj (raft/syncobj_node.py)."""

    def is_leader(self) -> bool: ...
    def term(self) -> int: ...
    def last_log(self) -> tuple[int, int]:
        """(index, term) of the last entry in this member's log."""
        ...

    def voters(self) -> Collection[Hashable]:
        """The other voting members."""
        ...

    def send(self, node: Hashable, message: dict[str, Any]) -> None: ...


class PreVote:
    def __init__(
        self,
        raft: VoterView,
        *,
        min_timeout: float,
        clock: Callable[[], float],
        may_vote_for: Callable[[dict[str, Any]], bool] = lambda message: True,
    ) -> None:
        self._raft = raft
        self._min_timeout = min_timeout
        self._clock = clock
        self._may_vote_for = may_vote_for
        # A member just started counts as having just heard a leader: it may have
        # answered one a moment before it stopped, and that leader's lease counts on
        # it granting nothing for the minimum election timeout since.
        self._heard_leader = clock()
        self._asking: int | None = None  # the term asked for, while a pre-vote runs
        self._granted: set[Hashable] = set()
        self._won: int | None = None  # the term a majority would vote for
        self.rounds = 0
        self.refused = 0  # pre-votes this member refused (it heard a leader, mostly)

    def heard_leader(self) -> None:
        """An append_entries from a leader of this member's term or above arrived."""
        self._heard_leader = self._clock()
        self._won = None
        self._asking = None

    def leader_lost(self) -> None:
        """This member's connection to its leader closed: the leader crashed or
        restarted, as far as it can tell, so it no longer counts as heard."""
        self._heard_leader = -float("inf")

    def may_campaign(self) -> bool:
        """Whether the election that pysyncobj is about to start may go ahead: a
        majority granted a pre-vote for the very term it will raise to."""
        if self._won is not None and self._won == self._raft.term() + 1:
            self._won = None
            return True
        return False

    def start(self) -> bool:
        """Ask the others; True if this member is a majority by itself."""
        term = self._raft.term() + 1
        self._asking, self._granted, self._won = term, set(), None
        self.rounds += 1
        index, last_term = self._raft.last_log()
        message = {
            "type": REQUEST,
            "term": term,
            "last_log_index": index,
            "last_log_term": last_term,
        }
        for node in self._raft.voters():
            self._raft.send(node, message)
        return self._check()

    def on_request(self, node: Hashable, message: dict[str, Any]) -> None:
        granted = self._grants(message)
        if not granted:
            self.refused += 1
        self._raft.send(node, {"type": RESPONSE, "term": message.get("term"), "granted": granted})

    def on_response(self, node: Hashable, message: dict[str, Any]) -> bool:
        """Count an answer; True once a majority granted the term being asked for."""
        if self._asking is None or message.get("term") != self._asking:
            return False
        if not message.get("granted"):
            return False
        self._granted.add(node)
        return self._check()

    def _check(self) -> bool:
        voters = self._raft.voters()
        if self._asking is None:
            return False
        granted = 1 + sum(1 for node in self._granted if node in voters)
        if granted > (len(voters) + 1) / 2:
            self._won, self._asking = self._asking, None
            return True
        return False

    def _grants(self, message: dict[str, Any]) -> bool:
        raft = self._raft
        if raft.is_leader() or self._clock() - self._heard_leader < self._min_timeout:
            return False  # a leader is alive, as far as this member knows
        try:
            term = int(message["term"])
            index, last_term = int(message["last_log_index"]), int(message["last_log_term"])
        except (KeyError, TypeError, ValueError):
            return False
        if term <= raft.term():
            return False
        ours_index, ours_term = raft.last_log()
        if (last_term, index) < (ours_term, ours_index):
            return False  # its log is behind ours: it could not win our real vote
        return self._may_vote_for(message)
