"""Consistency guarantees through the HTTP API of a real 3-node cluster.

One cluster serves the whole module; each test works under its own key prefix.
"""

from __future__ import annotations

import base64
import json
import math
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import LocalCluster, http


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = LocalCluster(Path(tmp_path_factory.mktemp("consistency")) / "cluster")
    try:
        running.start()
        yield running
    finally:
        running.stop()


# -- compare-and-set races ------------------------------------------------------------------

CAS_CLIENTS = 20
CAS_ATTEMPTS = 8  # read-modify-write attempts per client, successful or not


def test_concurrent_compare_and_set_never_loses_an_increment(
    shared_cluster: LocalCluster,
) -> None:
    """20 clients increment one counter with read (linearizable) + PUT If-Match, spread
    over all three nodes. Every 200 is exactly one increment: the final value equals the
    number of successful CAS writes, and the values they wrote are 1..N, each once."""
    nodes = shared_cluster.nodes
    key = "cas/counter"
    created = http("PUT", f"{nodes[0].url}/v1/kv/{key}", body=b"0", headers={"If-None-Match": "*"})
    assert created.status == 200, created.body

    lock = threading.Lock()
    written: list[int] = []  # the value each successful CAS wrote
    conflicts: list[tuple[int, dict[str, Any]]] = []  # (If-Match version, 412 body)
    unexpected: list[tuple[str, int, bytes]] = []
    start = threading.Barrier(CAS_CLIENTS)

    def client(c: int) -> None:
        url = nodes[c % len(nodes)].url
        start.wait()
        for _ in range(CAS_ATTEMPTS):
            got = http("GET", f"{url}/v1/kv/{key}")
            if got.status != 200:
                with lock:
                    unexpected.append(("GET", got.status, got.body[:300]))
                continue
            etag = got.headers["ETag"]
            version = int(etag.strip('"'))
            new_value = int(got.body) + 1
            put = http(
                "PUT",
                f"{url}/v1/kv/{key}",
                body=str(new_value).encode(),
                headers={"If-Match": etag},
            )
            with lock:
                if put.status == 200:
                    written.append(new_value)
                elif put.status == 412:
                    conflicts.append((version, put.json()))
                else:
                    unexpected.append(("PUT", put.status, put.body[:300]))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(CAS_CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
        assert not thread.is_alive(), "a CAS client hung"

    assert not unexpected, unexpected[:5]
    successes = len(written)
    assert successes >= 1
    assert successes + len(conflicts) == CAS_CLIENTS * CAS_ATTEMPTS
    assert sorted(written) == list(range(1, successes + 1)), (
        "two successful CAS writes wrote the same value (a lost update) or one was skipped"
    )
    assert conflicts, "20 racing clients never conflicted: the race did not happen"
    for if_match_version, body in conflicts:
        assert body["code"] == "version_conflict", body
        assert isinstance(body["current_version"], int), body
        assert body["current_version"] > if_match_version, (if_match_version, body)

    for node in nodes:
        final = http("GET", f"{node.url}/v1/kv/{key}")
        assert final.status == 200, final.body
        assert int(final.body) == successes, (node.node_id, final.body, successes)


# -- prefix scan pagination -------------------------------------------------------------------

SCAN_KEYS = 10_000
TXN_BATCH = 500


def scan_key(i: int) -> bytes:
    # Some keys carry bytes that are neither ASCII nor UTF-8, and a NUL.
    return b"pg/%05d" % i + (b"\x00\xff" if i % 10 == 0 else b"")


def scan_value(key: bytes) -> bytes:
    return b"value:" + key


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def put_all(url: str, keys: list[bytes]) -> None:
    for start in range(0, len(keys), TXN_BATCH):
        batch = keys[start : start + TXN_BATCH]
        body = {
            "success": [{"op": "put", "key": b64(k), "value": b64(scan_value(k))} for k in batch]
        }
        response = http(
            "POST",
            f"{url}/v1/txn",
            body=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        assert response.status == 200, response.body[:500]
        result = response.json()
        assert result["succeeded"] is True and len(result["results"]) == len(batch), result


def test_prefix_scan_pagination_returns_every_key_once_in_order(
    shared_cluster: LocalCluster,
) -> None:
    """10k keys under pg/ (written by transactions of 500 puts) plus neighbours that share
    most of the prefix: paging with limit 1000 and 777 from every node returns every pg/ key
    exactly once, in byte order, with full pages until the last, whose next is null."""
    nodes = shared_cluster.nodes
    keys = [scan_key(i) for i in range(SCAN_KEYS)]
    # "pg0" sorts right after every "pg/" key ('0' = '/' + 1), "pf/" and "pg" just before.
    neighbours = [b"pg0/%03d" % i for i in range(50)] + [b"pf/zzz", b"pg", b"pg.", b"ph"]
    put_all(nodes[1].url, neighbours[:25] + keys + neighbours[25:])
    expected = sorted(keys)

    for node in nodes:
        for limit in (1000, 777):
            got: list[bytes] = []
            pages = 0
            cursor: str | None = None
            while True:
                query = f"prefix={urllib.parse.quote(b'pg/', safe='')}&limit={limit}"
                if cursor is not None:
                    query += f"&start_after={urllib.parse.quote(cursor, safe='')}"
                page = http("GET", f"{node.url}/v1/kv?{query}")  # linearizable (default)
                assert page.status == 200, (node.node_id, limit, page.body[:300])
                body = page.json()
                pages += 1
                items = body["items"]
                for item in items:
                    key = base64.b64decode(item["key"])
                    assert base64.b64decode(item["value"]) == scan_value(key), item
                    got.append(key)
                cursor = body["next"]
                if cursor is None:
                    break
                assert len(items) == limit, (node.node_id, limit, pages, len(items))
                assert pages <= SCAN_KEYS, "the cursor does not advance"
            where = f"{node.node_id}, limit {limit}"
            assert len(got) == len(set(got)), f"{where}: a key came back twice"
            assert got == expected, f"{where}: {len(got)} keys, first difference at " + str(
                next(
                    (i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), None
                )
            )
            assert pages == math.ceil(SCAN_KEYS / limit), (where, pages)

    # The neighbouring prefix on its own: exactly its keys, none of pg/.
    page = http("GET", f"{nodes[2].url}/v1/kv?prefix=pg0&limit=1000")
    assert page.status == 200, page.body[:300]
    assert [base64.b64decode(i["key"]) for i in page.json()["items"]] == sorted(
        k for k in neighbours if k.startswith(b"pg0")
    )
    assert page.json()["next"] is None


# -- read-your-writes across nodes --------------------------------------------------------------


def test_read_your_writes_across_nodes(shared_cluster: LocalCluster) -> None:
    """A write acknowledged by one node is seen by a linearizable read on another node at
    once, and by a stale read with min_version=<the write's version> on the third."""
    nodes = shared_cluster.nodes
    key = "ryw/key"
    for i in range(30):
        writer, reader, stale_reader = (nodes[(i + j) % len(nodes)] for j in range(3))
        value = b"value-%d" % i
        put = http("PUT", f"{writer.url}/v1/kv/{key}", body=value)
        assert put.status == 200, put.body
        version = put.json()["version"]

        got = http("GET", f"{reader.url}/v1/kv/{key}")
        assert got.status == 200, (reader.node_id, got.body)
        assert got.body == value, (i, writer.node_id, reader.node_id, got.body)
        assert int(got.headers["Rkv-Version"]) == version

        stale = http(
            "GET", f"{stale_reader.url}/v1/kv/{key}?consistency=stale&min_version={version}"
        )
        assert stale.status == 200, (stale_reader.node_id, stale.body)
        assert stale.body == value, (i, writer.node_id, stale_reader.node_id, stale.body)
        assert int(stale.headers["Rkv-Version"]) == version


def test_linearizable_read_on_a_lagging_follower_waits_for_the_latest_write(
    shared_cluster: LocalCluster,
) -> None:
    """A follower that missed a write (SIGSTOPped while it was committed by the other two)
    must not answer a linearizable read from its old state the moment it resumes, and a
    stale read with min_version waits until it has the write."""
    cluster = shared_cluster
    leader = cluster.leader()
    key = "ryw/lagging"
    for i in range(5):
        follower = cluster.followers()[i % 2]
        index = cluster.nodes.index(follower)
        old = http("PUT", f"{leader.url}/v1/kv/{key}", body=b"old-%d" % i)
        assert old.status == 200, old.body
        cluster.pause(index)
        try:
            new = http("PUT", f"{leader.url}/v1/kv/{key}", body=b"new-%d" % i)
            assert new.status == 200, new.body
        finally:
            cluster.resume(index)
        got = http("GET", f"{follower.url}/v1/kv/{key}")
        assert got.status == 200, (follower.node_id, got.body)
        assert got.body == b"new-%d" % i, (i, follower.node_id, got.body)
        version = new.json()["version"]
        stale = http("GET", f"{follower.url}/v1/kv/{key}?consistency=stale&min_version={version}")
        assert stale.status == 200 and stale.body == b"new-%d" % i, (follower.node_id, stale)
