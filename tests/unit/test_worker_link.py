"""The link between a node's main process and an HTTP worker (node/cli/worker_link.py),
over a real socket pair, and the worker's coalesced read checks
(node/service/worker_kv.py)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from node.cli.worker_link import Link, Message, decode_error, encode_error, link_pair
from node.errors import (
    Fenced,
    LimitReached,
    NodeNotReady,
    NotLeader,
    RequestError,
    Unauthenticated,
    VersionConflict,
)
from node.service.kv import Consistency
from node.service.worker_kv import CoalescedChecks


@pytest.mark.asyncio
async def test_messages_replies_and_a_passed_socket_cross_the_link() -> None:
    main_end, worker_end = link_pair()
    got: list[tuple[Message, socket.socket | None]] = []
    ended: list[str] = []

    def on_main(message: Message, passed: socket.socket | None) -> None:
        if message["t"] == "read":
            main.reply(message, None if message["ok"] else NotLeader("no", "http://l:1"))
        else:
            got.append((message, passed))

    main = Link(main_end, on_main, lambda: ended.append("main"))
    worker = Link(worker_end, lambda m, p: got.append((m, p)), lambda: ended.append("worker"))
    client, server = socket.socketpair()
    try:
        main.send({"t": "conn", "address": "10.0.0.1"}, server)
        assert await worker.call({"t": "read", "ok": True}) == {"t": "reply", "re": 1, "ok": True}
        with pytest.raises(NotLeader) as refused:
            await worker.call({"t": "read", "ok": False})
        assert refused.value.leader_url == "http://l:1"
        assert server.fileno() == -1  # main's copy is closed once sent
        message, passed = got[0]
        assert message == {"t": "conn", "address": "10.0.0.1"}
        assert passed is not None
        passed.sendall(b"through the passed socket")
        assert client.recv(100) == b"through the passed socket"
        passed.close()
        main.close()
        for _ in range(100):
            if "worker" in ended:
                break
            await asyncio.sleep(0.01)
        assert ended == ["main", "worker"]  # the worker sees main's end
        with pytest.raises(RequestError):
            await worker.call({"t": "read", "ok": True})
    finally:
        client.close()


@pytest.mark.parametrize(
    "error",
    [
        NotLeader("not the leader", "http://n1:8001"),
        NotLeader("no leader", None),
        NodeNotReady("stalled"),
        Unauthenticated("wrong user name or password", code="invalid_credentials"),
    ],
)
def test_an_error_crosses_the_link_unchanged(error: RequestError) -> None:
    decoded = decode_error(encode_error(error))
    assert type(decoded) is type(error)
    assert (decoded.code, decoded.message) == (error.code, error.message)
    assert getattr(decoded, "leader_url", None) == getattr(error, "leader_url", None)


def test_the_details_of_a_conflict_cross_the_link() -> None:
    conflict = decode_error(encode_error(VersionConflict("changed", 17)))
    assert isinstance(conflict, VersionConflict) and conflict.current_version == 17
    fenced = decode_error(encode_error(Fenced("stale token", 9)))
    assert isinstance(fenced, Fenced) and (fenced.token, fenced.code) == (9, "fenced")
    unheld = decode_error(encode_error(Fenced("nobody holds it", None)))
    assert isinstance(unheld, Fenced) and unheld.token is None


def test_a_retry_after_crosses_the_link() -> None:
    error = LimitReached("too many", code="too_many_failed_logins")
    error.retry_after = 42.0
    decoded = decode_error(encode_error(error))
    assert isinstance(decoded, LimitReached) and decoded.retry_after == 42.0


class _Main:
    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()

    def stalled_reason(self) -> str | None:
        return None

    async def read_check(self, consistency: Consistency) -> None:
        self.calls += 1
        await self.release.wait()
        self.release.clear()


@pytest.mark.asyncio
async def test_reads_arriving_during_a_check_share_the_next_one_never_the_current() -> None:
    main = _Main()
    checks = CoalescedChecks(main)
    first = asyncio.create_task(checks.check(Consistency.LINEARIZABLE))
    await asyncio.sleep(0)
    later = [asyncio.create_task(checks.check(Consistency.LINEARIZABLE)) for _ in range(5)]
    await asyncio.sleep(0.01)
    assert main.calls == 1
    main.release.set()
    await first
    await asyncio.sleep(0.01)
    assert not any(t.done() for t in later)  # they wait for a check sent after them
    assert main.calls == 2
    main.release.set()
    await asyncio.gather(*later)
    assert main.calls == 2
