"""GET /v1/snapshot served by the real app around a real KvService on real storage
(raft replaced by a stand-in): the body, its headers, refusals, one export at a time.

tests/cluster/test_snapshot_api.py covers it against real node processes.
"""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import AsyncIterator
from typing import cast

import pytest
import pytest_asyncio
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from http_api.app import build_app
from node.service.kv import ConsensusLog, KvService
from node.snapshot.file import SnapshotReader
from node.snapshot.stream import SnapshotStream
from node.state.commands import Batch, Put, encode_entry
from node.storage.compaction import CompactionPolicy
from node.storage.compactor import CompactionTriggers, Compactor
from node.storage.recovery import NodeStorage
from tests.support.state import machine_of


class StandInRaft:
    stalled: str | None = None

    def stalled_reason(self) -> str | None:
        return self.stalled


async def run_here(fn: object) -> None:
    raise AssertionError("not used")


class GatedService(KvService):
    """Its export waits for ``gate`` once ``hold`` is set."""

    hold = False
    gate = threading.Event()
    entered = threading.Event()

    def open_snapshot_stream(
        self, transfer_id: str | None = None, after: bytes | None = None
    ) -> SnapshotStream:
        if self.hold:
            self.entered.set()
            assert self.gate.wait(10)
        return super().open_snapshot_stream(transfer_id, after)


@pytest_asyncio.fixture
async def served(storage: NodeStorage) -> AsyncIterator[tuple[TestServer, GatedService]]:
    for index in (1, 2):
        commands = tuple(Put(b"k%d-%d" % (index, i), b"v" * i) for i in range(50))
        machine_of(storage).apply(index, encode_entry(Batch(commands, 7)))
    compactor = Compactor(
        storage.commit_log,
        storage.store,
        policy=CompactionPolicy(tombstone_retention_ms=1000),
        triggers=CompactionTriggers(interval_seconds=300, min_closed_bytes=1 << 30),
        segment_bytes=4096,
        on_apply_thread=run_here,
    )
    service = GatedService(
        cast(ConsensusLog, StandInRaft()),
        storage.store,
        1024 * 1024,
        compactor=compactor,
        log=storage.commit_log,
    )
    server = TestServer(build_app(service))
    await server.start_server()
    try:
        yield server, service
    finally:
        service.gate.set()
        await server.close()


@pytest.mark.asyncio
async def test_the_snapshot_is_served_whole_with_its_headers(
    served: tuple[TestServer, GatedService], storage: NodeStorage
) -> None:
    server, _ = served
    async with ClientSession() as session, session.get(server.make_url("/v1/snapshot")) as r:
        assert r.status == 200
        body = await r.read()
        headers = r.headers
    assert headers["Content-Type"] == "application/octet-stream"
    assert "Content-Length" not in headers  # streamed as it is read
    assert headers["Transfer-Encoding"] == "chunked"
    assert headers["Rkv-Snapshot-Index"] == "2"
    assert headers["Rkv-Snapshot-Offset"] == str(storage.store.applied_offset) == "100"
    reader = SnapshotReader(io.BytesIO(body), "response")
    records = [record for record, _ in reader.records()]
    assert len(records) == reader.header.record_count == 100
    assert reader.header.applied_index == 2


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("method", "query"),
    [
        ("GET", "transfer=%C3%BE"),  # a letter, but not an ASCII one
        ("GET", "transfer=abc&after=a%2Fb"),  # not base64url
        ("GET", "transfer=abc&after=A"),  # one character is no byte
        ("GET", "after=AA"),  # a resume names its transfer
        ("DELETE", "transfer=%C2%B2"),
        ("DELETE", "transfer="),
    ],
)
async def test_a_malformed_transfer_or_resume_key_is_a_400(
    served: tuple[TestServer, GatedService], method: str, query: str
) -> None:
    server, _ = served
    async with ClientSession() as session:
        async with session.request(method, server.make_url(f"/v1/snapshot?{query}")) as r:
            assert r.status == 400
            body = await r.json()
        assert body["code"] == "invalid_request" and body["message"]
        async with session.get(server.make_url("/v1/snapshot")) as r:  # the slot is free
            assert r.status == 200
            await r.read()


@pytest.mark.asyncio
async def test_a_stalled_node_exports_nothing(
    served: tuple[TestServer, GatedService],
) -> None:
    server, service = served
    cast(StandInRaft, service._consensus).stalled = "entries are missing"
    async with ClientSession() as session, session.get(server.make_url("/v1/snapshot")) as r:
        assert r.status == 503
        body = await r.json()
    assert body["code"] == "node_not_ready" and "entries are missing" in body["message"]


@pytest.mark.asyncio
async def test_a_second_request_waits_for_the_running_export_and_is_then_served(
    served: tuple[TestServer, GatedService],
) -> None:
    server, service = served
    service.hold = True
    service.gate.clear()
    service.entered.clear()
    url = server.make_url("/v1/snapshot")
    async with ClientSession() as session:
        first = asyncio.create_task(session.get(url))
        assert await asyncio.to_thread(service.entered.wait, 5)
        second = asyncio.create_task(session.get(url))
        await asyncio.sleep(0.2)
        assert not second.done()  # queued behind the running export, not refused
        service.hold = False
        service.gate.set()
        for task in (first, second):
            async with await task as response:
                assert response.status == 200
                assert len(await response.read()) > 0


@pytest.mark.asyncio
async def test_one_export_at_a_time_and_a_client_that_leaves_frees_the_slot(
    served: tuple[TestServer, GatedService], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("http_api.routes_snapshot._QUEUE_WAIT_SECONDS", 0.2)
    server, service = served
    service.hold = True
    service.gate.clear()
    service.entered.clear()
    url = server.make_url("/v1/snapshot")
    async with ClientSession() as session:
        first = asyncio.create_task(session.get(url))
        assert await asyncio.to_thread(service.entered.wait, 5)
        async with session.get(url) as second:
            assert second.status == 503
            assert second.headers["Retry-After"] == "5"
            assert (await second.json())["code"] == "overloaded"
        first.cancel()  # the client leaves while the export runs
        with pytest.raises(asyncio.CancelledError):
            await first
        await asyncio.sleep(0.1)
        async with session.get(url) as third:  # the export still runs: still busy
            assert third.status == 503
        service.hold = False
        service.gate.set()
        for _ in range(100):
            async with session.get(url) as again:
                if again.status == 200:
                    assert len(await again.read()) > 0
                    return
            await asyncio.sleep(0.05)
    raise AssertionError("the slot was never freed")
