"""The change feed's parts in one process: line rendering, KvService.changes on a real
commit log, and GET /v1/watch served by the real app around a real KvService (raft
replaced by a stand-in; records are appended the way the apply thread does).

tests/cluster/test_watch.py covers the feed against real node processes.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import pytest
import pytest_asyncio
from aiohttp import ClientSession, ClientTimeout
from aiohttp.test_utils import TestServer

from http_api.app import build_app
from http_api.routes_watch import TICKER, HeadTicker, change_line
from http_api.stream_slots import STREAMS
from node.cli.settings import add_node_arguments, node_config
from node.errors import ConfigError
from node.keyspace import RESERVED_PREFIX
from node.service.kv import ConsensusLog, KvService
from node.storage.compaction import CompactionPolicy
from node.storage.compactor import CompactionTriggers, Compactor
from node.storage.record import Record, RecordOp
from node.storage.recovery import NodeStorage


def put(offset: int, key: bytes, value: bytes) -> Record:
    return Record(offset, offset, 0, RecordOp.PUT, key, value, offset)


def delete(offset: int, key: bytes) -> Record:
    return Record(offset, offset, 0, RecordOp.DELETE, key)


def append(storage: NodeStorage, *records: Record) -> None:
    """What the apply thread does: the log first, then LMDB (which moves the applied offset)."""
    storage.commit_log.append(records)
    storage.store.apply_records(records, applied_index=records[-1].raft_index)


class StandInRaft:
    stalled: str | None = None

    def stalled_reason(self) -> str | None:
        return self.stalled


async def run_here(fn: Callable[[], None]) -> None:
    fn()


def service(storage: NodeStorage, raft: StandInRaft, keepalive: float = 0.3) -> KvService:
    compactor = Compactor(
        storage.commit_log,
        storage.store,
        policy=CompactionPolicy(tombstone_retention_ms=1000),
        triggers=CompactionTriggers(interval_seconds=300, min_closed_bytes=1 << 30),
        segment_bytes=4096,
        on_apply_thread=run_here,
    )
    return KvService(
        cast(ConsensusLog, raft),
        storage.store,
        1024 * 1024,
        compactor=compactor,
        log=storage.commit_log,
        watch_keepalive=keepalive,
    )


# -- lines ---------------------------------------------------------------------------


def line(record: Record, encoding: str) -> dict[str, Any]:
    raw = change_line(record, encoding)
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1
    parsed: dict[str, Any] = json.loads(raw)
    return parsed


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_change_lines_in_base64_and_utf8() -> None:
    record = put(7, "clé".encode(), b"v\n1")
    assert line(record, "base64") == {
        "offset": 7,
        "op": "put",
        "key": b64("clé".encode()),
        "value": b64(b"v\n1"),
        "version": 7,
        "create_version": 7,
    }
    assert line(record, "utf-8") == {
        "offset": 7,
        "op": "put",
        "key": "clé",
        "value": "v\n1",
        "version": 7,
        "create_version": 7,
    }
    assert line(delete(9, b"k"), "utf-8") == {"offset": 9, "op": "delete", "key": "k", "version": 9}


@pytest.mark.parametrize(
    "record",
    [put(3, b"k\xff", b"text"), put(3, b"text", b"\xfe\x00"), delete(3, b"\xc3")],
    ids=["key", "value", "deleted key"],
)
def test_a_non_utf8_line_falls_back_to_base64_and_says_so(record: Record) -> None:
    got = line(record, "utf-8")
    assert got["encoding"] == "base64"
    assert base64.b64decode(got["key"]) == record.key
    if record.op is RecordOp.PUT:
        assert base64.b64decode(got["value"]) == record.value
    else:
        assert "value" not in got


# -- KvService.changes ---------------------------------------------------------------------


def test_changes_filter_by_prefix_hide_reserved_keys_and_come_in_batches(
    storage: NodeStorage,
) -> None:
    append(
        storage,
        put(1, RESERVED_PREFIX + b"session", b"internal"),
        put(2, b"a/1", b"x"),
        put(3, b"b/1", b"y"),
        delete(4, RESERVED_PREFIX + b"session"),
        put(5, b"a/2", b"z"),
        delete(6, b"a/1"),
    )
    kv = service(storage, StandInRaft())
    records, position = kv.changes(b"", 1, 6)
    assert [r.offset for r in records] == [2, 3, 5, 6] and position == 7
    records, position = kv.changes(RESERVED_PREFIX, 1, 6)
    assert records == [] and position == 7
    records, position = kv.changes(b"a/", 1, 6)
    assert [(r.offset, r.op) for r in records] == [
        (2, RecordOp.PUT),
        (5, RecordOp.PUT),
        (6, RecordOp.DELETE),
    ]
    # to_offset bounds the read; max_records counts records read, matching or not
    assert [r.offset for r in kv.changes(b"", 1, 4)[0]] == [2, 3]
    assert kv.changes(b"", 1, 4)[1] == 5
    records, position = kv.changes(b"a/", 1, 6, max_records=3)
    assert [r.offset for r in records] == [2] and position == 4
    records, position = kv.changes(b"", 2, 6, max_bytes=1)
    assert [r.offset for r in records] == [2] and position == 3
    assert kv.changes(b"", 7, 6) == ([], 7)
    assert kv.changes(b"", 7, 9) == ([], 10)  # nothing there (the applied offset bounds it)


# -- GET /v1/watch in process ------------------------------------------------------------


@pytest_asyncio.fixture
async def served(storage: NodeStorage) -> AsyncIterator[tuple[TestServer, StandInRaft]]:
    raft = StandInRaft()
    server = TestServer(build_app(service(storage, raft)))
    await server.start_server()
    try:
        yield server, raft
    finally:
        await server.close()


async def read_line(stream: Any, timeout: float = 3.0) -> dict[str, Any] | None:
    raw = await asyncio.wait_for(stream.readline(), timeout)
    return None if not raw else cast(dict[str, Any], json.loads(raw))


async def wait_for(predicate: Any, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


@pytest.mark.asyncio
async def test_the_ticker_wakes_waiters_on_a_change_times_out_and_closes() -> None:
    head = [5]
    ticker = HeadTicker(lambda: head[0], interval=0.01)
    await asyncio.wait_for(ticker.wait(4, 10.0), 0.5)  # already beyond: at once
    assert not ticker.polling
    waiters = [asyncio.create_task(ticker.wait(5, 10.0)) for _ in range(3)]
    await asyncio.sleep(0.05)
    assert not any(w.done() for w in waiters) and ticker.polling and ticker.waiting == 3
    head[0] = 6
    await asyncio.wait_for(asyncio.gather(*waiters), 1.0)
    started = time.monotonic()
    await ticker.wait(6, 0.1)  # nothing new: the timeout
    assert time.monotonic() - started >= 0.09
    await wait_for(lambda: not ticker.polling)  # nobody waits: the poll stops
    waiter = asyncio.create_task(ticker.wait(6, 10.0))
    await asyncio.sleep(0.02)
    ticker.close()
    await asyncio.wait_for(waiter, 0.5)
    await asyncio.wait_for(ticker.wait(6, 10.0), 0.5)  # closed: never waits again
    await wait_for(lambda: not ticker.polling and ticker.waiting == 0)


@pytest.mark.asyncio
async def test_new_changes_and_keepalives_arrive_and_a_disconnect_ends_the_handler(
    storage: NodeStorage, served: tuple[TestServer, StandInRaft]
) -> None:
    server, _ = served
    append(storage, put(1, b"old", b"1"))
    ticker: HeadTicker = server.app[TICKER]
    streams = server.app[STREAMS]
    async with (
        ClientSession(timeout=ClientTimeout(total=None)) as session,
        session.get(server.make_url("/v1/watch?encoding=utf-8&prefix=n")) as response,
    ):
        assert response.status == 200
        assert response.headers["Content-Type"] == "application/x-ndjson"
        assert response.headers["Rkv-Watch-From"] == "2"
        await asyncio.to_thread(append, storage, put(2, b"new", b"2"), put(3, b"other", b"3"))
        assert await read_line(response.content) == {
            "offset": 2,
            "op": "put",
            "key": "new",
            "value": "2",
            "version": 2,
            "create_version": 2,
        }
        assert await read_line(response.content) == {"keepalive": True, "head": 3}
        assert streams.open == 1
    # the client went away: the handler notices and returns, and the shared poll stops
    await wait_for(lambda: streams.open == 0 and ticker.waiting == 0 and not ticker.polling)


@pytest.mark.asyncio
async def test_a_stalled_node_refuses_a_watch_and_ends_an_open_one(
    storage: NodeStorage, served: tuple[TestServer, StandInRaft]
) -> None:
    server, raft = served
    async with ClientSession() as session:
        async with session.get(server.make_url("/v1/watch")) as response:
            raft.stalled = "missing entries"
            got = await read_line(response.content)
            assert got is not None and got["error"]["code"] == "node_not_ready", got
            assert await read_line(response.content) is None
        async with session.get(server.make_url("/v1/watch")) as response:
            assert response.status == 503
            assert (await response.json())["code"] == "node_not_ready"


@pytest.mark.asyncio
@pytest.mark.parametrize("query", ["from=-1", "from=x", "from=99999999999999999999", "encoding=x"])
async def test_bad_parameters_are_a_json_400(
    served: tuple[TestServer, StandInRaft], query: str
) -> None:
    server, _ = served
    async with (
        ClientSession() as session,
        session.get(server.make_url("/v1/watch?" + query)) as response,
    ):
        assert response.status == 400
        assert response.content_type == "application/json"
        assert (await response.json())["code"] == "invalid_request"


@pytest.mark.asyncio
async def test_server_shutdown_ends_open_watches_at_once(storage: NodeStorage) -> None:
    server = TestServer(build_app(service(storage, StandInRaft(), keepalive=60)))
    await server.start_server()
    try:
        async with ClientSession() as session:
            responses = [
                await session.get(server.make_url(f"/v1/watch?from={i}")) for i in (0, 1, 5)
            ]
            await wait_for(lambda: server.app[STREAMS].open == 3)
            started = time.monotonic()
            await asyncio.wait_for(server.close(), 5)
            assert time.monotonic() - started < 1.5
            for response in responses:
                assert await read_line(response.content) is None  # a clean end of the body
                response.release()
    finally:
        await server.close()


def test_the_keepalive_interval_is_a_node_setting() -> None:
    parser = argparse.ArgumentParser()
    add_node_arguments(parser)
    base = ["--id", "n0", "--data-dir", "/tmp/x", "--raft-listen", "127.0.0.1:9001"]
    env = {"RKV_CLUSTER_SECRET": "s" * 32}
    assert node_config(parser.parse_args(base), env).watch_keepalive == 10.0
    flagged = parser.parse_args([*base, "--watch-keepalive", "0.25"])
    assert node_config(flagged, env).watch_keepalive == 0.25
    from_env = {**env, "RKV_WATCH_KEEPALIVE": "2"}
    assert node_config(parser.parse_args(base), from_env).watch_keepalive == 2.0
    with pytest.raises(ConfigError, match="--watch-keepalive"):
        node_config(parser.parse_args([*base, "--watch-keepalive", "0"]), env)
