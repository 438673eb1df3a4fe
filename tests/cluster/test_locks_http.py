"""Locks, fenced writes and elections over HTTP (docs/LEASES.md), against real node
processes over real sockets: a lock held, waited for (FIFO, bounded, left by a client that
goes away), refused with the holder's token and released; writes refused with a stale
fencing token; an election campaigned, proclaimed, resigned and observed, its observers
bounded as watches are.

One 3-node cluster with small lease limits serves every test here; each test revokes the
leases it grants.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from http.client import HTTPConnection

import pytest

from tests.support.cluster import LocalCluster, NodeProcess, Response, http, wait_until
from tests.support.lease_calls import (
    MAX_WAIT,
    MAX_WAITERS,
    WATCHES_PER_ADDRESS,
    Stream,
    b64,
    call,
    fenced_put,
    grant,
    lease_cluster,
    lock,
    ok,
    open_when_free,
    refused,
    revoke,
)

NAME = "locks"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = lease_cluster(tmp_path_factory.mktemp(NAME) / "cluster")
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture
def leader(cluster: LocalCluster) -> NodeProcess:
    return cluster.leader()


# -- locks and fencing ---------------------------------------------------------------------


def test_a_lock_is_held_waited_for_refused_and_released(leader: NodeProcess) -> None:
    first, second = grant(leader), grant(leader)
    try:
        held = ok(lock(leader, "jobs/compactor", first))
        assert held["name"] == "jobs/compactor" and held["lease"] == first
        assert held["key"] == f"jobs/compactor/{first}"
        token = held["token"]
        assert ok(lock(leader, "jobs/compactor", first))["token"] == token  # again: same
        busy = refused(lock(leader, "jobs/compactor", second), 409, "lock_held")
        assert busy["token"] == token
        info = ok(call(leader, "GET", "/v1/locks/jobs/compactor"))
        assert info["holder"]["lease"] == first and info["holder"]["token"] == token
        assert info["waiters"] == 0
        with ThreadPoolExecutor(1) as pool:
            waiting: Future[Response] = pool.submit(lock, leader, "jobs/compactor", second, 15)
            wait_until(
                lambda: ok(call(leader, "GET", "/v1/locks/jobs/compactor"))["waiters"] == 1,
                10,
                "the second lease to queue",
            )
            assert not waiting.done()
            ok(call(leader, "DELETE", f"/v1/locks/jobs/compactor?lease={first}"))
            taken = ok(waiting.result(20))
        assert taken["lease"] == second and taken["token"] > token
        refused(
            call(leader, "DELETE", f"/v1/locks/jobs/compactor?lease={first}"),
            409,
            "not_lock_holder",
        )
        # revoking the holder's lease releases the lock
        revoke(leader, second)
        assert ok(call(leader, "GET", "/v1/locks/jobs/compactor"))["holder"] is None
    finally:
        revoke(leader, first, second)


def test_lock_waiters_are_bounded_and_a_waiter_that_goes_away_leaves(leader: NodeProcess) -> None:
    leases = [grant(leader) for _ in range(MAX_WAITERS + 2)]
    holder, *waiters, extra = leases
    try:
        ok(lock(leader, "queue", holder))
        with ThreadPoolExecutor(len(waiters)) as pool:
            waits = [pool.submit(lock, leader, "queue", lease, 8) for lease in waiters]
            wait_until(
                lambda: ok(call(leader, "GET", "/v1/locks/queue"))["waiters"] == MAX_WAITERS,
                10,
                "the waiters to queue",
            )
            refused(lock(leader, "queue", extra, 1), 429, "too_many_lock_waiters")
            for waited in waits:
                refused(waited.result(20), 409, "lock_held")
        assert ok(call(leader, "GET", "/v1/locks/queue"))["waiters"] == 0
        # a client that gives up (its connection closes) leaves the queue too
        gone = HTTPConnection("127.0.0.1", leader.http_port, timeout=10)
        body = json.dumps({"lease": extra, "timeout": MAX_WAIT}).encode()
        gone.request("POST", "/v1/locks/queue", body, {"Content-Type": "application/json"})
        wait_until(lambda: ok(call(leader, "GET", "/v1/locks/queue"))["waiters"] == 1, 10, "queued")
        gone.close()
        wait_until(
            lambda: ok(call(leader, "GET", "/v1/locks/queue"))["waiters"] == 0, 10, "it left"
        )
    finally:
        revoke(leader, *leases)


def test_writes_with_a_stale_fencing_token_are_refused(leader: NodeProcess) -> None:
    old, new = grant(leader), grant(leader)
    try:
        old_token = ok(lock(leader, "fence", old))["token"]
        ok(fenced_put(leader, "fenced/a", f"fence={old_token}"))
        ok(call(leader, "DELETE", f"/v1/locks/fence?lease={old}"))
        new_token = ok(lock(leader, "fence", new))["token"]
        assert new_token > old_token
        stale = {"Rkv-Fencing": f"fence={old_token}"}
        writes = [
            ("PUT", "/v1/kv/fenced/a", b"stale"),
            ("DELETE", "/v1/kv/fenced/a", None),
            ("POST", "/v1/kv/fenced/n?op=incr", None),
            ("POST", "/v1/kv/fenced/a?op=append", b"x"),
            ("POST", "/v1/txn", {"success": [{"op": "delete", "key": b64(b"fenced/a")}]}),
        ]
        for method, path, body in writes:
            answer = refused(call(leader, method, path, body, stale), 409, "fenced")
            assert answer["token"] == new_token, (method, path)
        assert http("GET", f"{leader.url}/v1/kv/fenced/a").body == b"v"  # nothing written
        assert http("GET", f"{leader.url}/v1/kv/fenced/n").status == 404
        ok(fenced_put(leader, "fenced/a", f"fence={new_token}"))
        revoke(leader, new)
        assert refused(fenced_put(leader, "fenced/a", f"fence={new_token}"), 409, "fenced")[
            "token"
        ] is None  # fmt: skip
    finally:
        revoke(leader, old, new)


# -- elections -----------------------------------------------------------------------------


def test_an_election_campaigns_proclaims_resigns_and_is_observed(leader: NodeProcess) -> None:
    first, second = grant(leader), grant(leader)
    refused(call(leader, "GET", "/v1/elections/team"), 404, "no_leader")
    observer = Stream(leader, "/v1/elections/team?observe=true")
    try:
        assert observer.leader() is None
        won = ok(call(leader, "POST", "/v1/elections/team", {"lease": first, "value": "node-a"}))
        assert won["lease"] == first and won["value"] == "node-a"
        token = won["token"]
        seen = observer.leader()
        assert seen is not None
        assert (seen["name"], seen["lease"], seen["token"]) == ("team", first, token)
        assert seen["value"] == "node-a"
        proclaimed = {"lease": first, "token": token, "value": "node-a:8080"}
        answer = ok(call(leader, "PUT", "/v1/elections/team", proclaimed))
        assert answer == {"name": "team", "token": token, "value": "node-a:8080"}
        assert (observer.leader() or {})["value"] == "node-a:8080"
        wrong = {"lease": second, "token": token, "value": "usurper"}
        refused(call(leader, "PUT", "/v1/elections/team", wrong), 409, "not_lock_holder")
        current = ok(call(leader, "GET", "/v1/elections/team"))
        assert current["lease"] == first and current["value"] == "node-a:8080"
        assert current["since_ms"] > 0
        with ThreadPoolExecutor(1) as pool:
            body = {"lease": second, "value": "node-b", "timeout": 15}
            campaign = pool.submit(call, leader, "POST", "/v1/elections/team", body, None, 30)
            # nothing changes while it waits: keep-alive lines only
            assert observer.line() == {} and observer.line() == {}
            ok(call(leader, "DELETE", f"/v1/elections/team?lease={first}"))
            assert ok(campaign.result(20))["value"] == "node-b"
        followed = observer.leader()
        assert followed is not None
        assert followed["lease"] == second and followed["token"] > token
        ok(call(leader, "DELETE", f"/v1/elections/team?lease={second}"))
        assert observer.leader() is None
    finally:
        observer.close()
        revoke(leader, first, second)


def test_observers_count_as_watches(leader: NodeProcess) -> None:
    streams = [open_when_free(leader, "/v1/watch")]
    try:
        for _ in range(WATCHES_PER_ADDRESS - 1):
            streams.append(open_when_free(leader, "/v1/elections/crowd?observe=true"))
        for path in ("/v1/elections/crowd?observe=true", "/v1/watch"):
            answer = refused(call(leader, "GET", path), 429, "too_many_watches_per_address")
            assert "--max-watches-per-address" in answer["message"]
        streams.pop().close()
        streams.append(open_when_free(leader, "/v1/elections/crowd?observe=true"))
        assert streams[-1].leader() is None
    finally:
        for stream in streams:
            stream.close()


@pytest.mark.parametrize("method", ["POST", "DELETE", "GET"])
@pytest.mark.parametrize("kind", ["locks", "elections"])
def test_a_name_with_line_breaks_is_refused_as_a_name(
    leader: NodeProcess, method: str, kind: str
) -> None:
    """Control characters and line breaks in the name reach the name check (400) instead
    of missing the route (404): the schemathesis fuzz sent a DELETE of one."""
    got = http(method, f"{leader.url}/v1/{kind}/a%0Ab%0Dc%C2%85d%0Be%E2%80%A8h%0D%0Ai")
    assert got.status == 400, got.body
    assert got.json()["code"] == "invalid_lock_name", got.body
