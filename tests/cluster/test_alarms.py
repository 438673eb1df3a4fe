"""The NOSPACE alarm against real node processes: a member over its --quota-bytes
raises it through raft, every member holds it (and keeps it across restarts),
writes that add data get 507 no_space on every node while deletes, reads and
compaction go on, and the cluster takes writes again once it is disarmed
(HTTP, the Python client and `rkv alarm`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest

from http_api.client import NoSpaceError, RkvClient
from tests.support.cluster import LocalCluster, NodeProcess, http, wait_until
from tests.support.rkv_cli import rkv

pytestmark = pytest.mark.timeout(240)

CHECK = ["--space-check-interval", "0.2"]


@pytest.fixture
def kv(tmp_path: Path) -> Iterator[LocalCluster]:
    running = LocalCluster(tmp_path / "cluster", extra_args=CHECK)
    try:
        running.start()
        yield running
    finally:
        running.stop()


def call(node: NodeProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = (
        None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    )
    answer = http(method, node.url + path, data, headers={"Content-Type": "application/json"})
    try:
        return answer.status, answer.json()
    except ValueError:
        return answer.status, answer.body


def alarms(node: NodeProcess) -> list[dict[str, Any]]:
    status, body = call(node, "GET", "/v1/alarms")
    assert status == 200, body
    return list(body["alarms"])


def raised(node: NodeProcess) -> bool:
    """Whether ``node`` answers and lists an alarm (False while it starts)."""
    try:
        return bool(alarms(node))
    except OSError:
        return False


def restart_with(kv: LocalCluster, i: int, *args: str) -> None:
    node = kv.nodes[i]
    kv.kill(i)
    node.args = [*kv._args(node), *args]  # _args holds extra_args (CHECK)
    kv.start_node(i)


def over_quota(kv: LocalCluster) -> NodeProcess:
    """n2 restarted with a quota its data is already over: it raises the alarm."""
    restart_with(kv, 2, "--quota-bytes", "1")
    wait_until(lambda: all(raised(n) for n in kv.nodes), 60, "the alarm on every node")
    return kv.nodes[2]


def refused(status: int, body: Any) -> None:
    assert status == 507, body
    assert body["code"] == "no_space"
    assert "n2" in body["message"] and "over quota" in body["message"]
    assert "disarm" in body["message"]


def test_a_member_over_its_quota_stops_writes_that_add_data_until_disarmed(
    kv: LocalCluster,
) -> None:
    leader = kv.leader()
    assert call(leader, "PUT", "/v1/kv/kept", b"before")[0] == 200
    assert call(leader, "PUT", "/v1/kv/doomed", b"x")[0] == 200
    assert alarms(leader) == []
    full = over_quota(kv)
    for node in kv.nodes:
        (alarm,) = alarms(node)
        assert alarm["member"] == "n2" and alarm["kind"] == "nospace"
        assert "over quota" in alarm["reason"] and "--quota-bytes 1" in alarm["reason"]
    # The member over quota says so in /readyz; the others are ready.
    ready = http("GET", full.url + "/readyz").json()
    assert ready["ready"] is False and ready["checks"]["storage"].startswith("failed: over quota")
    for other in kv.nodes[:2]:
        assert http("GET", other.url + "/readyz").json()["checks"]["storage"] == "ok"
        scraped = http("GET", other.url + "/metrics").body.decode()
        assert "\nrkv_space_nospace_alarms 1.0\n" in scraped
    scraped = http("GET", full.url + "/metrics").body.decode()
    assert "\nrkv_space_quota_bytes 1.0\n" in scraped
    leader = kv.leader()

    # Writes that add data are refused...
    refused(*call(leader, "PUT", "/v1/kv/kept", b"after"))
    refused(*call(leader, "POST", "/v1/kv/n?op=incr&by=1"))
    refused(*call(leader, "POST", "/v1/kv/kept?op=append", b"more"))
    txn = {"success": [{"op": "put", "key": "dA==", "value": "MQ=="}]}
    refused(*call(leader, "POST", "/v1/txn", txn))
    refused(*call(leader, "POST", "/v1/leases", {"ttl": 30}))
    load = b'{"key": "bA==", "value": "MQ=="}\n'
    status, body = call(leader, "POST", "/v1/kv:load", load)
    assert status == 507 and body["code"] == "no_space", body
    with RkvClient([n.url for n in kv.nodes]) as client:
        with pytest.raises(NoSpaceError, match="n2"):
            client.put("client", b"v")
        assert [(a.member, a.kind) for a in client.alarms()] == [("n2", "nospace")]
        # ...while deletes, reads, txns of deletes and compaction go on.
        assert client.get("kept").value == b"before"
        client.delete("doomed")
    assert (
        call(leader, "POST", "/v1/txn", {"success": [{"op": "delete", "key": "a2VwdA=="}]})[0]
        == 200
    )
    assert call(leader, "POST", "/v1/admin/compact")[0] == 200
    assert call(leader, "GET", "/v1/kv/kept")[0] == 404  # deleted by the txn

    put = rkv("put", "cli", "v", "--url", leader.url)
    assert put.code == 1 and "[no_space]" in put.err and "n2" in put.err, put.both

    # Disarmed while n2 is still over its quota: n2 raises it again.
    listed = rkv("alarm", "list", "--url", leader.url)
    assert listed.code == 0 and listed.out.startswith("n2\tnospace\tover quota"), listed.both
    disarmed = rkv("alarm", "disarm", "--url", leader.url)
    assert disarmed.code == 0, disarmed.both
    wait_until(lambda: raised(leader), 60, "n2 to raise its alarm again")

    # Space freed (the quota lifted): the disarm holds, and writes go on.
    restart_with(kv, 2, "--quota-bytes", "0")
    kv.wait_ready(60)
    leader = kv.leader()
    status, body = call(leader, "POST", "/v1/alarms:disarm", {"member": "n2", "kind": "nospace"})
    assert status == 200 and body == {"alarms": []}
    assert call(leader, "PUT", "/v1/kv/kept", b"after")[0] == 200
    for node in kv.nodes:
        assert alarms(node) == []
        assert http("GET", node.url + "/readyz").status == 200
    assert rkv("alarm", "list", "--url", leader.url).out == ""


def test_the_alarm_survives_a_restart_of_every_member(kv: LocalCluster) -> None:
    over_quota(kv)
    for i in range(3):
        kv.kill(i)
    for i in range(3):
        kv.nodes[i].args = kv._args(kv.nodes[i])  # no quota flag: the default
        kv.start_node(i)
    kv.wait_ready(60, kv.nodes[:2])
    for node in kv.nodes[:2]:
        assert [a["member"] for a in alarms(node)] == ["n2"]
    leader = kv.leader()
    refused(*call(leader, "PUT", "/v1/kv/k", b"v"))


def test_bad_disarm_requests_are_400s(kv: LocalCluster) -> None:
    leader = kv.leader()
    for body in (
        {"kind": "disk"},
        {"member": "a/b"},
        {"member": 5},
        {"member": None},
        {"other": 1},
        [1],
    ):
        status, answer = call(leader, "POST", "/v1/alarms:disarm", body)
        assert status == 400 and answer["code"] in ("invalid_alarm", "invalid_request"), body
    refused_cli = rkv("alarm", "disarm", "--member", "a/b", "--url", leader.url)
    assert refused_cli.code == 1 and "[invalid_alarm]" in refused_cli.err


def test_writes_served_by_http_workers_are_refused_the_same_way(tmp_path: Path) -> None:
    kv = LocalCluster(tmp_path / "workers", extra_args=[*CHECK, "--http-workers", "1"])
    try:
        kv.start()
        over_quota(kv)
        leader = kv.leader()

        def worker_ready() -> bool:
            listed = http("GET", leader.url + "/v1/status").json().get("http_workers") or []
            return bool(listed) and all(w["ready"] for w in listed)

        wait_until(worker_ready, 60, "the leader's HTTP worker")
        conn = HTTPConnection("127.0.0.1", leader.http_port, timeout=15)
        try:
            # A connection whose first request is a key-value write goes to a worker.
            conn.request("PUT", "/v1/kv/from-a-worker", body=b"v")
            response = conn.getresponse()
            body = json.loads(response.read())
            listed = http("GET", leader.url + "/v1/status").json()["http_workers"]
            assert sum(w["connections"] for w in listed) == 1  # this one, in the worker
        finally:
            conn.close()
        refused(response.status, body)
        conn = HTTPConnection("127.0.0.1", leader.http_port, timeout=15)
        try:
            conn.request("DELETE", "/v1/kv/absent")
            assert conn.getresponse().status == 404  # decided, not refused
        finally:
            conn.close()
    finally:
        kv.stop()
