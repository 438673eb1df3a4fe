"""`rkv redis-replicate --metrics-listen`: a real redis-server, a real 3-node cluster and
the replicator as a child process. Its /metrics counts the full sync, the commands by
type, the commits; the acknowledged offset reaches the master's; a killed replica
connection shows as a link loss and a partial sync; promtool accepts the output. A
port already in use is a clear start-up error."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from replication.redis.metrics import KNOWN_COMMANDS
from tests.redis.conftest import RedisServer
from tests.redis.replica_support import Replicator, master_offset, wait_caught_up
from tests.support.cluster import REPO, LocalCluster, free_ports, http, wait_until
from tests.support.prometheus import promtool

SETS = 40
HSETS = 15

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    response = http("GET", url, headers={})
    assert response.status == 200, response.body
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.body.decode())
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


@pytest.mark.timeout(300)
def test_the_replicators_metrics_follow_what_it_does(
    tmp_path: Path, cluster: LocalCluster, redis_server: RedisServer
) -> None:
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}/metrics"
    replicator = Replicator(
        redis_server,
        cluster,
        tmp_path / "replicator.log",
        "--metrics-listen",
        f"127.0.0.1:{port}",
    )
    try:
        replicator.start()
        with redis_server.client() as client:
            client.execute("SET", "before", "1")
            wait_caught_up(cluster, client, replicator)
            for i in range(SETS):
                client.execute("SET", f"s{i}", str(i))
            for i in range(HSETS):
                client.execute("HSET", "h", f"f{i}", str(i))
            wait_caught_up(cluster, client, replicator)
            target = master_offset(client)

            def caught_up() -> Samples | None:
                samples = scrape(url)
                acknowledged = value(samples, "rkv_redis_acknowledged_offset") or 0
                return samples if acknowledged >= target else None

            samples = wait_until(caught_up, 60, "the acknowledged offset to reach the master's")
            assert value(samples, "rkv_redis_master_link_up") == 1
            assert value(samples, "rkv_redis_full_sync_running") == 0
            assert value(samples, "rkv_redis_full_syncs_total") == 1
            assert value(samples, "rkv_redis_partial_syncs_total") == 0
            assert (value(samples, "rkv_redis_received_offset") or 0) >= target
            assert value(samples, "rkv_redis_commands_total", command="set") == SETS
            assert value(samples, "rkv_redis_commands_total", command="hset") == HSETS
            commits = value(samples, "rkv_redis_batch_commit_duration_seconds_count") or 0
            assert commits >= 1
            assert value(samples, "rkv_redis_lag_bytes") is not None
            # Only command names, never a key or a value, in the labels.
            commands = {v for (_, pairs) in samples for (k, v) in pairs if k == "command"}
            assert {"set", "hset"} <= commands <= KNOWN_COMMANDS | {"other"}
            # The other labels: a switch's path, the master's address and replication id.
            labels = {k for (_, pairs) in samples for (k, _) in pairs}
            assert labels <= {"command", "le", "path", "address", "replid"}

            body = http("GET", url, headers={}).body
            checked = promtool("check", "metrics", stdin=body)
            assert checked.returncode == 0, (checked.stdout, checked.stderr)

            # The master drops the replica: a link loss, then a partial sync resumes.
            client.execute("CLIENT", "KILL", "TYPE", "replica")
            samples = wait_until(
                lambda: (
                    (s := scrape(url))
                    and (value(s, "rkv_redis_partial_syncs_total") or 0) >= 1
                    and value(s, "rkv_redis_master_link_up") == 1
                    and s
                ),
                60,
                "a partial sync after the link was lost",
            )
            assert (value(samples, "rkv_redis_master_link_losses_total") or 0) >= 1
            assert value(samples, "rkv_redis_full_syncs_total") == 1
            client.execute("SET", "after", "1")
            wait_caught_up(cluster, client, replicator)
            # "before" came in the snapshot (RDB), not the stream; a resent stream would
            # count again.
            wait_until(
                lambda: (
                    (value(scrape(url), "rkv_redis_commands_total", command="set") or 0) >= SETS + 1
                ),
                60,
                "the SET after the reconnect counted",
            )
    finally:
        replicator.stop()
    assert replicator.process is not None and replicator.process.returncode == 0


def test_a_metrics_port_in_use_is_a_clear_start_error(
    tmp_path: Path, cluster: LocalCluster
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "node.cli",
                "redis-replicate",
                "--source",
                "redis://127.0.0.1:1",
                "--url",
                cluster.nodes[0].url,
                "--metrics-listen",
                f"127.0.0.1:{port}",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("given", ["9121", "host:", ":9121", "127.0.0.1:70000", "h:x"])
def test_a_bad_metrics_address_is_a_usage_error(given: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "node.cli",
            "redis-replicate",
            "--source",
            "redis://127.0.0.1:1",
            "--metrics-listen",
            given,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "--metrics-listen" in done.stderr
