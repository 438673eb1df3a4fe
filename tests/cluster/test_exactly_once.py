"""Exactly-once increments under faults, with real node processes.

8 idempotent producers send 5,000 increments of one counter between them
while the leader is killed -9 twice (and restarted) and a follower is
SIGSTOPped for 3 s. Beside them, plain workers (no producer headers) send
increments of another counter through the same faults and, like a naive
application, resend an increment whose outcome was unknown.

- idempotent: the counter equals exactly the number of increments the
  producers were told succeeded (none lost, none applied twice);
- plain: the counter is at least the acknowledged increments (none lost), and
  may be more (a resent increment that had been applied counts twice); the
  test reports by how much.

It runs twice: on an open cluster, and with TLS and auth on (every client
presents the cluster's CA and root's token; restarted members catch up over
HTTPS with member tokens).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from http_api.client import (
    Credentials,
    RetryPolicy,
    RkvClient,
    RkvClientError,
    UnknownOutcomeError,
)
from tests.support.cluster import ClusterTls, LocalCluster, http, wait_until
from tests.support.secured import secure

PRODUCERS = 8
INCREMENTS = 5000
PLAIN_WORKERS = 4
PLAIN_INCREMENTS = 1000


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: int = 0
    unknown: int = 0
    failures: list[str] = field(default_factory=list)

    def add(self, acked: int = 0, unknown: int = 0) -> None:
        with self.lock:
            self.acked += acked
            self.unknown += unknown


@pytest.fixture(params=["open", "tls-auth"])
def secured(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[LocalCluster, Credentials | None]]:
    """A fresh 3-node cluster, open or with TLS and auth on, and what clients present."""
    tls = ClusterTls() if request.param == "tls-auth" else None
    running = LocalCluster(tmp_path / "cluster", tls=tls)
    try:
        running.start()
        if tls is None:
            yield running, None
        else:
            with secure(running) as root:
                yield running, root
    finally:
        running.stop()


def idempotent_worker(
    urls: list[str], count: int, tally: Tally, credentials: Credentials | None
) -> None:
    try:
        with RkvClient(urls, timeout=5.0, credentials=credentials) as client:
            producer = client.producer(deadline=120.0)
            for _ in range(count):
                producer.incr("exactly-once")
                tally.add(acked=1)
    except Exception as exc:  # reported by the test, never swallowed
        tally.failures.append(f"{type(exc).__name__}: {exc}")


def plain_worker(
    urls: list[str], count: int, tally: Tally, credentials: Credentials | None
) -> None:
    retry = RetryPolicy(max_attempts=20, max_elapsed=60.0)
    with RkvClient(urls, timeout=5.0, retry=retry, credentials=credentials) as client:
        for _ in range(count):
            deadline = time.monotonic() + 120
            while True:
                try:
                    client.incr("at-least-once")
                    tally.add(acked=1)
                    break
                except UnknownOutcomeError:
                    tally.add(unknown=1)  # maybe applied: a naive client sends it again
                except RkvClientError as exc:
                    if time.monotonic() > deadline:
                        tally.failures.append(f"{type(exc).__name__}: {exc}")
                        return


def nemesis(cluster: LocalCluster, progress: Tally, log: list[str]) -> None:
    """Faults at points of the idempotent run's progress, not at times."""

    def at(fraction: float) -> None:
        wait_until(lambda: progress.acked >= INCREMENTS * fraction, 180, f"{fraction:.0%} done")

    for step, fraction in enumerate((0.1, 0.3, 0.5)):
        at(fraction)
        leader = cluster.leader()
        index = cluster.nodes.index(leader)
        if step == 1:
            follower = next(i for i, n in enumerate(cluster.nodes) if n is not leader)
            log.append(f"{progress.acked}: SIGSTOP {cluster.nodes[follower].node_id} for 3 s")
            cluster.pause(follower)
            time.sleep(3)
            cluster.resume(follower)
            continue
        log.append(f"{progress.acked}: kill -9 leader {leader.node_id}")
        cluster.kill(index)
        cluster.wait_for_new_leader(leader, timeout=60)
        cluster.start_node(index)
        log.append(f"{progress.acked}: restarted {leader.node_id}")


@pytest.mark.timeout(600)
def test_idempotent_increments_are_exact_through_leader_kills_and_a_pause(
    secured: tuple[LocalCluster, Credentials | None],
    record_property: Callable[[str, object], None],
) -> None:
    cluster, credentials = secured
    urls = [node.url for node in cluster.nodes]
    exact, plain = Tally(), Tally()
    each, plain_each = INCREMENTS // PRODUCERS, PLAIN_INCREMENTS // PLAIN_WORKERS
    threads = [
        threading.Thread(target=idempotent_worker, args=(urls, each, exact, credentials))
        for _ in range(PRODUCERS)
    ] + [
        threading.Thread(target=plain_worker, args=(urls, plain_each, plain, credentials))
        for _ in range(PLAIN_WORKERS)
    ]
    faults: list[str] = []
    chaos = threading.Thread(target=nemesis, args=(cluster, exact, faults))
    for thread in threads:
        thread.start()
    chaos.start()
    for thread in threads:
        thread.join(timeout=420)
    chaos.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "workers did not finish"
    assert exact.failures == [] and plain.failures == []
    assert len(faults) == 5, faults  # two kills (each with its restart) and the pause

    cluster.wait_ready(60)
    leader = cluster.leader()
    counted = int(http("GET", leader.url + "/v1/kv/exactly-once").body)
    plain_counted = int(http("GET", leader.url + "/v1/kv/at-least-once").body)
    record_property("faults", "; ".join(faults))
    record_property(
        "plain", f"acked {plain.acked}, counted {plain_counted}, unknown {plain.unknown}"
    )
    print(
        f"idempotent: {exact.acked} acknowledged, counter {counted}; plain: {plain.acked} "
        f"acknowledged, counter {plain_counted} ({plain_counted - plain.acked} over-counted, "
        f"{plain.unknown} unknown outcomes resent); faults: {faults}"
    )
    assert exact.acked == INCREMENTS
    assert counted == exact.acked  # none lost, none applied twice
    assert plain.acked == PLAIN_INCREMENTS
    assert plain.acked <= plain_counted <= plain.acked + plain.unknown

    # Every replica converges on the same counters.
    def replicas_agree() -> bool:
        values = {
            (
                http("GET", n.url + "/v1/kv/exactly-once?consistency=stale").body,
                http("GET", n.url + "/v1/kv/at-least-once?consistency=stale").body,
            )
            for n in cluster.nodes
        }
        return values == {(str(counted).encode(), str(plain_counted).encode())}

    wait_until(replicas_agree, 60, "every replica to hold the final counters")
