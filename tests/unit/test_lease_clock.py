"""The lease clock on a clock the test moves: deadlines, promotion, retries, bounds."""

from __future__ import annotations

from node.service.lease_clock import ENDED_REMEMBERED, RETRY_SECONDS, LeaseClock
from node.state.entry_writer import LeaseEvents


class Time:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def renewed(*leases: tuple[int, int, int]) -> LeaseEvents:
    return LeaseEvents(renewed=list(leases))


def test_a_follower_never_expires_anything() -> None:
    time = Time()
    clock = LeaseClock(time)
    clock.on_applied(renewed((1, 2000, 10)))
    time.now += 60
    assert clock.due(100) == []
    clock.promote(2.0)
    assert clock.due(100) == []  # its clients get an election timeout to find the leader
    time.now += 2.0
    assert clock.due(100) == [(1, 10)]


def test_a_lease_is_due_its_ttl_after_its_last_renewal() -> None:
    time = Time()
    clock = LeaseClock(time)
    clock.promote(0.0)
    clock.on_applied(renewed((1, 2000, 10), (2, 5000, 11)))
    time.now += 1.5
    clock.on_applied(renewed((1, 2000, 12)))  # a keepalive
    time.now += 1.0
    assert clock.due(100) == []
    time.now += 1.1
    assert clock.due(100) == [(1, 12)]
    time.now += 1.5  # 5.1 s since its grant; lease 1 was not expired: offered again
    assert sorted(clock.due(100)) == [(1, 12), (2, 11)]
    assert clock.remaining(1) == 0.0


def test_promotion_gives_every_lease_at_least_the_extension() -> None:
    time = Time()
    clock = LeaseClock(time)
    clock.on_applied(renewed((1, 2000, 10), (2, 30_000, 11)))
    time.now += 10  # no leader for a while: lease 1's deadline passed on this follower
    clock.promote(2.0)
    assert clock.due(100) == []
    assert clock.remaining(1) == 2.0
    assert clock.remaining(2) == 22.0  # 20 s were left, and 2 more
    time.now += 2.0
    assert clock.due(100) == [(1, 10)]


def test_an_expiry_is_proposed_again_only_after_the_retry_delay() -> None:
    time = Time()
    clock = LeaseClock(time)
    clock.promote(0.0)
    clock.on_applied(renewed((1, 1000, 10), (2, 1000, 11)))
    time.now += 1.0
    assert clock.due(1) == [(1, 10)]
    assert clock.due(100) == [(2, 11)]
    assert clock.due(100) == []
    time.now += RETRY_SECONDS
    assert sorted(clock.due(100)) == [(1, 10), (2, 11)]
    clock.retry_soon([1])
    assert clock.due(100) == [(1, 10)]


def test_ended_leases_are_forgotten_but_remembered_as_ended() -> None:
    time = Time()
    clock = LeaseClock(time)
    clock.promote(0.0)
    clock.on_applied(renewed((1, 1000, 10)))
    clock.on_applied(LeaseEvents(ended=[1]))
    time.now += 5
    assert clock.due(100) == [] and len(clock) == 0
    assert clock.recently_ended(1) and clock.remaining(1) is None
    clock.on_applied(LeaseEvents(ended=list(range(2, ENDED_REMEMBERED + 3))))
    assert not clock.recently_ended(1)


def test_renewals_do_not_grow_the_heap_without_bound() -> None:
    time = Time()
    clock = LeaseClock(time)
    for version in range(100_000):
        clock.on_applied(renewed((1, 30_000, version)))
    assert len(clock._heap) <= 4 * len(clock) + 1024


def test_loading_starts_every_lease_over() -> None:
    time = Time()
    clock = LeaseClock(time)
    clock.promote(0.0)
    clock.on_applied(renewed((9, 1000, 1)))
    clock.load([(1, 3000, 5)])
    time.now += 2.0
    assert clock.due(100) == []
    time.now += 1.0
    assert clock.due(100) == [(1, 5)]
