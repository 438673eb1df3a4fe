"""raft/leader_lease.py: the lease runs from when a majority last surely followed, and
check-quorum's step-down."""

from __future__ import annotations

from raft.leader_lease import SENT, LeaderLease


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lease(clock: Clock) -> LeaderLease:
    held = LeaderLease(min_timeout=1.0, step_down_after=2.0, clock=clock)
    held.became_leader()
    return held


def test_no_lease_until_a_majority_answered() -> None:
    clock = Clock()
    held = lease(clock)
    assert not held.holds()
    number = held.stamp()
    clock.now += 0.01
    held.on_answer("b", {SENT: number}, {"b", "c"})
    assert held.holds()


def test_the_lease_runs_from_the_send_time_not_the_answer_time() -> None:
    clock = Clock()
    held = lease(clock)
    sent_at = clock.now
    number = held.stamp()
    clock.now += 0.8  # a slow answer
    held.on_answer("b", {SENT: number}, {"b", "c"})
    assert held.until == sent_at + 1.0
    clock.now = sent_at + 0.99
    assert held.holds()
    clock.now = sent_at + 1.01
    assert not held.holds()


def test_one_member_of_four_others_is_not_a_majority() -> None:
    clock = Clock()
    held = lease(clock)
    voters = {"b", "c", "d", "e"}
    first = held.stamp()
    held.on_answer("b", {SENT: first}, voters)
    assert not held.holds()
    held.on_answer("c", {SENT: first}, voters)
    assert held.holds()


def test_an_older_answer_does_not_move_the_lease_back_and_unknown_numbers_count_nothing() -> None:
    clock = Clock()
    held = lease(clock)
    old = held.stamp()
    clock.now += 0.5
    new = held.stamp()
    held.on_answer("b", {SENT: new}, {"b", "c"})
    until = held.until
    held.on_answer("b", {SENT: old}, {"b", "c"})
    held.on_answer("c", {SENT: 10_000}, {"b", "c"})
    held.on_answer("c", {}, {"b", "c"})
    assert held.until == until


def test_a_transfer_revokes_the_lease_until_the_next_leadership() -> None:
    clock = Clock()
    held = lease(clock)
    held.on_answer("b", {SENT: held.stamp()}, {"b", "c"})
    held.revoke()
    assert not held.holds()
    held.on_answer("c", {SENT: held.stamp()}, {"b", "c"})
    assert not held.holds()
    held.became_leader()
    held.on_answer("c", {SENT: held.stamp()}, {"b", "c"})
    assert held.holds()


def test_a_leader_steps_down_when_no_majority_answered_for_step_down_after() -> None:
    clock = Clock()
    held = lease(clock)
    voters = {"b", "c"}
    clock.now += 1.9
    assert not held.must_step_down(voters)  # counted from the start of its leadership
    clock.now += 0.2
    assert held.must_step_down(voters)
    held.became_leader()
    number = held.stamp()
    held.on_answer("c", {SENT: number}, voters)
    clock.now += 1.5
    assert not held.must_step_down(voters)
    clock.now += 0.6
    assert held.must_step_down(voters)


def test_a_leader_alone_never_steps_down() -> None:
    clock = Clock()
    held = lease(clock)
    clock.now += 100
    assert not held.must_step_down(set())


def test_a_member_whose_connection_closed_no_longer_extends_the_lease() -> None:
    clock = Clock()
    held = lease(clock)
    voters = {"b", "c"}
    number = held.stamp()
    held.on_answer("b", {SENT: number}, voters)
    assert held.holds()
    held.lost("b", voters)  # b may campaign at once now
    assert not held.holds()
    held.on_answer("c", {SENT: held.stamp()}, voters)
    assert held.holds()  # c still follows: b cannot win without it


def test_after_the_leaders_thread_was_held_the_step_down_counts_from_then() -> None:
    clock = Clock()
    held = lease(clock)
    voters = {"b", "c"}
    number = held.stamp()
    held.on_answer("b", {SENT: number}, voters)
    clock.now += 3.0  # the raft thread was held: nothing sent, nothing read
    held.resumed()
    assert not held.must_step_down(voters)
    assert not held.holds()  # the lease runs from what was answered, not from now
    clock.now += 2.1
    assert held.must_step_down(voters)
