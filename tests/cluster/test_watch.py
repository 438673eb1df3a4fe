"""GET /v1/watch, the change feed, against real node processes.

One 3-node cluster serves every test here (the SIGTERM test runs last and stops
one node). Before it starts, every node's data directory is seeded with the
same few records, as internal state will be: puts and a delete under the
reserved prefix \\x00rkv/ plus one user key, at offsets 1..4 (raft index 0,
so the cluster's own entries follow them identically on every replica). The
state machine refuses reserved keys from clients, so seeding is the only way
to have them in the log today.
"""

from __future__ import annotations

import base64
import json
import signal
import time
import urllib.parse
from collections.abc import Iterator
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest

from node.keyspace import RESERVED_PREFIX
from node.storage.config import StorageConfig
from node.storage.record import Record, RecordOp
from node.storage.recovery import open_storage
from tests.support.cluster import LocalCluster, NodeProcess, http, wait_until

KEEPALIVE = 0.5
SEEDED = [
    Record(1, 0, 0, RecordOp.PUT, RESERVED_PREFIX + b"session/a", b"internal", 1),
    Record(2, 0, 0, RecordOp.PUT, RESERVED_PREFIX + b"session/b", b"internal", 2),
    Record(3, 0, 0, RecordOp.DELETE, RESERVED_PREFIX + b"session/b"),
    Record(4, 0, 0, RecordOp.PUT, b"seed/user", b"seeded", 4),
]


def seed(data_dir: Path) -> None:
    storage = open_storage(data_dir, StorageConfig())
    try:
        storage.commit_log.append(SEEDED)
        storage.store.apply_records(SEEDED, applied_index=0)
        storage.sync()
    finally:
        storage.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = LocalCluster(
        tmp_path_factory.mktemp("watch") / "cluster",
        extra_args=["--watch-keepalive", str(KEEPALIVE)],
    )
    try:
        for node in running.nodes:
            seed(node.data_dir)
        running.start()
        yield running
    finally:
        running.stop()


class Watch:
    """One /v1/watch stream read line by line (http.client, with a socket timeout)."""

    def __init__(self, node: NodeProcess, query: str = "", timeout: float = 5.0) -> None:
        self.connection = HTTPConnection("127.0.0.1", node.http_port, timeout=timeout)
        self.connection.request("GET", "/v1/watch" + (f"?{query}" if query else ""))
        self.response = self.connection.getresponse()
        assert self.response.status == 200, self.response.read()
        assert self.response.getheader("Content-Type") == "application/x-ndjson"
        self.start = int(self.response.getheader("Rkv-Watch-From") or 0)
        self.keepalives: list[int] = []

    def line(self) -> dict[str, Any] | None:
        """The next line, or None at the (clean) end of the stream."""
        raw = self.response.readline()
        if not raw:
            return None
        assert raw.endswith(b"\n"), raw
        parsed: dict[str, Any] = json.loads(raw)
        return parsed

    def changes_through(self, offset: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Change lines until a keep-alive says every change up to ``offset`` was sent."""
        deadline = time.monotonic() + timeout
        changes: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            line = self.line()
            assert line is not None, "the stream ended"
            assert "error" not in line, line
            if line.get("keepalive"):
                self.keepalives.append(line["head"])
                if line["head"] >= offset:
                    return changes
            else:
                changes.append(line)
        raise TimeoutError(f"no keep-alive past {offset} after {timeout}s; got {changes}")

    def close(self) -> None:
        self.connection.close()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def path(key: bytes) -> str:
    return "/v1/kv/" + urllib.parse.quote(key, safe="")


def put(node: NodeProcess, key: bytes, value: bytes) -> int:
    response = http("PUT", node.url + path(key), body=value)
    assert response.status == 200, (node.node_id, response.body)
    version: int = response.json()["version"]
    return version


def delete(node: NodeProcess, key: bytes) -> int:
    response = http("DELETE", node.url + path(key))
    assert response.status == 200, (node.node_id, response.body)
    version: int = response.json()["version"]
    return version


def applied(node: NodeProcess, offset: int) -> None:
    wait_until(lambda: (node.status() or {}).get("applied_offset", 0) >= offset, 15, node.node_id)


def put_line(offset: int, key: bytes, value: bytes) -> tuple[int, str, str, str | None]:
    return offset, "put", b64(key), b64(value)


def delete_line(offset: int, key: bytes) -> tuple[int, str, str, str | None]:
    return offset, "delete", b64(key), None


def seen(changes: list[dict[str, Any]]) -> list[tuple[int, str, str, str | None]]:
    for change in changes:
        assert change["version"] == change["offset"], change
    return [(c["offset"], c["op"], c["key"], c.get("value")) for c in changes]


def test_watchers_from_the_next_offset_get_exactly_the_later_changes(
    cluster: LocalCluster,
) -> None:
    leader = cluster.leader()
    follower_a, follower_b = cluster.followers()
    before = put(leader, b"w1/before", b"old")
    for node in cluster.nodes:
        applied(node, before)
    everything = Watch(follower_a)  # default from: the next offset
    assert everything.start == before + 1, everything.start
    in_prefix = Watch(leader, f"prefix=w1%2F&from={before + 1}")
    as_text = Watch(follower_b, "prefix=w1%2F&encoding=utf-8")
    try:
        expected: list[tuple[int, str, str, str | None]] = []
        writes = [
            (leader, b"w1/a", b"1"),
            (follower_a, b"w1/b", b"2"),
            (follower_b, b"other/x", b"3"),
            (follower_b, b"w1/a", b"4"),
            (leader, b"w1/\xff", b"\xfe\x00"),  # not UTF-8
            (follower_a, b"w1/b", None),
            (leader, b"w1-not-prefix", b"5"),
        ]
        for node, key, value in writes:
            if value is None:
                expected.append(delete_line(delete(node, key), key))
            else:
                expected.append(put_line(put(node, key, value), key, value))
        last = expected[-1][0]
        assert [e[0] for e in expected] == sorted(e[0] for e in expected)
        w1 = [e for e in expected if base64.b64decode(e[2]).startswith(b"w1/")]

        assert seen(everything.changes_through(last)) == expected
        assert seen(in_prefix.changes_through(last)) == w1
        text = as_text.changes_through(last)
        assert [c["offset"] for c in text] == [e[0] for e in w1]
        assert text[0] == {
            "offset": w1[0][0],
            "op": "put",
            "key": "w1/a",
            "value": "1",
            "version": w1[0][0],
            "create_version": w1[0][0],
        }
        odd = next(c for c in text if c.get("encoding") == "base64")
        assert base64.b64decode(odd["key"]) == b"w1/\xff"
        assert base64.b64decode(odd["value"]) == b"\xfe\x00"
        assert [c for c in text if "encoding" in c] == [odd]
        assert text[-1] == {
            "offset": w1[-1][0],
            "op": "delete",
            "key": "w1/b",
            "version": w1[-1][0],
        }
    finally:
        for watch in (everything, in_prefix, as_text):
            watch.close()


def test_a_watcher_from_the_start_replays_the_log_without_reserved_keys(
    cluster: LocalCluster,
) -> None:
    leader = cluster.leader()
    expected = [
        put_line(put(leader, b"r2/k", b"v1"), b"r2/k", b"v1"),
        put_line(put(leader, b"r2/j", b"v2"), b"r2/j", b"v2"),
        put_line(put(leader, b"r2/k", b"v3"), b"r2/k", b"v3"),
    ]
    expected.append(delete_line(delete(leader, b"r2/j"), b"r2/j"))
    last = expected[-1][0]
    node = cluster.followers()[0]
    applied(node, last)
    for start in (0, 1):
        replay = Watch(node, f"prefix=r2%2F&from={start}")
        try:
            assert seen(replay.changes_through(last)) == expected
        finally:
            replay.close()
    whole = Watch(node, "from=1")
    try:
        changes = whole.changes_through(last)
    finally:
        whole.close()
    offsets = [c["offset"] for c in changes]
    assert offsets == sorted(set(offsets))
    assert changes[0] == {
        "offset": 4,
        "op": "put",
        "key": b64(b"seed/user"),
        "value": b64(b"seeded"),
        "version": 4,
        "create_version": 4,
    }
    assert not [c for c in changes if base64.b64decode(c["key"]).startswith(RESERVED_PREFIX)]
    # asking for the reserved prefix itself shows nothing either
    reserved = Watch(node, "from=1&prefix=" + urllib.parse.quote(RESERVED_PREFIX, safe=""))
    try:
        assert reserved.changes_through(last) == []
    finally:
        reserved.close()


def test_after_compaction_a_replay_gets_each_live_key_once_then_the_tail(
    cluster: LocalCluster,
) -> None:
    leader = cluster.leader()
    latest: dict[bytes, tuple[int, bytes]] = {}
    for round_ in range(5):
        for k in range(8):
            key, value = b"c3/%d" % k, b"round-%d" % round_
            latest[key] = (put(leader, key, value), value)
    gone = delete(leader, b"c3/0")
    del latest[b"c3/0"]
    node = cluster.followers()[1]
    applied(node, gone)
    compacted = http("POST", node.url + "/v1/admin/compact")
    assert compacted.status == 200, compacted.body
    assert compacted.json()["records_dropped"] > 0, compacted.json()
    tail = [
        put_line(put(leader, b"c3/1", b"after"), b"c3/1", b"after"),
        put_line(put(leader, b"c3/new", b"after"), b"c3/new", b"after"),
    ]
    applied(node, tail[-1][0])
    replay = Watch(node, "prefix=c3%2F&from=1")
    try:
        changes = seen(replay.changes_through(tail[-1][0]))
    finally:
        replay.close()
    assert changes[-2:] == tail
    compacted_part = changes[:-2]
    assert [c[0] for c in compacted_part] == sorted(c[0] for c in compacted_part)
    puts = [c for c in compacted_part if c[1] == "put"]
    assert sorted(puts) == sorted(
        put_line(offset, key, value) for key, (offset, value) in latest.items()
    )
    # the delete is still inside the tombstone retention window, so it stays
    assert [c for c in compacted_part if c[1] == "delete"] == [delete_line(gone, b"c3/0")]


def test_keepalives_arrive_while_idle(cluster: LocalCluster) -> None:
    node = cluster.nodes[0]
    idle = Watch(node, "prefix=nothing-here%2F", timeout=3 * KEEPALIVE + 2)
    try:
        head = int(idle.response.getheader("Rkv-Head-Offset") or 0)
        started = time.monotonic()
        lines = [idle.line() for _ in range(3)]
        elapsed = time.monotonic() - started
    finally:
        idle.close()
    assert all(line is not None and line["keepalive"] is True for line in lines), lines
    heads = [line["head"] for line in lines if line is not None]
    assert heads == sorted(heads) and heads[0] >= head, (heads, head)
    assert elapsed >= 2 * KEEPALIVE, elapsed  # not a flood: one per interval at most


def test_sigterm_ends_open_streams_and_the_node_exits_promptly(cluster: LocalCluster) -> None:
    """Runs last: it stops one node (the other two keep a majority)."""
    node = cluster.nodes[2]
    last = put(cluster.leader(), b"x/last", b"1")
    applied(node, last)
    watches = [Watch(node), Watch(node, "from=1"), Watch(node, "prefix=x%2F&encoding=utf-8")]
    try:
        assert watches[0].line() == {"keepalive": True, "head": last}
        assert node.proc is not None
        started = time.monotonic()
        node.proc.send_signal(signal.SIGTERM)
        for watch in watches:
            # None only at the chunked body's proper end; a torn stream or a silent one raises
            while (line := watch.line()) is not None:
                assert "error" not in line, line
        ended = time.monotonic() - started
        code = node.proc.wait(timeout=10)
        exited = time.monotonic() - started
    finally:
        for watch in watches:
            watch.close()
    assert code == 0, cluster.logs()
    assert ended < 2.0 and exited < 3.0, (ended, exited)
