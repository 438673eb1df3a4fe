"""Leases, locks and elections with authentication on, against real node processes:
a lease belongs to the user who granted it (403 lease_not_owned for anyone else but an
admin), and locks and elections need write (or read, to look) on the internal key
\\x00rkv/locks/NAME, which a prefix permission covers (docs/LEASES.md, Permissions).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.cluster import LocalCluster, NodeProcess, Response, http

ROOT_PASSWORD = "root-pw-1"


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


ROOT = basic("root", ROOT_PASSWORD)
ALICE = basic("alice", "alice-pw")  # keys under app/, locks under jobs/
BOB = basic("bob", "bob-pw")  # keys under app/, may look at locks under jobs/
CAROL = basic("carol", "carol-pw")  # keys under app/ only


def call(
    node: NodeProcess, method: str, path: str, headers: dict[str, str], body: Any = None
) -> Response:
    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
    sent = {"Content-Type": "application/json"} if body is not None else {}
    return http(method, node.url + path, data, {**sent, **headers})


def ok(response: Response) -> Any:
    assert response.status == 200, (response.status, response.body[:300])
    return response.json()


def refused(response: Response, status: int, code: str) -> str:
    assert response.status == status, (response.status, response.body[:300])
    answer = response.json()
    assert answer["code"] == code, answer
    message: str = answer["message"]
    return message


def grant_permission(node: NodeProcess, role: str, kind: str, prefix: bytes) -> None:
    body = {"permission": kind, "prefix": base64.b64encode(prefix).decode()}
    ok(call(node, "POST", f"/v1/auth/roles/{role}/permissions", {}, body))


def setup_auth(node: NodeProcess) -> None:
    ok(call(node, "POST", "/v1/auth/users", {}, {"name": "root", "password": ROOT_PASSWORD}))
    ok(call(node, "PUT", "/v1/auth/users/root/roles/root", {}))
    for role in ("app", "jobs-locker", "jobs-reader"):
        ok(call(node, "POST", "/v1/auth/roles", {}, {"name": role}))
    grant_permission(node, "app", "readwrite", b"app/")
    grant_permission(node, "jobs-locker", "readwrite", b"\x00rkv/locks/jobs/")
    grant_permission(node, "jobs-reader", "read", b"\x00rkv/locks/jobs/")
    users = {"alice": ["app", "jobs-locker"], "bob": ["app", "jobs-reader"], "carol": ["app"]}
    for name, roles in users.items():
        user = {"name": name, "password": name + "-pw", "roles": roles}
        ok(call(node, "POST", "/v1/auth/users", {}, user))
    ok(call(node, "POST", "/v1/auth/enable", {}))


@pytest.fixture(scope="module")
def leader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    cluster = LocalCluster(tmp_path_factory.mktemp("lease-auth") / "cluster")
    try:
        cluster.start()
        setup_auth(cluster.leader())
        cluster.use_headers(ROOT)  # for the cluster's own status calls
        yield cluster.leader()
    finally:
        cluster.stop()


def test_a_lease_is_its_owners_and_an_admins(leader: NodeProcess) -> None:
    refused(call(leader, "POST", "/v1/leases", {}, {"ttl": 30}), 401, "unauthenticated")
    lease = ok(call(leader, "POST", "/v1/leases", ALICE, {"ttl": 30}))["id"]
    mine = ok(call(leader, "POST", "/v1/leases", CAROL, {"ttl": 30}))["id"]
    shown = ok(call(leader, "GET", f"/v1/leases/{lease}", ALICE))
    assert shown["owner"] == "alice"
    for method, path, body in (
        ("POST", f"/v1/leases/{lease}/keepalive", None),
        ("GET", f"/v1/leases/{lease}", None),
        ("DELETE", f"/v1/leases/{lease}", None),
        ("PUT", f"/v1/kv/app/k?lease={lease}", b"v"),
    ):
        refused(call(leader, method, path, CAROL, body), 403, "lease_not_owned")
    txn = {"success": [{"op": "put", "key": base64.b64encode(b"app/t").decode(), "value": "",
                        "lease": lease}]}  # fmt: skip
    refused(call(leader, "POST", "/v1/txn", CAROL, txn), 403, "lease_not_owned")
    assert http("GET", f"{leader.url}/v1/kv/app/k", headers=ROOT).status == 404
    batch = ok(call(leader, "POST", "/v1/leases/keepalive", CAROL, {"ids": [lease, mine]}))
    assert batch["leases"] == [{"id": lease, "code": "lease_not_owned"}, {"id": mine, "ttl": 30}]
    # each user lists its own leases; an admin lists everyone's
    assert [x["id"] for x in ok(call(leader, "GET", "/v1/leases", CAROL))["leases"]] == [mine]
    assert [x["id"] for x in ok(call(leader, "GET", "/v1/leases", ALICE))["leases"]] == [lease]
    everyone = {x["id"] for x in ok(call(leader, "GET", "/v1/leases", ROOT))["leases"]}
    assert {lease, mine} <= everyone
    ok(call(leader, "PUT", f"/v1/kv/app/k?lease={lease}", ALICE, b"v"))
    assert ok(call(leader, "POST", f"/v1/leases/{lease}/keepalive", ROOT))["id"] == lease
    assert ok(call(leader, "DELETE", f"/v1/leases/{lease}", ROOT))["deleted_keys"] == 1
    ok(call(leader, "DELETE", f"/v1/leases/{mine}", CAROL))


def test_locks_and_elections_need_their_permission(leader: NodeProcess) -> None:
    alices = ok(call(leader, "POST", "/v1/leases", ALICE, {"ttl": 30}))["id"]
    bobs = ok(call(leader, "POST", "/v1/leases", BOB, {"ttl": 30}))["id"]
    try:
        held = ok(call(leader, "POST", "/v1/locks/jobs/x", ALICE, {"lease": alices}))
        assert held["lease"] == alices
        message = refused(
            call(leader, "POST", "/v1/locks/other/x", ALICE, {"lease": alices}),
            403,
            "permission_denied",
        )
        assert message == "alice needs write on key '\\x00rkv/locks/other/x'"
        not_hers = {"lease": bobs, "timeout": 0}
        refused(call(leader, "POST", "/v1/locks/jobs/y", ALICE, not_hers), 403, "lease_not_owned")
        # bob may look at jobs/ locks, not take, release or campaign for them
        assert ok(call(leader, "GET", "/v1/locks/jobs/x", BOB))["holder"]["lease"] == alices
        for method, path, body in (
            ("POST", "/v1/locks/jobs/x", {"lease": bobs}),
            ("DELETE", f"/v1/locks/jobs/x?lease={bobs}", None),
            ("POST", "/v1/elections/jobs/leader", {"lease": bobs, "value": "b"}),
            ("PUT", "/v1/elections/jobs/leader", {"lease": bobs, "token": 1, "value": "b"}),
            ("DELETE", f"/v1/elections/jobs/leader?lease={bobs}", None),
        ):
            assert "bob needs write" in refused(
                call(leader, method, path, BOB, body), 403, "permission_denied"
            )
        refused(call(leader, "GET", "/v1/elections/jobs/leader", BOB), 404, "no_leader")
        # carol may not even look
        for path in ("/v1/locks/jobs/x", "/v1/elections/jobs/leader?observe=true"):
            assert "carol needs read" in refused(
                call(leader, "GET", path, CAROL), 403, "permission_denied"
            )
        won = ok(call(leader, "POST", "/v1/elections/jobs/leader", ALICE, {"lease": alices}))
        assert ok(call(leader, "GET", "/v1/elections/jobs/leader", BOB))["token"] == won["token"]
        ok(call(leader, "DELETE", f"/v1/elections/jobs/leader?lease={alices}", ALICE))
        ok(call(leader, "DELETE", f"/v1/locks/jobs/x?lease={alices}", ALICE))
    finally:
        for lease in (alices, bobs):
            call(leader, "DELETE", f"/v1/leases/{lease}", ROOT)
