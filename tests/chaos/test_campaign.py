"""Short deterministic-seed chaos campaigns on every CI run (bench/chaos.py runs long ones).

Each runs the real workload against a 3-node cluster of real processes whose raft
links go through the TCP proxy, under one family of faults, then heals and runs
every check: linearizability per key, stale reads, lost acknowledged writes,
replica convergence, the idempotent counter. The ``locks`` campaign adds the lock
workload: four client processes contend for one lock and write under it with
fencing tokens while nemeses also pause the holder past its lease's TTL and kill
it (tests/chaos/rig/lock_checker.py checks the tokens and the writes). The
``power`` campaign keeps each node's data directory on a lazy FUSE mount
(tests/chaos/rig/lazyfs/) and cuts the power of one node or of all at once: what
was not fsynced is lost. Any anomaly fails the test with its history excerpt.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from http_api.client import Credentials
from tests.chaos.rig.campaign import assert_passed, run_campaign
from tests.chaos.rig.lazy_cluster import LazyCluster
from tests.chaos.rig.netfault import ProxiedCluster
from tests.chaos.rig.workload import WorkloadConfig
from tests.support.cluster import ClusterTls
from tests.support.secured import secure

CAMPAIGNS = [
    # With TLS and auth on: the wipes rebuild members over HTTPS with member tokens, the
    # workload and the idempotent producers authenticate with root's token.
    pytest.param(
        ["kill", "pause", "compact", "wipe"], 11, 0, id="tls-auth-kill-pause-compact-wipe"
    ),
    pytest.param(["partition"], 12, 0, id="partition"),
    pytest.param(["crash_all", "kill"], 13, 0, id="crash-kill"),
    pytest.param(
        ["kill", "pause", "partition", "pause_client", "kill_client"],
        14,
        4,
        id="locks-kill-pause-partition",
    ),
    # Reads served by HTTP worker processes (their read-only LMDB reopened after a
    # wipe's state install) and followers' linearizable reads by read index.
    pytest.param(["kill", "pause", "wipe", "partition"], 15, 0, id="workers-kill-pause-wipe"),
    # Power cuts with the strict model of names (POSIX: a name change is durable once
    # its directory is fsynced; docs/OPERATIONS.md "Power loss in the chaos rig"), and
    # full disks (the NOSPACE alarm raised, then disarmed once space is freed).
    pytest.param(["power", "disk-full"], 22, 0, id="power-strict-disk-full"),
]


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProxiedCluster]:
    campaign = request.node.callspec.id
    secured = campaign.startswith("tls-auth")
    workers = ["--http-workers", "2"] if campaign.startswith("workers") else []
    running = (
        LazyCluster(tmp_path / "cluster", names="strict")
        if campaign.startswith("power")
        else ProxiedCluster(
            tmp_path / "cluster", tls=ClusterTls() if secured else None, extra_args=workers
        )
    )
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
@pytest.mark.parametrize(("nemeses", "seed", "lock_clients"), CAMPAIGNS)
def test_a_short_campaign_finds_no_anomaly(
    cluster: ProxiedCluster,
    credentials: Credentials | None,
    nemeses: list[str],
    seed: int,
    lock_clients: int,
) -> None:
    result = run_campaign(
        cluster,
        cluster.net,
        duration=35.0,
        nemeses=nemeses,
        seed=seed,
        config=WorkloadConfig(keys=4, workers=3 if lock_clients else 5),
        progress=print,
        credentials=credentials,
        lock_clients=lock_clients,
    )
    summary = result.summary()
    print(summary)
    assert_passed(result)
    assert result.counter["acknowledged"] > 0
    if "power" in nemeses:
        faults = result.summary()["faults_by_kind"]
        assert faults.get("power", 0) >= 1 and faults.get("disk-full", 0) >= 1, summary
    if lock_clients:
        # The lock changed hands, writes were accepted under it, and some were fenced:
        # every lapsing holder writes until it is refused.
        locks = result.locks
        assert locks["holders"] >= 3 and locks["writes_acked"] > 0, locks
        assert locks["writes_fenced"] > 0, locks
