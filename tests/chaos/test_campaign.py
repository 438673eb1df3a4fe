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

from http_api.client import Credentials
from tests.chaos.rig.campaign import assert_passed, run_campaign
from tests.chaos.rig.netfault import ProxiedCluster
from tests.chaos.rig.workload import WorkloadConfig
from tests.support.cluster import ClusterTls
from tests.support.secured import secure

CAMPAIGNS = [
    # With TLS and auth on: the wipes rebuild members over HTTPS with member tokens, the
    # workload and the idempotent producers authenticate with root's token.
    pytest.param(["kill", "pause", "compact", "wipe"], 11, id="tls-auth-kill-pause-compact-wipe"),
    pytest.param(["partition"], 12, id="partition"),
    pytest.param(["crash_all", "kill"], 13, id="crash-kill"),
]


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProxiedCluster]:
    secured = request.node.callspec.id.startswith("tls-auth")
    running = ProxiedCluster(tmp_path / "cluster", tls=ClusterTls() if secured else None)
    try:
        running.start(60)
        yield running
    finally:
        running.stop()


@pytest.fixture
def credentials(
    request: pytest.FixtureRequest, cluster: ProxiedCluster
) -> Iterator[Credentials | None]:
    if cluster.tls is None:
        yield None
        return
    with secure(cluster) as root:
        yield root


@pytest.mark.timeout(400)
@pytest.mark.parametrize(("nemeses", "seed"), CAMPAIGNS)
def test_a_short_campaign_finds_no_anomaly(
    cluster: ProxiedCluster, credentials: Credentials | None, nemeses: list[str], seed: int
) -> None:
    result = run_campaign(
        cluster,
        cluster.net,
        duration=35.0,
        nemeses=nemeses,
        seed=seed,
        config=WorkloadConfig(keys=4, workers=5),
        progress=print,
        credentials=credentials,
    )
    summary = result.summary()
    print(summary)
    assert_passed(result)
    assert result.counter["acknowledged"] > 0
