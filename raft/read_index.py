"""Linearizable reads without a log entry: Raft's ReadIndex (the Raft thesis, 6.4).

A linearizable read must see every write acknowledged before it arrived. A read
barrier (raft/proposer.py) proves that by committing an entry: a journal write and
an fsync on a majority for every round of reads. ReadIndex proves it with one
heartbeat round instead, and no disk:

1. the leader notes its commit index when the read arrives (the *read index*). It
   only does so once an entry of its own term is committed (pysyncobj appends a
   no-op on election): before that, its commit index may lag entries a previous
   leader committed;
2. it sends a heartbeat to every member and waits until a majority (itself
   included) has answered one sent after the read arrived. Every message it sends
   carries a round number (``rkv_round``) and a follower echoes the number of the
   append_entries it answers; a follower only answers a leader whose term is at
   least its own. So a majority still followed this leader after the read arrived:
   no other leader could have committed anything before that moment (it needs the
   votes of a majority, which overlaps this one);
3. it waits until it has applied the read index, then reads its own state.

A follower serving a linearizable read asks the leader for a read index
(``rkv_read_index``), which the leader confirms as its own reads, then waits until
it has applied that index itself.

Reads coalesce: at most one round is in flight; every read that arrives meanwhile
joins the next one, which starts as soon as the current one is confirmed.

ReadIndex is not used, and reads fall back to the barrier, when it cannot be:
fewer than a majority of the members echo round numbers (a cluster still being
upgraded from a version without ReadIndex), or a follower's leader does not, or
leadership changed while the read waited (a barrier on the new leader is always
correct). A round not confirmed within ``timeout`` fails the read: the leader
cannot reach a majority, and a barrier could not commit either.

Everything here runs on pysyncobj's thread; :meth:`ReadIndex.submit` is the only
method other threads call.
"""

from __future__ import annotations

import collections
import enum
import itertools
import threading
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

ROUND = "rkv_round"
"""The key under which a leader numbers its append_entries and a follower echoes it."""
REQUEST = "rkv_read_index"
RESPONSE = "rkv_read_index_response"
MAX_QUEUED = 100_000
"""Reads (local and from followers) that may wait for a round at once; more fail."""


class Fallback(enum.Enum):
    """Why a read must take the barrier path instead (not an error)."""

    UNSUPPORTED = "read index unsupported"
    LEADER_CHANGED = "leadership changed"


@dataclass(frozen=True)
class Failed:
    """Why a read cannot be served now (the client may retry)."""

    reason: str


Outcome = int | Fallback | Failed
"""The raft index a read may be served at once applied, or why not."""


class RaftView(Protocol):
    """What ReadIndex needs of the raft node (pysyncobj's state, on its thread)."""

    def is_leader(self) -> bool: ...
    def term(self) -> int: ...
    def commit_index(self) -> int: ...
    def entry_term(self, index: int) -> int | None: ...
    def last_applied(self) -> int: ...
    def voters(self) -> Collection[Hashable]: ...
    def leader(self) -> Hashable | None: ...
    def send(self, node: Hashable, message: dict[str, Any]) -> None: ...
    def heartbeat(self) -> None: ...


class Reader(Protocol):
    """A read waiting for its outcome (delivered once, on the raft thread)."""

    def deliver(self, outcome: Outcome) -> None: ...


@dataclass
class _Remote:
    """A follower's request, answered over raft."""

    raft: RaftView
    node: Hashable
    request_id: int

    def deliver(self, outcome: Outcome) -> None:
        answer: dict[str, Any] = {"type": RESPONSE, "id": self.request_id}
        if isinstance(outcome, int):
            answer["index"] = outcome
        else:
            answer["error"] = outcome.value if isinstance(outcome, Fallback) else outcome.reason
        self.raft.send(self.node, answer)


@dataclass
class _Waiting:
    reader: Reader
    deadline: float


@dataclass
class _Round:
    number: int
    index: int
    term: int
    readers: list[_Waiting] = field(default_factory=list)


class ReadIndex:
    def __init__(
        self,
        raft: RaftView,
        *,
        timeout: float,
        echo_window: float,
        clock: Callable[[], float],
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        self._raft = raft
        self._timeout = timeout
        self._echo_window = echo_window
        self._clock = clock
        self._wake = wake
        self._inbox: collections.deque[_Waiting] = collections.deque()
        self._inbox_lock = threading.Lock()
        self._queued: list[_Waiting] = []  # the next round's (or a follower's) reads
        self._round: _Round | None = None  # the round in flight (leader)
        self._numbers = itertools.count(1)
        self._stamp = 0  # the number on every append_entries sent now
        self._echoed: dict[Hashable, int] = {}  # highest round each member echoed
        self._echo_times: dict[Hashable, float] = {}
        self._leader_term: tuple[Hashable, int] | None = None  # a leader that numbers rounds
        self._asked: dict[int, _Waiting] = {}  # requests sent to the leader, by id
        self._asked_leader: Hashable | None = None
        self._request_ids = itertools.count(1)
        self._applying: list[tuple[int, _Waiting]] = []  # (index, read): wait for apply
        self.rounds = 0
        self.fallbacks = 0

    # -- any thread -------------------------------------------------------------------

    def submit(self, reader: Reader) -> None:
        """Queue a local read (any thread); its outcome comes through ``deliver``."""
        with self._inbox_lock:
            first = not self._inbox
            self._inbox.append(_Waiting(reader, self._clock() + self._timeout))
        if first:  # else a wake is already due: the raft thread takes the whole inbox
            self._wake()

    # -- the raft thread --------------------------------------------------------------

    def stamp(self) -> int:
        """The round number for an append_entries this leader sends now."""
        return self._stamp

    def on_tick(self) -> None:
        now = self._clock()
        with self._inbox_lock:
            arrived = list(self._inbox)
            self._inbox.clear()
        for waiting in arrived:
            self._queue(waiting)
        if self._asked and self._raft.leader() != self._asked_leader:
            self._abandon_requests()  # another leader: it never saw these requests
        self._expire(now)
        self._serve_applied()
        self._progress()

    def on_append_entries(self, node: Hashable, message: dict[str, Any]) -> None:
        """A follower notes whether its leader numbers rounds (and so serves requests)."""
        if message.get(ROUND) is not None:
            self._leader_term = (node, int(message.get("term", 0)))

    def on_answer(self, node: Hashable, message: dict[str, Any]) -> None:
        """A leader counts a follower's echo of a round number."""
        echoed = message.get(ROUND)
        if echoed is None or not self._raft.is_leader():
            return
        if echoed > self._echoed.get(node, 0):
            self._echoed[node] = int(echoed)
        self._echo_times[node] = self._clock()
        self._progress()

    def on_request(self, node: Hashable, message: dict[str, Any]) -> None:
        """A follower asks this leader for a read index."""
        remote = _Remote(self._raft, node, int(message.get("id", 0)))
        if not self._raft.is_leader() or message.get("term") != self._raft.term():
            remote.deliver(Fallback.LEADER_CHANGED)
            return
        self._queue(_Waiting(remote, self._clock() + self._timeout))
        self._progress()

    def on_response(self, message: dict[str, Any]) -> None:
        """The leader answered this follower's request."""
        waiting = self._asked.pop(int(message.get("id", 0)), None)
        if waiting is None:
            return  # timed out already
        index = message.get("index")
        if isinstance(index, int):
            self._applying.append((index, waiting))
            self._serve_applied()
        else:
            self._fallback(waiting, Fallback.LEADER_CHANGED)

    def on_role_change(self) -> None:
        """Leadership changed: every read waiting on the old role takes the barrier."""
        if self._round is not None:
            for waiting in self._round.readers:
                self._fallback(waiting, Fallback.LEADER_CHANGED)
            self._round = None
        self._abandon_requests()
        self._leader_term = None

    def _abandon_requests(self) -> None:
        asked, self._asked = self._asked, {}
        for waiting in asked.values():
            self._fallback(waiting, Fallback.LEADER_CHANGED)

    # -- internals ----------------------------------------------------------------------

    def _queue(self, waiting: _Waiting) -> None:
        if len(self._queued) >= MAX_QUEUED:
            waiting.reader.deliver(Failed(f"{MAX_QUEUED} reads already wait for a read index"))
            return
        self._queued.append(waiting)

    def _fallback(self, waiting: _Waiting, why: Fallback) -> None:
        self.fallbacks += 1
        waiting.reader.deliver(why)

    def _expire(self, now: float) -> None:
        late = "no majority confirmed this node's leadership in time"
        if self._round is not None and self._round.readers[0].deadline <= now:
            for waiting in self._round.readers:
                waiting.reader.deliver(Failed(late))
            self._round = None
        if any(w.deadline <= now for w in self._queued):
            keep = []
            for waiting in self._queued:
                if waiting.deadline <= now:
                    waiting.reader.deliver(Failed("no read index could be had in time"))
                else:
                    keep.append(waiting)
            self._queued = keep
        for request_id in [i for i, w in self._asked.items() if w.deadline <= now]:
            self._asked.pop(request_id).reader.deliver(
                Failed("the leader gave no read index in time")
            )
        if any(w.deadline <= now for _, w in self._applying):
            keep_applying = []
            for index, waiting in self._applying:
                if waiting.deadline <= now:
                    waiting.reader.deliver(Failed(f"raft index {index} was not applied in time"))
                else:
                    keep_applying.append((index, waiting))
            self._applying = keep_applying

    def _serve_applied(self) -> None:
        if not self._applying:
            return
        applied = self._raft.last_applied()
        keep = []
        for index, waiting in self._applying:
            if index <= applied:
                waiting.reader.deliver(index)
            else:
                keep.append((index, waiting))
        self._applying = keep

    def _progress(self) -> None:
        """Confirm the round in flight if a majority echoed it, then start the next."""
        raft = self._raft
        if raft.is_leader():
            if self._round is not None and self._confirmed(self._round):
                done, self._round = self._round, None
                for waiting in done.readers:
                    if isinstance(waiting.reader, _Remote):
                        waiting.reader.deliver(done.index)
                    else:
                        self._applying.append((done.index, waiting))
                self._serve_applied()
            if self._round is None and self._queued:
                self._start_round()
        elif self._queued:
            self._ask_leader()

    def _majority(self, count: int) -> bool:
        return count > (len(self._raft.voters()) + 1) / 2

    def _confirmed(self, current: _Round) -> bool:
        if current.term != self._raft.term():
            return False
        echoed = sum(1 for n in self._raft.voters() if self._echoed.get(n, 0) >= current.number)
        return self._majority(1 + echoed)

    def _start_round(self) -> None:
        raft = self._raft
        recent = self._clock() - self._echo_window
        numbering = sum(1 for n in raft.voters() if self._echo_times.get(n, -1.0) >= recent)
        if not self._majority(1 + numbering):
            readers, self._queued = self._queued, []
            for waiting in readers:
                self._fallback(waiting, Fallback.UNSUPPORTED)
            return
        index = raft.commit_index()
        if raft.entry_term(index) != raft.term():
            return  # nothing of this term is committed yet: wait (a tick re-checks)
        number = next(self._numbers)
        self._stamp = number
        self._round = _Round(number, index, raft.term(), self._queued)
        self._queued = []
        self.rounds += 1
        if not raft.voters():  # a cluster of one: nobody to ask
            self._progress()
            return
        raft.heartbeat()

    def _ask_leader(self) -> None:
        raft = self._raft
        leader = raft.leader()
        if leader is None or self._leader_term != (leader, raft.term()):
            readers, self._queued = self._queued, []
            why = Fallback.UNSUPPORTED if leader is not None else Fallback.LEADER_CHANGED
            for waiting in readers:
                self._fallback(waiting, why)
            return
        request_id = next(self._request_ids)
        readers, self._queued = self._queued, []
        # One request for every read queued now: they share its answer.
        shared = _Shared(readers)
        self._asked[request_id] = _Waiting(shared, min(w.deadline for w in readers))
        self._asked_leader = leader
        raft.send(leader, {"type": REQUEST, "id": request_id, "term": raft.term()})


class _Shared:
    """Several local reads behind one request to the leader."""

    def __init__(self, readers: list[_Waiting]) -> None:
        self._readers = readers

    def deliver(self, outcome: Outcome) -> None:
        for waiting in self._readers:
            waiting.reader.deliver(outcome)
