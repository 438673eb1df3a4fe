"""http_api.client against real node processes: RkvClient and AsyncRkvClient.

One cluster serves the module. Tests that kill or pause a node bring it back
before they end, and every test uses its own key prefix.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from http_api.client import (
    AsyncRkvClient,
    ClusterUnreachableError,
    Compare,
    InvalidRequestError,
    Item,
    KeyNotFoundError,
    Op,
    OverloadedError,
    PayloadTooLargeError,
    RetryPolicy,
    RkvClient,
    RkvClientError,
    UnavailableError,
    UnknownOutcomeError,
    VersionConflictError,
    _Core,
    _Failure,
    _Reply,
    _Send,
    _Sleep,
)
from tests.support.cluster import LocalCluster, free_ports

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def kv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = LocalCluster(Path(tmp_path_factory.mktemp("client")) / "cluster")
    try:
        running.start()
        yield running
    finally:
        running.stop()


def urls(cluster: LocalCluster) -> list[str]:
    return [node.url for node in cluster.nodes]


def heal(cluster: LocalCluster) -> None:
    """Restart any node a test stopped, and wait until all serve again."""
    for i, node in enumerate(cluster.nodes):
        if node.stopped_with_sigstop:
            cluster.resume(i)
        if not node.alive:
            cluster.start_node(i)
    cluster.wait_ready(nodes=cluster.nodes)
    cluster.leader()


def test_put_get_delete_with_versions_and_compare_and_set(kv: LocalCluster) -> None:
    with RkvClient(urls(kv)) as client:
        first = client.put("crud/a/b", "one")  # "/" inside a key: sent as %2F
        assert client.get(b"crud/a/b") == Item(b"crud/a/b", b"one", first, first)
        second = client.put(b"crud/a/b", b"two")
        assert second > first
        assert client.get("crud/a/b") == Item(b"crud/a/b", b"two", second, first)

        with pytest.raises(VersionConflictError) as conflict:
            client.put("crud/a/b", "stale", if_version=first)
        assert conflict.value.current_version == second
        assert conflict.value.code == "version_conflict" and conflict.value.status == 412
        third = client.put("crud/a/b", "three", if_version=second)
        assert third > second

        with pytest.raises(VersionConflictError) as exists:
            client.put("crud/a/b", "again", create_only=True)
        assert exists.value.current_version == third
        created = client.put("crud/new", "fresh", create_only=True)
        assert client.get("crud/new").create_version == created

        # Odd bytes survive the path: %, ?, #, spaces, non-UTF-8, a leading "/".
        odd = [b"crud/%2F", b"crud/?q=1#x", b"crud/ sp ace", b"crud/\xff\x00", b"/crud"]
        for key in odd:
            version = client.put(key, key[::-1])
            assert client.get(key) == Item(key, key[::-1], version, version)

        for consistency in ("linearizable", "leader", "stale"):
            got = client.get("crud/a/b", consistency=consistency, min_version=third)
            assert got.value == b"three"

        with pytest.raises(VersionConflictError) as wrong:
            client.delete("crud/a/b", if_version=first)
        assert wrong.value.current_version == third
        tombstone = client.delete("crud/a/b", if_version=third)
        assert tombstone > third
        with pytest.raises(KeyNotFoundError) as missing:
            client.get("crud/a/b")
        assert missing.value.code == "not_found" and missing.value.status == 404
        with pytest.raises(KeyNotFoundError):
            client.delete("crud/a/b")


def test_invalid_requests_raise_typed_errors(kv: LocalCluster) -> None:
    with RkvClient(urls(kv)) as client:
        with pytest.raises(InvalidRequestError) as reserved:
            client.put(b"\x00rkv/mine", b"x")
        assert reserved.value.code == "reserved_key"
        with pytest.raises(InvalidRequestError):
            client.get("x" * 5000)
        with pytest.raises(PayloadTooLargeError):
            client.put("big", b"x" * (1024 * 1024 + 1))
        with pytest.raises(ValueError):
            client.put("", "empty keys are refused before sending")
        with pytest.raises(ValueError):
            client.put("k", "v", if_version=3, create_only=True)
        with pytest.raises(ValueError):
            client.get("k", consistency="eventual")
        # The connection survives error answers: the client still works.
        assert client.put("invalid/after", "ok") > 0


def test_scan_follows_cursors_and_returns_every_key_once_in_order(kv: LocalCluster) -> None:
    keys = [b"scan/%03d" % i for i in range(57)] + [b"scan/\xff", b"scan/z/nested"]
    with RkvClient(urls(kv)) as client:
        # Neighbours outside the prefix must not appear.
        for key in (b"sca", b"scan", b"scan0", b"scao"):
            client.put(key, b"outside")
        for chunk in range(0, len(keys), 20):
            client.txn(success=[Op.put(k, k + b"!") for k in keys[chunk : chunk + 20]])
        expected = sorted(keys)
        for page_size in (1, 10, 57, 100):
            items = list(client.scan("scan/", limit=page_size))
            assert [item.key for item in items] == expected, page_size
            assert all(item.value == item.key + b"!" for item in items)
        page = client.scan_page(b"scan/", limit=10)
        assert [item.key for item in page.items] == expected[:10] and page.next
        rest = client.scan_page(b"scan/", limit=100, start_after=page.next)
        assert [item.key for item in rest.items] == expected[10:] and rest.next is None
        assert list(client.scan(b"scan/none/")) == []
        stale = list(client.scan("scan/", limit=20, consistency="stale"))
        assert len(stale) <= len(expected)


def test_txn_helpers(kv: LocalCluster) -> None:
    with RkvClient(urls(kv)) as client:
        base = client.put("txn/a", "1")
        result = client.txn(
            compare=[
                Compare.version("txn/a", base),
                Compare.value("txn/a", "1"),
                Compare.exists("txn/b", False),
            ],
            success=[Op.put("txn/b", b"\x00two"), Op.get("txn/a"), Op.delete("txn/missing")],
            failure=[Op.put("txn/failed", "x")],
        )
        assert result.succeeded
        put_b, get_a, delete_missing = result.results
        assert put_b.op == "put" and put_b.key == b"txn/b" and put_b.version > base
        assert get_a.item() == Item(b"txn/a", b"1", base, base)
        assert delete_missing.op == "delete" and not delete_missing.found
        assert client.get("txn/b").value == b"\x00two"

        failed = client.txn(
            compare=[Compare.version("txn/a", 0)],  # 0: "does not exist", which is false
            success=[Op.put("txn/never", "x")],
            failure=[Op.get("txn/b"), Op.get("txn/nothing")],
        )
        assert not failed.succeeded
        assert failed.results[0].value == b"\x00two" and failed.results[0].found
        assert not failed.results[1].found and failed.results[1].item() is None
        with pytest.raises(KeyNotFoundError):
            client.get("txn/never")


def test_async_client(kv: LocalCluster) -> None:
    async def scenario() -> None:
        async with AsyncRkvClient(urls(kv)) as client:
            first = await client.put("async/k", "v1")
            assert await client.get("async/k") == Item(b"async/k", b"v1", first, first)
            with pytest.raises(VersionConflictError) as conflict:
                await client.put("async/k", "v2", if_version=first + 1000)
            assert conflict.value.current_version == first
            second = await client.put("async/k", "v2", if_version=first)
            with pytest.raises(VersionConflictError):
                await client.put("async/k", "v3", create_only=True)
            assert (await client.get("async/k", consistency="leader")).version == second

            await asyncio.gather(*(client.put(f"async/s/{i:02d}", str(i)) for i in range(23)))
            keys = [item.key async for item in client.scan("async/s/", limit=5)]
            assert keys == [b"async/s/%02d" % i for i in range(23)]
            page = await client.scan_page("async/s/", limit=20)
            assert len(page.items) == 20 and page.next is not None

            result = await client.txn(
                compare=[Compare.version("async/k", second)],
                success=[Op.delete("async/k"), Op.get("async/k")],
            )
            assert result.succeeded and result.results[0].found
            assert not result.results[1].found
            with pytest.raises(KeyNotFoundError):
                await client.get("async/k")
            with pytest.raises(KeyNotFoundError):
                await client.delete("async/k")
            status = await client.status()
            assert len(status["members"]) == 3

    asyncio.run(scenario())


def test_leader_discovery_from_a_follower_url(kv: LocalCluster) -> None:
    leader = kv.leader()
    follower = next(n for n in kv.nodes if n is not leader)
    with RkvClient(follower.url) as client:
        assert client.leader_url is None
        client.put("discover/k", "v")
        assert client.leader_url == leader.url
        assert sorted(client.nodes) == sorted(urls(kv))  # learned from /v1/status
        # With a stale idea of the leader, a leader read is redirected (307) by the
        # follower and the client follows Location, learning the leader again.
        client._core.leader = follower.url
        assert client.get("discover/k", consistency="leader").value == b"v"
        assert client.leader_url == leader.url
        client._core.leader = follower.url
        pages = list(client.scan("discover/", limit=1, consistency="leader"))
        assert [item.key for item in pages] == [b"discover/k"]

    async def from_follower() -> None:
        async with AsyncRkvClient([follower.url]) as client:
            await client.put("discover/a", "v")
            assert client.leader_url == leader.url

    asyncio.run(from_follower())


def test_unreachable_cluster_raises_promptly() -> None:
    (port,) = free_ports(1)
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.05, max_backoff=0.1)
    with RkvClient(f"http://127.0.0.1:{port}", retry=policy) as client:
        for call in (lambda: client.get("k"), lambda: client.put("k", "v")):
            started = time.monotonic()
            with pytest.raises(ClusterUnreachableError) as error:
                call()
            assert time.monotonic() - started < 5
            assert error.value.code == "unreachable"


def test_reads_keep_working_when_the_first_url_is_a_killed_node(kv: LocalCluster) -> None:
    with RkvClient(urls(kv)) as writer:
        version = writer.put("failover/read", "still here")
    victim_index = kv.nodes.index(next(n for n in kv.nodes if n is not kv.leader()))
    victim = kv.nodes[victim_index]
    others = [n.url for n in kv.nodes if n is not victim]
    try:
        kv.kill(victim_index)
        for consistency in ("linearizable", "stale"):
            with RkvClient([victim.url, *others]) as client:
                got = client.get("failover/read", consistency=consistency, min_version=version)
                assert got.value == b"still here"
                assert [i.key for i in client.scan("failover/", consistency=consistency)] == [
                    b"failover/read"
                ]

        async def async_read() -> bytes:
            async with AsyncRkvClient([victim.url, *others]) as client:
                return (await client.get("failover/read", consistency="stale")).value

        assert asyncio.run(async_read()) == b"still here"
    finally:
        heal(kv)


def test_write_retries_after_the_leader_is_killed(kv: LocalCluster) -> None:
    client = RkvClient(urls(kv))
    async_client_urls = urls(kv)
    try:
        client.put("failover/w", "before")
        old = kv.leader()
        assert client.leader_url == old.url  # the client would send writes to the old leader
        kv.kill(kv.nodes.index(old))

        # Right away: the election may still be under way. Success or a typed error,
        # within the retry budget, never a hang.
        started = time.monotonic()
        with contextlib.suppress(UnavailableError, ClusterUnreachableError):
            client.put("failover/w", "during")
        assert time.monotonic() - started < 30

        new = kv.wait_for_new_leader(old)
        version = client.put("failover/w", "after")  # connection refused -> rediscover
        assert client.leader_url == new.url
        got = client.get("failover/w")
        assert (got.value, got.version) == (b"after", version)

        async def async_write() -> int:
            # Its first choice is the dead node: the refusal is safe to retry.
            async with AsyncRkvClient([old.url, *async_client_urls]) as fresh:
                return await fresh.put("failover/async", "ok")

        assert asyncio.run(async_write()) > version
    finally:
        client.close()
        heal(kv)


def test_a_write_to_a_paused_leader_reports_an_unknown_outcome(kv: LocalCluster) -> None:
    with RkvClient(urls(kv)) as client:
        client.put("paused/k", "v")
    leader = kv.leader()
    index = kv.nodes.index(leader)
    client = RkvClient([leader.url, *urls(kv)], timeout=1.0)
    try:
        assert client.put("paused/k", "v2") > 0
        kv.pause(index)
        started = time.monotonic()
        with pytest.raises(UnknownOutcomeError) as unknown:
            client.put("paused/k", "v3")  # sent, then no answer within the timeout
        assert "may or may not" in unknown.value.message
        assert time.monotonic() - started < 5
        # A read is safe to retry elsewhere: the paused node times out, another answers.
        got = client.get("paused/k", consistency="stale")
        assert got.value in (b"v2", b"v3")
    finally:
        client.close()
        heal(kv)


def test_error_tree() -> None:
    assert issubclass(UnknownOutcomeError, UnavailableError)
    assert issubclass(UnavailableError, RkvClientError)
    assert issubclass(ClusterUnreachableError, RkvClientError)
    assert not issubclass(ClusterUnreachableError, UnavailableError)


# -- the retry rules, driven without a network ----------------------------------------------
#
# Hard-to-provoke answers (Retry-After, unknown_outcome, a dropped connection
# after sending) are scripted here: the client's core is I/O-free.

A, B = "http://a:1", "http://b:1"


def drive(plan: Any, answer: Callable[[_Send], _Reply | _Failure]) -> tuple[Any, list[str], float]:
    """Run a plan; returns its value, "METHOD base target" per request, and the time slept."""
    sent: list[str] = []
    slept = 0.0
    outcome: _Reply | _Failure | None = None
    try:
        while True:
            action = plan.send(outcome)
            if isinstance(action, _Sleep):
                slept += action.seconds
                outcome = None
            else:
                sent.append(f"{action.method} {action.base}{action.target.split('?')[0]}")
                outcome = answer(action)
    except StopIteration as stop:
        return stop.value, sent, slept


def reply(status: int, body: dict[str, Any], **headers: str) -> _Reply:
    return _Reply(
        status,
        {k.lower().replace("_", "-"): v for k, v in headers.items()},
        json.dumps(body).encode(),
    )


def fake_cluster(
    *kv_answers: _Reply | _Failure, leaders: list[str] | None = None
) -> Callable[[_Send], _Reply | _Failure]:
    """Status names ``leaders`` in turn (the last one stays); /v1/kv requests and
    /v1/txn get the scripted answers in turn."""
    answers = list(kv_answers)
    named = list(leaders or [A])

    def answer(send: _Send) -> _Reply | _Failure:
        if send.target == "/v1/status":
            leader = named.pop(0) if len(named) > 1 else named[0]
            members = [{"id": "a", "url": A}, {"id": "b", "url": B}]
            return reply(200, {"leader": {"id": leader, "url": leader}, "members": members})
        return answers.pop(0)

    return answer


def core(attempts: int = 5) -> _Core:
    return _Core([A, B], 1.0, RetryPolicy(max_attempts=attempts, initial_backoff=0.01))


def test_write_retries_only_when_it_was_not_applied() -> None:
    overloaded = reply(503, {"code": "overloaded", "message": "busy"}, retry_after="2")
    not_applied = reply(503, {"code": "not_applied", "message": "leader changed"})
    ok = reply(200, {"version": 7})
    version, sent, slept = drive(
        core().put("k", "v", None, False), fake_cluster(overloaded, not_applied, ok)
    )
    assert version == 7 and slept >= 2.0  # Retry-After honoured
    assert sent == [
        "GET http://a:1/v1/status",
        "PUT http://a:1/v1/kv/k",
        "PUT http://a:1/v1/kv/k",
        "GET http://a:1/v1/status",
        "PUT http://a:1/v1/kv/k",
    ]

    # The leader refuses connections (it died): nothing was sent, so the client asks
    # the others again, pausing while they still name the dead node; after each pause
    # it tries every node again (the dead one may be back), until one names the new
    # leader, and writes there.
    refused = _Failure(ConnectionRefusedError("refused"), sent=False)
    named = [A, A, B]
    writes: list[_Reply | _Failure] = [refused, ok]

    def a_dies(send: _Send) -> _Reply | _Failure:
        if send.target == "/v1/status":
            if send.base == A and len(writes) < 2:
                return refused
            leader = named.pop(0) if len(named) > 1 else named[0]
            members = [{"id": "a", "url": A}, {"id": "b", "url": B}]
            return reply(200, {"leader": {"id": leader, "url": leader}, "members": members})
        return writes.pop(0)

    version, sent, slept = drive(core().put("k", "v", None, False), a_dies)
    assert version == 7 and slept > 0
    assert sent == [
        "GET http://a:1/v1/status",
        "PUT http://a:1/v1/kv/k",
        "GET http://b:1/v1/status",
        "GET http://a:1/v1/status",
        "GET http://b:1/v1/status",
        "PUT http://b:1/v1/kv/k",
    ]

    for answer in (
        reply(503, {"code": "unknown_outcome", "message": "timed out"}),
        _Failure(ConnectionResetError("reset"), sent=True),
        reply(500, {"code": "internal_error", "message": "boom"}),
    ):
        with pytest.raises(UnknownOutcomeError):
            drive(core().put("k", "v", None, False), fake_cluster(answer))
    with pytest.raises(UnavailableError) as not_ready:
        drive(core().delete("k", None), fake_cluster(reply(503, {"code": "node_not_ready"})))
    assert type(not_ready.value) is UnavailableError  # not known to be safe: no retry

    with pytest.raises(OverloadedError):  # attempts run out: the last error is raised
        drive(
            core(attempts=2).put("k", "v", None, False),
            fake_cluster(reply(503, {"code": "overloaded"}), reply(503, {"code": "overloaded"})),
        )


def test_reads_retry_elsewhere_on_any_503_and_lost_connections() -> None:
    answers = fake_cluster(
        reply(503, {"code": "node_not_ready", "message": "catching up"}),
        _Failure(TimeoutError(), sent=True),
        _Reply(200, {"rkv-version": "3", "rkv-create-version": "2"}, b"value"),
    )
    item, sent, _ = drive(core().get("k", "linearizable", None), answers)
    assert item == Item(b"k", b"value", 3, 2)
    assert [s for s in sent if "/v1/kv/" in s] == [
        "GET http://a:1/v1/kv/k",
        "GET http://b:1/v1/kv/k",
        "GET http://a:1/v1/kv/k",
    ]
