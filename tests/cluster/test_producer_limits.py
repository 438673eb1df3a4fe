"""Idempotent producers under a hostile client, on three real node processes: the
cluster's --max-producers refuses new producers with 429 too_many_producers
(before proposing, and in the state machine when concurrent inits raced past
that check) while the existing ones keep writing and every replica holds the
same producers; and the expiry sweep deletes many expired producers in raft
entries of at most --producer-sweep-slice each."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from http_api.client import RkvClient, RkvClientError
from node.state.producers import PRODUCERS_PREFIX
from node.storage.log_feed import RecordDecoder
from node.storage.record import Record, RecordOp
from tests.support.cluster import LocalCluster, NodeProcess, Response, http, wait_until


def start(tmp_path: Path, *args: str) -> Iterator[LocalCluster]:
    running = LocalCluster(tmp_path / "cluster", extra_args=list(args))
    try:
        running.start()
        yield running
    finally:
        running.stop()


def init(url: str, tid: str | None = None) -> Response:
    body = b"" if tid is None else json.dumps({"transactional_id": tid}).encode()
    return http("POST", url + "/v1/producers", body)


def incr(url: str, pid: int, epoch: int, seq: int) -> Response:
    headers = {
        "Rkv-Producer-Id": str(pid),
        "Rkv-Producer-Epoch": str(epoch),
        "Rkv-Sequence": str(seq),
    }
    return http("POST", f"{url}/v1/kv/c?op=incr", b"", headers)


def log_records(node: NodeProcess) -> list[Record]:
    response = http("GET", node.url + "/v1/log?from=1", timeout=30)
    assert response.status == 200, response.body[:200]
    decoder = RecordDecoder(node.node_id, 64 * 1024 * 1024)
    records = decoder.feed(response.body)
    decoder.finish()
    return records


def live_producers(records: list[Record]) -> set[bytes]:
    """The producers' state keys the log leaves in place (the last record wins)."""
    last: dict[bytes, RecordOp] = {}
    for record in records:
        if record.key.startswith(PRODUCERS_PREFIX):
            last[record.key] = record.op
    return {key for key, op in last.items() if op is RecordOp.PUT}


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[LocalCluster]:
    yield from start(tmp_path, "--max-producers", "5")


def test_the_producer_limit_refuses_new_ones_while_existing_ones_keep_writing(
    limited: LocalCluster,
) -> None:
    url = limited.leader().url
    first = init(url, "keep").json()
    plain = [init(url).json() for _ in range(2)]
    # Six at once for the last two places: however they race past the check made
    # before proposing, the state machine admits exactly two.
    answers: list[Response] = []
    threads = [threading.Thread(target=lambda: answers.append(init(url))) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(a.status for a in answers) == [200, 200, 429, 429, 429, 429]
    for refused in (a for a in answers if a.status == 429):
        assert refused.json()["code"] == "too_many_producers", refused.body
    again = init(url)
    assert (again.status, again.json()["code"]) == (429, "too_many_producers")
    assert "--max-producers 5" in again.json()["message"]
    with RkvClient([url]) as client, pytest.raises(RkvClientError) as refused_client:
        client.producer(deadline=5)
    assert (refused_client.value.status, refused_client.value.code) == (429, "too_many_producers")
    # A known transactional id is re-initialised at the limit: a new epoch, not a producer.
    bumped = init(url, "keep")
    assert bumped.status == 200, bumped.body
    assert bumped.json() == {"producer_id": first["producer_id"], "epoch": 1}
    # The existing producers keep writing, exactly once.
    for seq in range(2):
        assert incr(url, plain[0]["producer_id"], 0, seq).status == 200
    retried = incr(url, plain[0]["producer_id"], 0, 1)
    assert retried.status == 200 and retried.headers.get("Rkv-Duplicate") == "true"
    assert incr(url, first["producer_id"], 1, 0).json()["value"] == 3
    # Every replica holds the same five producers.
    expected = live_producers(log_records(limited.leader()))
    assert len(expected) == 5
    for node in limited.nodes:
        wait_until(
            partial(lambda n: live_producers(log_records(n)) == expected, node),
            30,
            f"{node.node_id} to hold the same producers",
        )


@pytest.fixture
def expiring(tmp_path: Path) -> Iterator[LocalCluster]:
    yield from start(tmp_path, "--producer-expiry", "2", "--producer-sweep-slice", "4")


def test_the_expiry_sweep_deletes_many_producers_in_bounded_slices(
    expiring: LocalCluster,
) -> None:
    leader = expiring.leader()
    made = set()
    for _ in range(20):
        answer = init(leader.url)
        assert answer.status == 200, answer.body
        made.add(PRODUCERS_PREFIX + str(answer.json()["producer_id"]).encode())

    def swept() -> list[Record]:
        return [r for r in log_records(leader) if r.op is RecordOp.DELETE and r.key in made]

    wait_until(lambda: len(swept()) == len(made), 60, "the sweep to delete every producer")
    per_entry = Counter(record.raft_index for record in swept())
    assert max(per_entry.values()) <= 4, per_entry
    assert len(per_entry) >= 5, per_entry
    for node in expiring.nodes:
        wait_until(
            partial(lambda n: not live_producers(log_records(n)) & made, node),
            30,
            f"{node.node_id} to apply the sweep",
        )
    # Producers still work after the sweep.
    fresh = init(leader.url).json()
    assert incr(leader.url, fresh["producer_id"], 0, 0).status == 200
