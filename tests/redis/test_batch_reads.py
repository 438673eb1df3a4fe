"""The replicator's reads of many keys split when the node returns less at once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from http_api.client import RkvClient
from replication.redis.batch import RkvStore
from tests.support.cluster import LocalCluster, http

VALUE = 200 * 1024


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    # The smallest bound a node takes: one get of the largest key and value.
    running = LocalCluster(
        tmp_path / "cluster", extra_args=["--max-txn-result-bytes", str(1024 * 1024 + 4096)]
    )
    try:
        running.start()
        yield running
    finally:
        running.stop()


def test_get_many_halves_a_read_whose_values_the_node_would_not_return(
    cluster: LocalCluster,
) -> None:
    leader = cluster.leader()
    values = {f"r/{i:02d}".encode(): bytes([65 + i]) * VALUE for i in range(20)}
    for key, value in values.items():
        assert http("PUT", f"{leader.url}/v1/kv/{key.decode()}", value).status == 200
    one_txn = {
        "success": [{"op": "get", "key": "ci8wMA=="}] * 20  # r/00 twenty times: 4 MB
    }
    refused = http("POST", f"{leader.url}/v1/txn", json.dumps(one_txn).encode())
    assert refused.status == 413 and refused.json()["code"] == "txn_result_too_large"
    with RkvClient([node.url for node in cluster.nodes]) as client:
        store = RkvStore(client, "reads")
        found = store.get_many([*values, b"r/absent"])
    assert found == {**values, b"r/absent": None}
