"""Users, roles, permissions and tokens on real node processes over real sockets.

One auth-enabled 3-node cluster serves the module's first tests (set up through the
management API while auth was still off, as an operator would); the last test runs
its own cluster to restart, wipe and rebuild members with auth on.
"""

from __future__ import annotations

import base64
import json
import shutil
import time
from collections.abc import Iterator
from http.client import HTTPConnection
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from node.service.auth_tokens import TokenSigner
from tests.support.cluster import LocalCluster, NodeProcess, Response, http, wait_until

ROOT_PASSWORD = "root-pw-1"
TOKEN_TTL = 3
OPEN: list[Any] = []  # what an open operation's security says


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": "Bearer " + token}


ROOT = basic("root", ROOT_PASSWORD)


def call(
    node: NodeProcess,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> Response:
    data = None if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    return http(method, node.url + path, body=data, headers=headers or {})


def ok(response: Response) -> Any:
    assert response.status == 200, (response.status, response.body[:300])
    return response.json() if response.body else None


def setup_auth(node: NodeProcess) -> None:
    """What an operator does before enabling auth (docs/OPERATIONS.md, Security)."""
    ok(call(node, "POST", "/v1/auth/users", {"name": "root", "password": ROOT_PASSWORD}))
    ok(call(node, "PUT", "/v1/auth/users/root/roles/root"))
    ok(call(node, "POST", "/v1/auth/roles", {"name": "app-rw"}))
    grant = {"prefix": "app/", "permission": "readwrite"}
    ok(call(node, "POST", "/v1/auth/roles/app-rw/permissions?encoding=utf-8", grant))
    for name in ("alice", "bob", "eve"):
        roles = [] if name == "bob" else ["app-rw"]
        user = {"name": name, "password": name + "-pw", "roles": roles}
        ok(call(node, "POST", "/v1/auth/users", user))
    ok(call(node, "POST", "/v1/auth/enable"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        tmp_path_factory.mktemp("auth") / "cluster",
        extra_args=["--auth-token-ttl", str(TOKEN_TTL), "--max-failed-logins", "3"],
    )
    try:
        cluster.start()
        setup_auth(cluster.leader())
        cluster.use_headers(ROOT)
        yield cluster
    finally:
        cluster.stop()


def on_every_node(
    cluster: LocalCluster, method: str, path: str, headers: dict[str, str], status: int, code: str
) -> None:
    """Every node answers ``status`` with ``code`` (waiting, bounded, for it to apply
    the last auth change)."""
    for node in cluster.nodes:

        def answered(node: NodeProcess = node) -> bool:
            response = call(node, method, path, headers=headers)
            return response.status == status and response.json().get("code") == code

        wait_until(answered, 15, f"{node.node_id}: {method} {path} -> {status} {code}")


# -- every operation of the OpenAPI document -----------------------------------------------

PATH_VALUES = {"key": "x", "id": "n0", "name": "alice", "role": "app-rw"}


def operations(node: NodeProcess) -> list[tuple[str, str, dict[str, Any]]]:
    document = ok(call(node, "GET", "/v1/openapi.json"))
    found = []
    for template, item in document["paths"].items():
        path = template
        for name, value in PATH_VALUES.items():
            path = path.replace("{" + name + "}", value)
        for method, operation in item.items():
            found.append((method.upper(), path, operation))
    assert len(found) > 40
    return found


def body_for(method: str, path: str) -> Any:
    if path == "/v1/txn":
        return {"success": [{"op": "put", "key": base64.b64encode(b"x").decode(), "value": ""}]}
    if path == "/v1/kv:load":
        return b'{"key": "eA==", "value": ""}\n'  # the key x
    return {} if method in ("POST", "PUT") else None


def test_every_operation_needs_credentials_but_the_documented_open_ones(
    secured: LocalCluster,
) -> None:
    node = secured.nodes[0]
    for method, path, operation in operations(node):
        response = call(node, method, path, body_for(method, path))
        if operation.get("security") == OPEN:
            assert response.status != 401, (method, path)
            continue
        assert response.status == 401, (method, path, response.status, response.body[:200])
        assert response.json()["code"] == "unauthenticated"
        assert response.headers["WWW-Authenticate"] == 'Basic realm="rkv", Bearer'


def test_every_operation_refuses_a_user_without_its_permission(secured: LocalCluster) -> None:
    node = secured.nodes[1]
    bob = basic("bob", "bob-pw")  # a user with no role
    for method, path, operation in operations(node):
        if operation.get("security") == OPEN:
            continue
        response = call(node, method, path, body_for(method, path), bob)
        if operation["x-rkv-permission"] == "authenticated":
            assert response.status not in (401, 403), (method, path, response.body[:200])
            continue
        assert response.status == 403, (method, path, response.status, response.body[:200])
        answer = response.json()
        assert answer["code"] == "permission_denied" and "bob needs " in answer["message"]
    refused = call(node, "PUT", "/v1/kv/x", b"v", bob).json()["message"]
    assert refused == "bob needs write on key 'x'"
    assert "bob needs admin" in call(node, "POST", "/v1/admin/compact", None, bob).body.decode()


# -- per-prefix permissions ----------------------------------------------------------------


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_a_prefix_permission_allows_inside_and_refuses_outside(secured: LocalCluster) -> None:
    leader = secured.leader()
    alice = basic("alice", "alice-pw")
    assert ok(call(leader, "PUT", "/v1/kv/app/a", b"1", alice))["version"] > 0
    assert call(leader, "GET", "/v1/kv/app/a", None, alice).body == b"1"
    assert ok(call(leader, "POST", "/v1/kv/app/n?op=incr&by=2", None, alice))["value"] == 2
    scan = ok(call(leader, "GET", "/v1/kv?prefix=app/&encoding=utf-8", None, alice))
    assert {item["key"] for item in scan["items"]} == {"app/a", "app/n"}
    inside = {
        "compare": [{"key": b64("app/a"), "exists": True}],
        "success": [{"op": "put", "key": b64("app/b"), "value": b64("2")}],
    }
    assert ok(call(leader, "POST", "/v1/txn", inside, alice))["succeeded"] is True
    assert watch_status(leader, "app/", alice) == 200

    refusals = {
        ("PUT", "/v1/kv/other/x"): "alice needs write on key 'other/x'",
        ("GET", "/v1/kv/other/x"): "alice needs read on key 'other/x'",
        ("DELETE", "/v1/kv/other/x"): "alice needs write on key 'other/x'",
        ("GET", "/v1/kv?prefix=other/"): "alice needs read on prefix 'other/'",
        ("GET", "/v1/kv"): "alice needs read on prefix ''",
        ("GET", "/v1/kv?prefix=ap"): "alice needs read on prefix 'ap'",
    }
    for (method, path), message in refusals.items():
        response = call(leader, method, path, b"v" if method == "PUT" else None, alice)
        assert response.status == 403 and response.json()["message"] == message, (
            path,
            response.body,
        )
    assert watch_status(leader, "other/", alice) == 403
    assert watch_status(leader, "", alice) == 403
    # A txn mixing keys inside and outside: refused whole, nothing written.
    mixed = {
        "success": [
            {"op": "put", "key": b64("app/c"), "value": b64("3")},
            {"op": "put", "key": b64("other/y"), "value": b64("3")},
        ]
    }
    response = call(leader, "POST", "/v1/txn", mixed, alice)
    assert response.status == 403 and "needs write on key 'other/y'" in response.json()["message"]
    # Either branch counts, and a compare is a read.
    failure_outside = {"failure": [{"op": "get", "key": b64("other/z")}]}
    assert call(leader, "POST", "/v1/txn", failure_outside, alice).status == 403
    compare_outside = {"compare": [{"key": b64("other/z"), "exists": True}]}
    assert call(leader, "POST", "/v1/txn", compare_outside, alice).status == 403
    for key in ("app/c", "other/y", "other/x"):
        assert call(leader, "GET", f"/v1/kv/{key}", None, ROOT).status == 404, key


def test_a_bulk_load_needs_write_on_each_key(secured: LocalCluster) -> None:
    follower = secured.followers()[0]
    alice = basic("alice", "alice-pw")
    lines = [{"key": f"app/load/{i}", "value": str(i)} for i in range(4)]
    lines.append({"key": "other/load", "value": "x"})
    lines.append({"key": "app/load/after", "value": "y"})
    body = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    response = call(follower, "POST", "/v1/kv:load?encoding=utf-8", body, alice)
    assert response.status == 403, response.body
    answer = response.json()
    assert answer["code"] == "permission_denied" and answer["line"] == 5
    assert "alice needs write on key 'other/load'" in answer["message"]
    assert (answer["loaded"], answer["lines"]) == (4, 4)  # the lines before it are committed
    leader = secured.leader()
    query = f"consistency=stale&min_version={answer['version']}"
    assert call(leader, "GET", f"/v1/kv/app/load/3?{query}", None, ROOT).body == b"3"
    for key in ("other/load", "app/load/after"):
        assert call(leader, "GET", f"/v1/kv/{key}?{query}", None, ROOT).status == 404, key
    bob = basic("bob", "bob-pw")
    assert call(follower, "POST", "/v1/kv:load?encoding=utf-8", body, bob).status == 403


def watch_status(node: NodeProcess, prefix: str, headers: dict[str, str]) -> int:
    """The status a watch of ``prefix`` opens with (the stream is closed at once)."""
    parts = urlsplit(node.url)
    conn = HTTPConnection(str(parts.hostname), parts.port, timeout=10)
    try:
        conn.request("GET", f"/v1/watch?prefix={prefix}", headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


# -- tokens -------------------------------------------------------------------------------


def token_of(node: NodeProcess, user: str, password: str) -> str:
    answer = ok(call(node, "POST", "/v1/auth/token", {"user": user, "password": password}))
    assert answer["expires_in"] == TOKEN_TTL
    token: str = answer["token"]
    return token


def test_a_token_works_on_every_node_until_it_expires(secured: LocalCluster) -> None:
    token = token_of(secured.nodes[0], "alice", "alice-pw")
    ok(call(secured.leader(), "PUT", "/v1/kv/app/t", b"t", bearer(token)))
    for node in secured.nodes:
        read = call(node, "GET", "/v1/kv/app/t?consistency=stale", None, bearer(token))
        assert read.status in (200, 404), read.body  # a follower may not have it yet
    # Not one of this cluster's: another secret signed it.
    forged = TokenSigner(b"another-cluster-secret-0123456789").issue("user", "root", 99, 600)
    on_every_node(secured, "GET", "/v1/kv/app/t", bearer(forged), 401, "invalid_token")
    on_every_node(secured, "GET", "/v1/kv/app/t", bearer(token[:-4] + "AAAA"), 401, "invalid_token")
    wrong = call(secured.nodes[0], "POST", "/v1/auth/token", {"user": "alice", "password": "x"})
    assert wrong.status == 401 and wrong.json()["code"] == "invalid_credentials"
    time.sleep(TOKEN_TTL + 0.5)  # let it expire (the behaviour asserted is the refusal)
    on_every_node(secured, "GET", "/v1/kv/app/t", bearer(token), 401, "token_expired")


def test_deleting_a_user_or_revoking_a_role_revokes_its_tokens_everywhere(
    secured: LocalCluster,
) -> None:
    leader = secured.leader()
    for name in ("carol", "dave"):
        user = {"name": name, "password": name + "-pw", "roles": ["app-rw"]}
        ok(call(leader, "POST", "/v1/auth/users", user, ROOT))
    carol = token_of(leader, "carol", "carol-pw")
    dave = token_of(leader, "dave", "dave-pw")
    ok(call(leader, "PUT", "/v1/kv/app/r", b"r", bearer(dave)))
    ok(call(leader, "DELETE", "/v1/auth/users/carol", None, ROOT))
    on_every_node(secured, "GET", "/v1/kv/app/r", bearer(carol), 401, "invalid_token")
    on_every_node(
        secured, "GET", "/v1/kv/app/r", basic("carol", "carol-pw"), 401, "invalid_credentials"
    )
    ok(call(leader, "DELETE", "/v1/auth/users/dave/roles/app-rw", None, ROOT))
    on_every_node(secured, "GET", "/v1/kv/app/r", bearer(dave), 401, "invalid_token")
    # Its password still works, its permissions are gone.
    on_every_node(
        secured, "GET", "/v1/kv/app/r", basic("dave", "dave-pw"), 403, "permission_denied"
    )
    # The users list never shows a password or its hash.
    listed = ok(call(leader, "GET", "/v1/auth/users", None, ROOT))["users"]
    assert {"name": "dave", "roles": []} in listed and "carol" not in str(listed)
    assert "scrypt" not in json.dumps(listed) and "pw" not in json.dumps(listed)


# -- failed logins -----------------------------------------------------------------------


def from_address(node: NodeProcess, source: str, path: str, headers: dict[str, str]) -> Response:
    """A GET sent from ``source`` (any 127.x address reaches a node on 127.0.0.1)."""
    parts = urlsplit(node.url)
    conn = HTTPConnection(str(parts.hostname), parts.port, timeout=30, source_address=(source, 0))
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return Response(response.status, response.read(), dict(response.getheaders()))
    finally:
        conn.close()


def test_repeated_wrong_passwords_are_refused_before_hashing_but_not_elsewhere(
    secured: LocalCluster,
) -> None:
    node = secured.nodes[2]
    wrong = basic("eve", "not-her-password")
    statuses = [from_address(node, "127.0.0.1", "/v1/kv/app/a", wrong) for _ in range(5)]
    assert [r.status for r in statuses[:3]] == [401, 401, 401]  # --max-failed-logins 3
    refused = statuses[-1]
    assert refused.status == 429 and refused.json()["code"] == "too_many_failed_logins"
    assert int(refused.headers["Retry-After"]) >= 1
    # The right password from that address waits too; from another address it works.
    right = basic("eve", "eve-pw")
    assert from_address(node, "127.0.0.1", "/v1/kv/app/a", right).status == 429
    assert from_address(node, "127.0.0.2", "/v1/kv/app/a", right).status == 200
    # Other users from the first address are not held back.
    assert from_address(node, "127.0.0.1", "/v1/kv/app/a", basic("alice", "alice-pw")).status == 200


# -- management rules ---------------------------------------------------------------------


def test_management_refusals_are_clear(secured: LocalCluster) -> None:
    leader = secured.leader()
    cases = [
        ("DELETE", "/v1/auth/users/root", None, 409, "root_required"),
        ("DELETE", "/v1/auth/users/root/roles/root", None, 409, "root_required"),
        ("POST", "/v1/auth/roles", {"name": "root"}, 409, "root_role_built_in"),
        ("PUT", "/v1/auth/users/alice/roles/nope", None, 404, "role_not_found"),
        ("POST", "/v1/auth/users", {"name": "alice", "password": "p"}, 409, "user_exists"),
        ("POST", "/v1/auth/users", {"name": "a:b", "password": "p"}, 400, "invalid_user_name"),
        (
            "POST",
            "/v1/auth/roles/app-rw/permissions",
            {"permission": "all"},
            400,
            "invalid_permission",
        ),
    ]
    for method, path, body, status, code in cases:
        response = call(leader, method, path, body, ROOT)
        assert (response.status, response.json()["code"]) == (status, code), (path, response.body)
    role = ok(call(leader, "GET", "/v1/auth/roles/app-rw?encoding=utf-8", None, ROOT))
    assert role["permissions"] == [{"permission": "readwrite", "prefix": "app/"}]
    assert ok(call(leader, "GET", "/v1/auth/status", None, ROOT))["enabled"] is True


# -- restarts, rebuilds and compaction with auth on -------------------------------------------


def test_auth_survives_restart_rebuild_and_compaction_and_members_catch_up(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(tmp_path / "cluster", extra_args=["--raft-compaction-entries", "50"])
    try:
        cluster.start()
        leader = cluster.leader()
        setup_auth(leader)
        cluster.use_headers(ROOT)
        alice = basic("alice", "alice-pw")
        follower = cluster.followers()[0]
        index = cluster.nodes.index(follower)
        cluster.kill(index)
        shutil.rmtree(follower.data_dir)
        for i in range(150):  # past several raft markers: the follower must pull its state
            ok(call(leader, "PUT", f"/v1/kv/app/{i % 20}", b"v%d" % i, alice))
        ok(call(leader, "POST", "/v1/admin/compact", None, ROOT))
        cluster.start_node(index)
        cluster.wait_ready(timeout=60)
        last = ok(call(leader, "PUT", "/v1/kv/app/last", b"x", alice))["version"]
        # The rebuilt follower pulled the leader's state over HTTP with a member token...
        log = follower.log_path.read_text(errors="replace")
        assert "caught up:" in log and "STALLED" not in log, log[-3000:]
        # ... and holds the users, roles and the enabled flag.
        read = call(
            follower, "GET", f"/v1/kv/app/last?consistency=stale&min_version={last}", None, alice
        )
        assert read.status == 200 and read.body == b"x"
        assert call(follower, "GET", "/v1/kv/app/last?consistency=stale").status == 401
        assert ok(call(follower, "GET", "/v1/auth/status", None, ROOT))["enabled"] is True
        # A full restart keeps them too.
        for i in range(cluster.size):
            cluster.kill(i)
        for i in range(cluster.size):
            cluster.start_node(i)
        cluster.wait_ready(timeout=60)
        for node in cluster.nodes:
            assert call(node, "GET", "/v1/kv/app/last").status == 401
            read = call(node, "GET", "/v1/kv/app/last?consistency=stale", None, alice)
            assert read.status == 200 and read.body == b"x"
            users = ok(call(node, "GET", "/v1/auth/users", None, ROOT))["users"]
            assert {u["name"] for u in users} == {"root", "alice", "bob", "eve"}
    except (AssertionError, TimeoutError) as error:
        raise AssertionError(f"{error}\n{cluster.logs()}") from error
    finally:
        cluster.stop()


def test_auth_cannot_be_enabled_without_a_cluster_secret(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "cluster", size=1)
    node = cluster.nodes[0]
    node.args = [a for a in node.args if a not in ("--secret-file", str(cluster.secret_file))]
    node.args.append("--insecure-dev-mode")
    try:
        cluster.start()
        ok(
            call(
                node,
                "POST",
                "/v1/auth/users",
                {"name": "root", "password": "pw", "roles": ["root"]},
            )
        )
        refused = call(node, "POST", "/v1/auth/enable")
        assert refused.status == 409 and refused.json()["code"] == "cluster_secret_required"
        assert call(node, "GET", "/v1/kv/anything").status == 404  # still open
    finally:
        cluster.stop()
