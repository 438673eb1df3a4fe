"""raft/pre_vote.py: when a member grants a pre-vote, and when it may campaign."""

from __future__ import annotations

from typing import Any

from raft.pre_vote import REQUEST, RESPONSE, PreVote


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def started_long_ago(voter: PreVote, clock: Clock) -> PreVote:
    clock.now += 10.0
    return voter


class View:
    def __init__(self, term: int = 5, last_log: tuple[int, int] = (10, 5)) -> None:
        self.leading = False
        self.current_term = term
        self.log = last_log
        self.others = {"b", "c"}
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def is_leader(self) -> bool:
        return self.leading

    def term(self) -> int:
        return self.current_term

    def last_log(self) -> tuple[int, int]:
        return self.log

    def voters(self) -> set[str]:
        return self.others

    def send(self, node: Any, message: dict[str, Any]) -> None:
        self.sent.append((node, message))


def ask(term: int = 6, index: int = 10, last_term: int = 5) -> dict[str, Any]:
    return {"type": REQUEST, "term": term, "last_log_index": index, "last_log_term": last_term}


def answer_to(voter: PreVote, view: View, message: dict[str, Any]) -> bool:
    view.sent.clear()
    voter.on_request("a", message)
    ((node, response),) = view.sent
    assert node == "a" and response["type"] == RESPONSE and response["term"] == message["term"]
    return bool(response["granted"])


def test_a_member_that_hears_a_leader_refuses() -> None:
    clock, view = Clock(), View()
    voter = started_long_ago(PreVote(view, min_timeout=1.0, clock=clock), clock)
    voter.heard_leader()
    clock.now += 0.9
    assert not answer_to(voter, view, ask())
    clock.now += 0.2  # the minimum election timeout has passed since
    assert answer_to(voter, view, ask())


def test_a_member_just_started_refuses_for_the_minimum_election_timeout() -> None:
    """It may have answered a leader just before it stopped: that leader's lease
    counts on it granting nothing for that long."""
    clock, view = Clock(), View()
    voter = PreVote(view, min_timeout=1.0, clock=clock)
    assert not answer_to(voter, view, ask())
    clock.now += 1.1
    assert answer_to(voter, view, ask())


def test_a_leader_refuses() -> None:
    clock, view = Clock(), View()
    view.leading = True
    voter = started_long_ago(PreVote(view, min_timeout=1.0, clock=clock), clock)
    assert not answer_to(voter, view, ask())
    view.leading = False
    assert answer_to(voter, view, ask())


def test_an_asker_behind_in_log_or_term_is_refused() -> None:
    clock, view = Clock(), View(term=5, last_log=(10, 5))
    voter = started_long_ago(PreVote(view, min_timeout=1.0, clock=clock), clock)
    assert not answer_to(voter, view, ask(last_term=4, index=50))  # older last term
    assert not answer_to(voter, view, ask(index=9))  # same term, shorter log
    assert not answer_to(voter, view, ask(term=5))  # its next term is not above ours
    assert answer_to(voter, view, ask(index=10))
    assert answer_to(voter, view, ask(last_term=6, index=2))


def test_a_member_without_raft_state_refuses_a_candidate_with_history() -> None:
    clock, view = Clock(), View(term=0, last_log=(0, 0))
    voter = started_long_ago(
        PreVote(view, min_timeout=1.0, clock=clock, may_vote_for=lambda m: False), clock
    )
    assert not answer_to(voter, view, ask())


def test_granting_changes_nothing_on_the_voter() -> None:
    clock, view = Clock(), View()
    voter = started_long_ago(PreVote(view, min_timeout=1.0, clock=clock), clock)
    assert answer_to(voter, view, ask(term=9))
    assert view.current_term == 5


def test_a_majority_of_grants_lets_the_member_campaign_for_that_term_only() -> None:
    clock, view = Clock(), View(term=5)
    voter = started_long_ago(PreVote(view, min_timeout=1.0, clock=clock), clock)
    assert not voter.may_campaign()
    assert voter.start() is False
    asked = {node for node, message in view.sent if message["type"] == REQUEST}
    assert asked == {"b", "c"} and all(m["term"] == 6 for _, m in view.sent)
    assert not voter.on_response("b", {"type": RESPONSE, "term": 6, "granted": False})
    assert not voter.on_response("c", {"type": RESPONSE, "term": 7, "granted": True})
    assert voter.on_response("c", {"type": RESPONSE, "term": 6, "granted": True})
    assert voter.may_campaign()
    assert not voter.may_campaign()  # once


def test_hearing_a_leader_cancels_a_won_pre_vote() -> None:
    clock, view = Clock(), View(term=5)
    voter = started_long_ago(PreVote(view, min_timeout=1.0, clock=clock), clock)
    voter.start()
    assert voter.on_response("b", {"type": RESPONSE, "term": 6, "granted": True})
    voter.heard_leader()
    assert not voter.may_campaign()


def test_a_won_pre_vote_is_for_the_next_term_only() -> None:
    clock, view = Clock(), View(term=5)
    voter = started_long_ago(PreVote(view, min_timeout=1.0, clock=clock), clock)
    voter.start()
    assert voter.on_response("b", {"type": RESPONSE, "term": 6, "granted": True})
    view.current_term = 6  # a leader of term 6 appeared meanwhile
    assert not voter.may_campaign()


def test_a_member_alone_is_a_majority_by_itself() -> None:
    clock, view = Clock(), View()
    view.others = set()
    voter = started_long_ago(PreVote(view, min_timeout=1.0, clock=clock), clock)
    assert voter.start() is True
    assert voter.may_campaign()


def test_a_member_that_lost_its_leaders_connection_grants_at_once() -> None:
    clock, view = Clock(), View()
    voter = started_long_ago(PreVote(view, min_timeout=1.0, clock=clock), clock)
    voter.heard_leader()
    assert not answer_to(voter, view, ask())
    voter.leader_lost()
    assert answer_to(voter, view, ask())
