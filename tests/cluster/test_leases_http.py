"""Leases and keys attached to them over HTTP (docs/LEASES.md), against real node
processes over real sockets: grant, keepalive (one, a batch, the WebSocket stream), show,
list, revoke; keys attached by ?lease, ?ttl and a txn put, deleted when the lease ends and
seen by a watch; the limits; and every bad-input code of the lease, lock and election
routes.

One 3-node cluster with small lease limits serves every test here; each test revokes the
leases it grants. Locks, fencing and elections: test_locks_http.py; auth on:
test_leases_http_auth.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.support.cluster import LocalCluster, NodeProcess, http
from tests.support.lease_calls import (
    MAX_ATTACHMENTS,
    MAX_LEASES,
    MAX_TTL,
    MAX_WAIT,
    Stream,
    b64,
    call,
    fenced_put,
    grant,
    lease_cluster,
    lock,
    ok,
    refused,
    revoke,
    stale_get,
    wait_gone,
)

NAME = "leases"


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


# -- leases --------------------------------------------------------------------------------


def test_a_lease_is_granted_kept_alive_shown_listed_and_revoked(leader: NodeProcess) -> None:
    first, second = grant(leader, 30), grant(leader, 40)
    try:
        assert ok(call(leader, "POST", f"/v1/leases/{first}/keepalive")) == {"id": first, "ttl": 30}
        shown = ok(call(leader, "GET", f"/v1/leases/{first}"))
        assert shown["id"] == first and shown["ttl"] == 30 and shown["owner"] == ""
        assert 0 < shown["remaining"] <= 30
        assert (shown["keys"], shown["locks"], shown["truncated"]) == ([], [], False)
        listed = ok(call(leader, "GET", "/v1/leases"))
        assert {first, second} <= {lease["id"] for lease in listed["leases"]}
        assert listed["next_after"] is None
        # pages: one lease at a time, in id order, resumed after the last one
        page = ok(call(leader, "GET", f"/v1/leases?after={first - 1}&limit=1"))
        assert [lease["id"] for lease in page["leases"]] == [first]
        assert page["next_after"] == first
        page = ok(call(leader, "GET", f"/v1/leases?after={first}&limit=1"))
        assert page["leases"][0]["id"] == second
        batch = ok(call(leader, "POST", "/v1/leases/keepalive", {"ids": [second, 999_999, first]}))
        assert batch == {
            "leases": [
                {"id": second, "ttl": 40},
                {"id": 999_999, "code": "lease_not_found"},
                {"id": first, "ttl": 30},
            ]
        }
        revoked = ok(call(leader, "DELETE", f"/v1/leases/{first}"))
        assert revoked == {"id": first, "revoked": True, "deleted_keys": 0}
        refused(call(leader, "POST", f"/v1/leases/{first}/keepalive"), 404, "lease_expired")
        refused(call(leader, "DELETE", f"/v1/leases/{first}"), 404, "lease_expired")
        refused(call(leader, "GET", "/v1/leases/999999"), 404, "lease_not_found")
        ended = ok(call(leader, "POST", "/v1/leases/keepalive", {"ids": [first]}))
        assert ended == {"leases": [{"id": first, "code": "lease_expired"}]}
        assert first not in {x["id"] for x in ok(call(leader, "GET", "/v1/leases"))["leases"]}
    finally:
        revoke(leader, first, second)


def test_too_many_leases_is_a_429_until_one_ends(leader: NodeProcess) -> None:
    held = [int(x["id"]) for x in ok(call(leader, "GET", "/v1/leases?limit=1000"))["leases"]]
    granted: list[int] = []
    try:
        for _ in range(MAX_LEASES - len(held)):
            granted.append(grant(leader))
        refused(call(leader, "POST", "/v1/leases", {"ttl": 5}), 429, "too_many_leases")
        refused(call(leader, "PUT", "/v1/kv/ttl-full?ttl=5", b"v"), 429, "too_many_leases")
        revoke(leader, granted.pop())
        granted.append(grant(leader))
    finally:
        revoke(leader, *granted)


# -- keys attached to leases ---------------------------------------------------------------


def deletes_seen(watch: Stream, keys: set[str]) -> set[str]:
    """The keys of delete lines until each of ``keys`` was deleted (bounded by the
    stream's socket timeout)."""
    seen: set[str] = set()
    while not keys <= seen:
        line = watch.line()
        assert "error" not in line, line
        if line.get("op") == "delete":
            seen.add(base64.b64decode(line["key"]).decode())
    return seen


def test_keys_attached_by_lease_ttl_and_txn_go_when_the_lease_ends(
    cluster: LocalCluster, leader: NodeProcess
) -> None:
    lease = grant(leader)
    watch = Stream(leader, "/v1/watch?prefix=att/")
    try:
        ok(call(leader, "PUT", f"/v1/kv/att/a?lease={lease}", b"1"))
        ttl_put = ok(call(leader, "PUT", "/v1/kv/att/b?ttl=60", b"2"))
        own = ttl_put["lease"]
        assert isinstance(own, int) and own != lease
        txn = {"success": [{"op": "put", "key": b64(b"att/c"), "value": b64(b"3"), "lease": lease}]}
        result = ok(call(leader, "POST", "/v1/txn", txn))
        assert result["results"][0]["lease"] == lease
        # a later put without the lease detaches the key
        ok(call(leader, "PUT", f"/v1/kv/att/d?lease={lease}", b"4"))
        ok(call(leader, "PUT", "/v1/kv/att/d", b"5"))
        shown = ok(call(leader, "GET", f"/v1/leases/{lease}?encoding=utf-8"))
        assert sorted(shown["keys"]) == ["att/a", "att/c"]
        assert ok(call(leader, "GET", f"/v1/leases/{own}?encoding=utf-8"))["keys"] == ["att/b"]

        revoked = ok(call(leader, "DELETE", f"/v1/leases/{lease}"))
        assert revoked["deleted_keys"] == 2
        assert deletes_seen(watch, {"att/a", "att/c"}) == {"att/a", "att/c"}
        for node in cluster.nodes:
            for key in ("att/a", "att/c"):
                wait_gone(node, key, 15)
            assert stale_get(node, "att/b") == 200
            assert stale_get(node, "att/d") == 200
        ok(call(leader, "DELETE", f"/v1/leases/{own}"))
        assert deletes_seen(watch, {"att/b"}) == {"att/b"}
    finally:
        watch.close()
        revoke(leader, lease)


def test_a_key_with_a_ttl_nobody_keeps_alive_is_deleted_everywhere(
    cluster: LocalCluster, leader: NodeProcess
) -> None:
    ok(call(leader, "PUT", "/v1/kv/short?ttl=1", b"v"))
    for node in cluster.nodes:
        wait_gone(node, "short", 30)  # its lease expired


def test_a_lease_holds_at_most_its_attachments(leader: NodeProcess) -> None:
    lease = grant(leader)
    try:
        for i in range(MAX_ATTACHMENTS):
            ok(call(leader, "PUT", f"/v1/kv/full/{i}?lease={lease}", b"v"))
        refused(
            call(leader, "PUT", f"/v1/kv/full/x?lease={lease}", b"v"),
            429,
            "too_many_lease_attachments",
        )
        assert http("GET", f"{leader.url}/v1/kv/full/x").status == 404
    finally:
        revoke(leader, lease)


# -- the WebSocket keepalive stream --------------------------------------------------------


async def keepalive_stream(node: NodeProcess, messages: list[Any]) -> list[Any]:
    answers = []
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"{node.url}/v1/leases/keepalive") as socket,
    ):
        for message in messages:
            if isinstance(message, bytes):
                await socket.send_bytes(message)
            else:
                await socket.send_str(message if isinstance(message, str) else json.dumps(message))
            answers.append(await socket.receive_json(timeout=10))
    return answers


def test_the_websocket_stream_keeps_leases_alive_and_survives_bad_messages(
    leader: NodeProcess,
) -> None:
    first, second = grant(leader, 20), grant(leader, 30)
    revoke(leader, second)
    try:
        messages = [
            {"ids": [first, second, 999_999]},
            "not json",
            {"ids": []},
            {"ids": [0]},
            b"\x00binary",
            {"ids": [first]},
        ]
        answers = asyncio.run(keepalive_stream(leader, messages))
        assert answers[0] == {
            "leases": [
                {"id": first, "ttl": 20},
                {"id": second, "code": "lease_expired"},
                {"id": 999_999, "code": "lease_not_found"},
            ]
        }
        for answer in answers[1:5]:
            assert answer["code"] == "invalid_request" and answer["message"], answer
        assert answers[5] == {"leases": [{"id": first, "ttl": 20}]}
        plain = call(leader, "GET", "/v1/leases/keepalive")
        refused(plain, 400, "websocket_required")
    finally:
        revoke(leader, first)


# -- bad input -----------------------------------------------------------------------------


def test_every_bad_input_is_a_clear_400(leader: NodeProcess) -> None:
    lease = grant(leader)
    try:
        for ttl in (0, -1, MAX_TTL + 1, 1.5, "10", None):
            refused(call(leader, "POST", "/v1/leases", {"ttl": ttl}), 400, "invalid_ttl")
        for query in ("ttl=0", f"ttl={MAX_TTL + 1}", "ttl=x"):
            refused(call(leader, "PUT", f"/v1/kv/k?{query}", b"v"), 400, "invalid_ttl")
        put_k = {"op": "put", "key": b64(b"k"), "value": ""}
        bad_requests = [
            ("POST", "/v1/leases", {"ttl": 5, "extra": 1}),
            ("POST", "/v1/leases", b"not json"),
            ("GET", "/v1/leases/abc", None),
            ("GET", "/v1/leases/0", None),
            ("POST", "/v1/leases/-3/keepalive", None),
            ("GET", "/v1/leases?limit=0", None),
            ("GET", "/v1/leases?limit=1001", None),
            ("POST", "/v1/leases/keepalive", {"ids": list(range(1, 10_002))}),
            ("POST", "/v1/leases/keepalive", {"ids": [1.5]}),
            ("PUT", f"/v1/kv/k?lease={lease}&ttl=5", b"v"),
            ("PUT", "/v1/kv/k?lease=x", b"v"),
            ("POST", "/v1/locks/a", {"lease": lease, "timeout": -1}),
            ("POST", "/v1/locks/a", {"lease": lease, "timeout": MAX_WAIT + 1}),
            ("POST", "/v1/locks/a", {"lease": "1"}),
            ("POST", "/v1/locks/a", {"timeout": 1}),
            ("DELETE", "/v1/locks/a", None),
            ("POST", "/v1/elections/e", {"lease": lease, "value": "x" * 4097}),
            ("POST", "/v1/elections/e", {"lease": lease, "value": 5}),
            ("PUT", "/v1/elections/e", {"lease": lease, "value": "v"}),
            ("GET", "/v1/elections/e?observe=maybe", None),
            (
                "POST",
                "/v1/txn",
                {"success": [{"op": "put", "key": "aw==", "value": "", "lease": 0}]},
            ),
        ]
        for method, path, body in bad_requests:
            refused(call(leader, method, path, body), 400, "invalid_request")
        for name in ("a%20b", "x" * 201, "caf%C3%A9"):
            for method in ("POST", "GET", "DELETE"):
                answer = call(leader, method, f"/v1/locks/{name}?lease={lease}", {"lease": lease})
                refused(answer, 400, "invalid_lock_name")
            refused(call(leader, "GET", f"/v1/elections/{name}"), 400, "invalid_lock_name")
        for header in ("jobs", "jobs=", "=3", "jobs=-1", "jobs=x", "a b=1", "a=b=1"):
            refused(fenced_put(leader, "k", header), 400, "invalid_fencing")
            refused(call(leader, "DELETE", "/v1/kv/k", None, {"Rkv-Fencing": header}), 400,
                    "invalid_fencing")  # fmt: skip
        refused(call(leader, "PUT", "/v1/kv/k?lease=999999", b"v"), 404, "lease_not_found")
        txn = {"success": [{**put_k, "lease": 999_999}]}
        refused(call(leader, "POST", "/v1/txn", txn), 404, "lease_not_found")
        assert http("GET", f"{leader.url}/v1/kv/k").status == 404  # nothing was written
        refused(lock(leader, "a", 999_999), 404, "lease_not_found")
        refused(call(leader, "POST", "/v1/leases/999999/keepalive"), 404, "lease_not_found")
    finally:
        revoke(leader, lease)
