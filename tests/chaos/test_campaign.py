"""Short deterministic-seed chaos campaigns on every CI run (bench/chaos.py runs long ones).

Each runs the real workload against a 3-node cluster of real processes whose raft
links go through the TCP proxy, under one family of faults, then heals and runs
every check: linearizability per key, stale reads, lost acknowledged writes,
replica convergence, the idempotent counter. Any anomaly fails the test with
its history excerpt.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.rig.campaign import assert_passed, run_campaign
from tests.chaos.rig.netfault import ProxiedCluster
from tests.chaos.rig.workload import WorkloadConfig

CAMPAIGNS = [
    pytest.param(["kill", "pause", "compact", "wipe"], 11, id="kill-pause-compact-wipe"),
    pytest.param(["partition"], 12, id="partition"),
    pytest.param(["crash_all", "kill"], 13, id="crash-kill"),
]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProxiedCluster]:
    running = ProxiedCluster(tmp_path / "cluster")
    try:
        running.start(60)
        yield running
    finally:
        running.stop()


@pytest.mark.timeout(400)
@pytest.mark.parametrize(("nemeses", "seed"), CAMPAIGNS)
def test_a_short_campaign_finds_no_anomaly(
    cluster: ProxiedCluster, nemeses: list[str], seed: int
) -> None:
    result = run_campaign(
        cluster,
        cluster.net,
        duration=35.0,
        nemeses=nemeses,
        seed=seed,
        config=WorkloadConfig(keys=4, workers=5),
        progress=print,
    )
    summary = result.summary()
    print(summary)
    assert_passed(result)
    assert result.counter["acknowledged"] > 0
