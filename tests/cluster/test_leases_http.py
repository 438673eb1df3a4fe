"""Leases, locks, elections and fenced writes over HTTP (docs/LEASES.md), against real
node processes over real sockets.

One 3-node cluster serves every test here, with small lease limits so that reaching
them is cheap; each test revokes the leases it grants. Auth-on behaviour (ownership,
the lock permission) is tests/cluster/test_leases_http_auth.py's.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from http.client import HTTPConnection
from typing import Any

import aiohttp
import pytest

from tests.support.cluster import LocalCluster, NodeProcess, Response, http, wait_until

KEEPALIVE = 0.5
MAX_LEASES = 12
MAX_TTL = 3600
MAX_ATTACHMENTS = 3
MAX_WAITERS = 2
MAX_WAIT = 20
WATCHES_PER_ADDRESS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = LocalCluster(
        tmp_path_factory.mktemp("leases") / "cluster",
        extra_args=[
            "--watch-keepalive", str(KEEPALIVE),
            "--max-leases", str(MAX_LEASES),
            "--max-lease-ttl", str(MAX_TTL),
            "--max-lease-attachments", str(MAX_ATTACHMENTS),
            "--max-lock-waiters", str(MAX_WAITERS),
            "--max-lock-wait", str(MAX_WAIT),
            "--max-watches-per-address", str(WATCHES_PER_ADDRESS),
        ],
    )  # fmt: skip
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture
def leader(cluster: LocalCluster) -> NodeProcess:
    return cluster.leader()


def call(
    node: NodeProcess,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 15.0,
) -> Response:
    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
    sent = {"Content-Type": "application/json"} if body is not None else {}
    return http(method, node.url + path, data, {**sent, **(headers or {})}, timeout)


def ok(response: Response) -> Any:
    assert response.status == 200, (response.status, response.body[:300])
    return response.json()


def refused(response: Response, status: int, code: str) -> dict[str, Any]:
    assert response.status == status, (response.status, response.body[:300])
    answer: dict[str, Any] = response.json()
    assert answer["code"] == code, answer
    assert answer["message"], answer
    return answer


def grant(node: NodeProcess, ttl: int = 60) -> int:
    granted = ok(call(node, "POST", "/v1/leases", {"ttl": ttl}))
    assert granted["ttl"] == ttl
    lease: int = granted["id"]
    return lease


def revoke(node: NodeProcess, *leases: int) -> None:
    for lease in leases:
        response = call(node, "DELETE", f"/v1/leases/{lease}")
        assert response.status in (200, 404), response.body


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def stale_get(node: NodeProcess, key: str) -> int:
    return http("GET", f"{node.url}/v1/kv/{key}?consistency=stale").status


def wait_gone(node: NodeProcess, key: str, timeout: float) -> None:
    """Wait (bounded) until ``node`` has applied the key's deletion."""
    wait_until(lambda: stale_get(node, key) == 404, timeout, f"{key} gone from {node.node_id}")


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


class Stream:
    """A long-lived NDJSON answer (a watch, an election's observers), line by line."""

    def __init__(self, node: NodeProcess, path: str, timeout: float = 10.0) -> None:
        self.connection = HTTPConnection("127.0.0.1", node.http_port, timeout=timeout)
        self.connection.request("GET", path)
        self.response = self.connection.getresponse()
        assert self.response.status == 200, self.response.read()
        assert self.response.getheader("Content-Type") == "application/x-ndjson"

    def line(self) -> dict[str, Any]:
        raw = self.response.readline()
        assert raw.endswith(b"\n"), raw
        parsed: dict[str, Any] = json.loads(raw)
        return parsed

    def leader(self) -> dict[str, Any] | None:
        """The next leader line's leader (keep-alive lines, ``{}``, are skipped)."""
        while True:
            line = self.line()
            assert "error" not in line, line
            if line:
                leader: dict[str, Any] | None = line["leader"]
                return leader

    def close(self) -> None:
        self.connection.close()


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


# -- locks and fencing ---------------------------------------------------------------------


def lock(node: NodeProcess, name: str, lease: int, timeout: float = 0) -> Response:
    return call(node, "POST", f"/v1/locks/{name}", {"lease": lease, "timeout": timeout}, None, 30)


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


def fenced_put(node: NodeProcess, key: str, fencing: str) -> Response:
    return call(node, "PUT", f"/v1/kv/{key}", b"v", {"Rkv-Fencing": fencing})


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


def open_when_free(node: NodeProcess, path: str) -> Stream:
    """A stream, once a slot is free (a closed stream's handler notices within a second)."""

    def opened() -> Stream | None:
        try:
            return Stream(node, path)
        except AssertionError:  # 429: not yet
            return None

    stream: Stream = wait_until(opened, 10, f"a free slot for {path}")
    return stream


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
