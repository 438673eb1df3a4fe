"""ReadIndex's protocol (raft/read_index.py) against a scripted raft node."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from raft.read_index import REQUEST, RESPONSE, ROUND, Failed, Fallback, Outcome, ReadIndex

A, B = "follower-a", "follower-b"


class FakeRaft:
    def __init__(self, *, leader: bool = True, voters: tuple[str, ...] = (A, B)) -> None:
        self.leading = leader
        self.current_term = 3
        self.commit = 10
        self.terms = {i: 3 for i in range(1, 11)}
        self.applied = 10
        self.members = list(voters)
        self.leader_node: Hashable | None = "self" if leader else A
        self.sent: list[tuple[Hashable, dict[str, Any]]] = []
        self.heartbeats = 0

    def is_leader(self) -> bool:
        return self.leading

    def term(self) -> int:
        return self.current_term

    def commit_index(self) -> int:
        return self.commit

    def entry_term(self, index: int) -> int | None:
        return self.terms.get(index)

    def last_applied(self) -> int:
        return self.applied

    def voters(self) -> list[Hashable]:
        return list(self.members)

    def leader(self) -> Hashable | None:
        return self.leader_node

    def send(self, node: Hashable, message: dict[str, Any]) -> None:
        self.sent.append((node, message))

    def heartbeat(self) -> None:
        self.heartbeats += 1


class Read:
    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []

    def deliver(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(raft: FakeRaft, clock: Clock | None = None) -> ReadIndex:
    return ReadIndex(raft, timeout=5.0, echo_window=4.0, clock=clock or Clock())


def echo(index: ReadIndex, node: str, number: int | None = None) -> None:
    """``node`` answers an append_entries stamped ``number`` (the current stamp)."""
    stamp = index.stamp() if number is None else number
    index.on_answer(node, {"type": "next_node_idx", ROUND: stamp})


def numbering(index: ReadIndex) -> None:
    """Both followers have answered with round numbers before: they speak ReadIndex."""
    echo(index, A, 0)
    echo(index, B, 0)


def submit(index: ReadIndex) -> Read:
    read = Read()
    index.submit(read)
    index.on_tick()
    return read


def test_a_read_is_served_after_a_majority_echoes_a_round_sent_after_it() -> None:
    raft = FakeRaft()
    index = make(raft)
    numbering(index)
    read = submit(index)
    assert raft.heartbeats == 1 and read.outcomes == []
    echo(index, A)  # with the leader itself: 2 of 3
    assert read.outcomes == [10]
    assert index.rounds == 1


def test_a_deposed_leader_never_serves_a_linearizable_read() -> None:
    """Followers that moved to a newer term ignore the old leader's heartbeats and never
    echo its round: answers to messages sent before the read (older numbers) do not
    count, and the read fails once its deadline passes instead of being served."""
    raft = FakeRaft()
    clock = Clock()
    index = make(raft, clock)
    numbering(index)
    first = submit(index)
    echo(index, A)
    assert first.outcomes == [10]
    stale_stamp = index.stamp()
    read = submit(index)
    echo(index, A, stale_stamp)  # answers to heartbeats sent before this read
    echo(index, B, stale_stamp)
    index.on_tick()
    assert read.outcomes == []
    clock.now += 5.1
    index.on_tick()
    assert len(read.outcomes) == 1 and isinstance(read.outcomes[0], Failed)


def test_a_read_waits_until_the_read_index_is_applied() -> None:
    raft = FakeRaft()
    raft.applied = 7
    index = make(raft)
    numbering(index)
    read = submit(index)
    echo(index, B)
    assert read.outcomes == []  # confirmed at index 10, applied only 7
    raft.applied = 9
    index.on_tick()
    assert read.outcomes == []
    raft.applied = 10
    index.on_tick()
    assert read.outcomes == [10]


def test_a_new_leader_waits_for_an_entry_of_its_own_term() -> None:
    """Until its election no-op is committed, a new leader's commit index may miss
    entries the previous leader committed: no round starts."""
    raft = FakeRaft()
    raft.current_term = 4  # the entry at the commit index is from term 3
    index = make(raft)
    numbering(index)
    read = submit(index)
    assert raft.heartbeats == 0
    echo(index, A)
    echo(index, B)
    assert read.outcomes == []
    raft.commit = 11
    raft.terms[11] = 4
    index.on_tick()
    assert raft.heartbeats == 1
    echo(index, A)
    raft.applied = 11
    index.on_tick()
    assert read.outcomes == [11]


def test_reads_coalesce_one_round_in_flight() -> None:
    raft = FakeRaft()
    index = make(raft)
    numbering(index)
    first = [submit(index) for _ in range(3)]
    assert raft.heartbeats == 1  # the later two queue for the next round
    raft.commit = 12
    raft.terms.update({11: 3, 12: 3})
    raft.applied = 12
    echo(index, A)
    assert [r.outcomes for r in first] == [[10], [], []]
    assert raft.heartbeats == 2  # the next round started at once
    echo(index, B)
    assert [r.outcomes for r in first] == [[10], [12], [12]]
    assert index.rounds == 2


def test_without_a_majority_that_numbers_rounds_reads_take_the_barrier() -> None:
    """A cluster being upgraded: followers of an older version echo nothing."""
    raft = FakeRaft()
    index = make(raft)
    echo(index, A, 0)  # only one of two followers numbers: 2 of 3 with the leader
    clock_index = make(FakeRaft())
    read = submit(clock_index)  # nobody numbers
    assert read.outcomes == [Fallback.UNSUPPORTED]
    ok = submit(index)
    echo(index, A)
    assert ok.outcomes == [10]


def test_echoes_go_stale_after_the_window() -> None:
    raft = FakeRaft()
    clock = Clock()
    index = make(raft, clock)
    numbering(index)
    clock.now += 4.5  # followers downgraded: nothing echoed for longer than the window
    read = submit(index)
    assert read.outcomes == [Fallback.UNSUPPORTED]


def test_a_leadership_change_sends_waiting_reads_to_the_barrier() -> None:
    raft = FakeRaft()
    index = make(raft)
    numbering(index)
    read = submit(index)
    raft.leading = False
    index.on_role_change()
    assert read.outcomes == [Fallback.LEADER_CHANGED]


def test_a_cluster_of_one_serves_at_once() -> None:
    raft = FakeRaft(voters=())
    index = make(raft)
    read = submit(index)
    assert read.outcomes == [10]


def test_a_follower_asks_its_leader_and_waits_for_apply() -> None:
    raft = FakeRaft(leader=False)
    index = make(raft)
    index.on_append_entries(A, {"type": "append_entries", "term": 3, ROUND: 0})
    reads = [Read(), Read()]
    for read in reads:
        index.submit(read)
    raft.applied = 8
    index.on_tick()
    assert len(raft.sent) == 1  # one request for both reads
    node, request = raft.sent[0]
    assert node == A and request["type"] == REQUEST and request["term"] == 3
    index.on_response({"type": RESPONSE, "id": request["id"], "index": 9})
    assert reads[0].outcomes == []
    raft.applied = 9
    index.on_tick()
    assert [r.outcomes for r in reads] == [[9], [9]]


def test_a_follower_whose_leader_does_not_number_rounds_takes_the_barrier() -> None:
    raft = FakeRaft(leader=False)
    index = make(raft)
    index.on_append_entries(A, {"type": "append_entries", "term": 3})
    read = submit(index)
    assert read.outcomes == [Fallback.UNSUPPORTED] and raft.sent == []


def test_a_follower_falls_back_when_its_leader_changes_or_refuses() -> None:
    raft = FakeRaft(leader=False)
    index = make(raft)
    index.on_append_entries(A, {"type": "append_entries", "term": 3, ROUND: 0})
    first = submit(index)
    raft.leader_node = B
    index.on_tick()
    assert first.outcomes == [Fallback.LEADER_CHANGED]
    raft.leader_node = A
    second = submit(index)
    _, request = raft.sent[-1]
    index.on_response({"type": RESPONSE, "id": request["id"], "error": "leadership changed"})
    assert second.outcomes == [Fallback.LEADER_CHANGED]


def test_a_leader_answers_a_followers_request_after_its_round() -> None:
    raft = FakeRaft()
    index = make(raft)
    numbering(index)
    index.on_request(B, {"type": REQUEST, "id": 7, "term": 3})
    assert raft.heartbeats == 1 and raft.sent == []
    echo(index, B)
    assert raft.sent == [(B, {"type": RESPONSE, "id": 7, "index": 10})]


def test_a_request_for_another_term_is_refused() -> None:
    raft = FakeRaft()
    index = make(raft)
    numbering(index)
    index.on_request(B, {"type": REQUEST, "id": 7, "term": 2})
    assert raft.sent == [(B, {"type": RESPONSE, "id": 7, "error": "leadership changed"})]
    assert raft.heartbeats == 0
