"""FairShare's accounting and policy (http_api/fair_share.py), on a clock the test
moves, and the meter that charges a coroutine's steps but not its waits."""

from __future__ import annotations

import asyncio

import pytest

from http_api import fair_share
from http_api.fair_share import MEMORY_SECONDS, TICK_SECONDS, FairShare, metered


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _busy_pair(shares: FairShare, clock: Clock, light: float, heavy: float) -> None:
    """Two addresses with requests in flight, having used ``light`` and ``heavy``
    seconds of the loop, one request each, the costs ticked in."""
    for _ in range(100):  # many cheap requests
        shares.started("light")
        shares.charge("light", light / 100)
    shares.started("heavy")  # one expensive one
    shares.charge("heavy", heavy)
    clock.advance(2 * TICK_SECONDS)
    shares.charge("light", 0.0)  # ticks


def test_a_lone_client_never_waits_however_busy() -> None:
    clock = Clock()
    shares = FairShare(busy=0.1, clock=clock)
    shares.started("alone")
    for _ in range(20):
        shares.charge("alone", 0.09)
        clock.advance(TICK_SECONDS)
    assert shares.wait_seconds("alone") == 0.0


def test_an_address_over_the_mean_of_a_busy_loop_waits_and_the_other_does_not() -> None:
    clock = Clock()
    shares = FairShare(busy=0.1, clock=clock)
    _busy_pair(shares, clock, light=0.05, heavy=0.6)
    assert shares.wait_seconds("heavy") > 0
    assert shares.wait_seconds("light") == 0.0
    assert shares.summary()["clients"] == 2


def test_nobody_waits_on_a_quiet_loop_or_when_sharing_is_off() -> None:
    clock = Clock()
    quiet = FairShare(busy=0.9, clock=clock)
    _busy_pair(quiet, clock, light=0.01, heavy=0.2)  # 0.21 s of a second: not busy
    assert quiet.wait_seconds("heavy") == 0.0
    off = FairShare(busy=1.0, clock=clock)
    _busy_pair(off, clock, light=0.05, heavy=0.9)
    assert off.wait_seconds("heavy") == 0.0


def test_the_wait_ends_as_the_cost_decays() -> None:
    clock = Clock()
    shares = FairShare(busy=0.1, clock=clock)
    _busy_pair(shares, clock, light=0.05, heavy=0.6)
    assert shares.wait_seconds("heavy") > 0
    # Both quiet for a while: the heavy cost decays below the (decaying) bound.
    for _ in range(int(5 * MEMORY_SECONDS / (2 * TICK_SECONDS))):
        clock.advance(2 * TICK_SECONDS)
        shares.charge("light", 0.01)
    assert shares.wait_seconds("heavy") == 0.0


def test_clients_that_are_all_heavy_share_alike() -> None:
    clock = Clock()
    shares = FairShare(busy=0.1, clock=clock)
    for address, cost in (("bulk-a", 0.3), ("bulk-b", 0.32)):
        shares.started(address)
        shares.charge(address, cost)
    clock.advance(2 * TICK_SECONDS)
    shares.charge("bulk-a", 0.0)
    # Both are heavy, at the same weight: only the one above the mean waits, briefly.
    assert shares.wait_seconds("bulk-a") == 0.0
    assert 0 < shares.wait_seconds("bulk-b") < 0.1


def test_heavy_requests_weigh_less_than_cheap_ones() -> None:
    clock = Clock()
    shares = FairShare(busy=0.1, clock=clock)
    for _ in range(100):
        shares.started("cheap")
        shares.charge("cheap", 0.0001)
    shares.started("bulk")
    shares.charge("bulk", 0.5)
    assert shares.weight("cheap") == 1.0
    assert shares.weight("bulk") < 1.0


def test_a_cost_given_back_never_goes_below_zero() -> None:
    clock = Clock()
    shares = FairShare(busy=0.1, clock=clock)
    shares.charge("a", 0.01)
    clock.advance(10 * MEMORY_SECONDS)
    shares.charge("a", -0.01)
    assert shares.cost("a") == 0.0
    assert shares.summary()["loop_busy"] == 0.0


class StepClock:
    """perf_counter for the meter: moves only when the metered work says it worked."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_the_meter_charges_the_steps_not_the_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = StepClock()
    monkeypatch.setattr(fair_share, "time", fake)
    shares = FairShare(busy=0.5, clock=lambda: 0.0)

    async def work() -> str:
        for _ in range(3):
            fake.now += 0.1  # a step's work
            await asyncio.sleep(0.01)  # a wait: the step clock does not move
        return "done"

    async def main() -> str:
        return await metered(work(), shares, "client")

    assert asyncio.run(main()) == "done"
    assert shares.cost("client") == pytest.approx(0.3)


def test_the_meter_passes_exceptions_and_cancellation_through() -> None:
    shares = FairShare(busy=0.5)

    async def fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    async def waiter() -> None:
        await metered(asyncio.sleep(60), shares, "b")

    async def main() -> None:
        with pytest.raises(ValueError, match="boom"):
            await metered(fails(), shares, "a")
        task = asyncio.create_task(waiter())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
