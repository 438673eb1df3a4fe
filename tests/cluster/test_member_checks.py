"""Membership changes a stranger could use to break a cluster are refused (issue 15):
adding a member that does not answer on its raft address under the cluster secret,
and changing a member's url by re-adding it."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.cluster import LocalCluster, free_ports, http


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("members") / "cluster")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def post_member(url: str, body: dict[str, str]) -> Any:
    return http(
        "POST",
        f"{url}/v1/cluster/members",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )


def member_urls(cluster: LocalCluster) -> dict[str, str]:
    listed = http("GET", f"{cluster.leader().url}/v1/cluster/members").json()["members"]
    return {m["id"]: m["url"] for m in listed}


class SilentServer:
    """A TCP port that accepts and then says nothing, like a service that is not rkv."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)
            conn.recv(65536)
            conn.close()  # reads the handshake, answers nothing

    def close(self) -> None:
        self.sock.close()


def test_made_up_members_are_refused_and_the_quorum_stays(cluster: LocalCluster) -> None:
    leader = cluster.leader()
    silent = SilentServer()
    nowhere = free_ports(1)[0]
    try:
        for i, address in enumerate([f"127.0.0.1:{nowhere}", f"127.0.0.1:{silent.port}"] * 2):
            answer = post_member(
                leader.url, {"id": f"ghost{i}", "raft_address": address, "url": "http://x:1"}
            )
            assert answer.status == 409, answer.body
            body = answer.json()
            assert body["code"] == "member_unreachable", body
            assert address in body["message"]
    finally:
        silent.close()
    assert set(member_urls(cluster)) == {"n0", "n1", "n2"}
    assert http("PUT", f"{leader.url}/v1/kv/after-ghosts", b"still a quorum").status == 200


def test_re_adding_a_member_with_another_url_is_refused(cluster: LocalCluster) -> None:
    leader = cluster.leader()
    victim = cluster.followers()[0]
    before = member_urls(cluster)
    answer = post_member(
        leader.url,
        {"id": victim.node_id, "raft_address": victim.raft_address, "url": "http://evil:9"},
    )
    assert answer.status == 409, answer.body
    assert answer.json()["code"] == "member_exists"
    assert "PUT /v1/cluster/members/" in answer.json()["message"]
    assert member_urls(cluster) == before
    same = post_member(
        leader.url,
        {"id": victim.node_id, "raft_address": victim.raft_address, "url": victim.url},
    )
    assert same.status == 200 and same.json()["added"] is False


def test_a_url_changes_by_its_own_operation_on_a_loopback_node(cluster: LocalCluster) -> None:
    leader = cluster.leader()
    victim = cluster.followers()[0]
    path = f"{leader.url}/v1/cluster/members/{victim.node_id}"
    headers = {"Content-Type": "application/json"}
    moved = http("PUT", path, json.dumps({"url": "http://127.0.0.1:1/"}).encode(), headers)
    assert moved.status == 200, moved.body
    assert moved.json()["member"]["url"] == "http://127.0.0.1:1"
    assert member_urls(cluster)[victim.node_id] == "http://127.0.0.1:1"
    back = http("PUT", path, json.dumps({"url": victim.url}).encode(), headers)
    assert back.status == 200, back.body
    assert member_urls(cluster)[victim.node_id] == victim.url
    address = json.dumps({"url": victim.url, "raft_address": "127.0.0.1:2"}).encode()
    assert http("PUT", path, address, headers).status == 400
    unknown = http("PUT", f"{leader.url}/v1/cluster/members/nobody", b'{"url": "http://a:1"}')
    assert unknown.status == 404 and unknown.json()["code"] == "member_not_found"
