"""node/service/pace.py: a transfer paced to a byte rate, on a fake clock."""

from __future__ import annotations

import pytest

from node.service.pace import Pace


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [100.0]
    monkeypatch.setattr("node.service.pace.time.monotonic", lambda: now[0])

    def sleep(seconds: float) -> None:
        assert seconds > 0
        now[0] += seconds

    monkeypatch.setattr("node.service.pace.time.sleep", sleep)
    return now


def test_a_paced_transfer_takes_its_bytes_over_the_rate(clock: list[float]) -> None:
    paced = Pace(rate_bytes=1000)
    for _ in range(10):
        paced.wait(500)
    # 5,000 bytes at 1,000 bytes/s: the last chunk was let go 5 s in.
    assert clock[0] == pytest.approx(105.0)


def test_a_slow_consumer_is_not_paced_further(clock: list[float]) -> None:
    paced = Pace(rate_bytes=1000)
    clock[0] += 10.0  # the reader took its time
    paced.wait(5000)
    assert clock[0] == pytest.approx(110.0)


def test_rate_zero_never_waits(clock: list[float]) -> None:
    paced = Pace(rate_bytes=0)
    for _ in range(100):
        paced.wait(10**9)
    assert clock[0] == 100.0
