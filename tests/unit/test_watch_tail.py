"""ChangeTail (http_api/watch_tail.py): the newest changes read once for every watch,
over a log held in memory (the node's real log is exercised by tests/cluster)."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from http_api import watch_tail
from http_api.watch_tail import ChangeTail
from node.service.types import Record, RecordOp


class Log:
    """What ChangeTail calls of the service: changes(), over records kept here."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.reads = 0

    def add(self, key: bytes, value: bytes = b"v") -> int:
        offset = len(self.records) + 1
        self.records.append(Record(offset, offset, 0, RecordOp.PUT, key, value, offset))
        return offset

    def changes(
        self, prefix: bytes, start: int, end: int, *, max_records: int, max_bytes: int
    ) -> tuple[list[Record], int]:
        self.reads += 1
        out: list[Record] = []
        size = 0
        for scanned, record in enumerate(r for r in self.records if start <= r.offset <= end):
            if record.key.startswith(prefix):
                out.append(record)
                size += len(record.key) + len(record.value)
            if scanned + 1 >= max_records or size >= max_bytes:
                return out, record.offset + 1
        return out, end + 1


def line(record: Record, encoding: str) -> bytes:
    return f"{encoding}:{record.key.decode()}@{record.offset}\n".encode()


class Request:
    """in_thread's view of a request: no fair share in this app."""

    app: ClassVar[dict[Any, Any]] = {}
    remote = "127.0.0.1"


def _batch(tail: ChangeTail, prefix: bytes, position: int, head: int) -> tuple[bytes, int] | None:
    return asyncio.run(
        tail.batch(
            Request(),  # type: ignore[arg-type]
            prefix,
            position,
            head,
            encoding="utf-8",
            max_records=1000,
            max_bytes=1 << 20,
        )
    )


def test_many_watches_share_one_read_and_see_their_prefix_only() -> None:
    log = Log()
    for i in range(10):
        log.add(b"a/%d" % i if i % 2 else b"b/%d" % i)
    tail = ChangeTail(log, line)  # type: ignore[arg-type]
    first = _batch(tail, b"a/", 1, 10)
    assert first is not None
    chunk, position = first
    assert position == 11
    assert chunk.decode().splitlines() == [f"utf-8:a/{i}@{i + 1}" for i in range(1, 10, 2)]
    reads = log.reads
    for _ in range(50):  # every other watch at the same position: no more reads
        assert _batch(tail, b"b/", 1, 10) is not None
    assert log.reads == reads


def test_a_watch_older_than_the_tail_reads_the_log_itself(monkeypatch: Any) -> None:
    monkeypatch.setattr(watch_tail, "TAIL_BYTES", 100)
    log = Log()
    for i in range(40):
        log.add(b"k/%02d" % i, b"x" * 10)  # 14 bytes each: the tail keeps about 7
    tail = ChangeTail(log, line)  # type: ignore[arg-type]
    # The read brought 40 records; the tail kept the newest: offset 1 is older.
    assert _batch(tail, b"k/", 1, 40) is None
    recent = _batch(tail, b"k/", 38, 40)
    assert recent is not None
    assert recent[0].decode().splitlines() == ["utf-8:k/37@38", "utf-8:k/38@39", "utf-8:k/39@40"]


def test_the_tail_follows_the_head_and_a_batch_stops_at_its_bounds() -> None:
    log = Log()
    tail = ChangeTail(log, line)  # type: ignore[arg-type]
    assert _batch(tail, b"", 1, 0) == (b"", 1)
    for i in range(5):
        log.add(b"k%d" % i)
    chunk, position = _batch(tail, b"", 1, 3) or (b"", 0)
    assert (len(chunk.splitlines()), position) == (3, 4)
    chunk, position = _batch(tail, b"", 4, 5) or (b"", 0)
    assert (chunk.decode().splitlines(), position) == (["utf-8:k3@4", "utf-8:k4@5"], 6)
    limited = asyncio.run(
        tail.batch(
            Request(),  # type: ignore[arg-type]
            b"",
            1,
            5,
            encoding="base64",
            max_records=2,
            max_bytes=1 << 20,
        )
    )
    assert limited == (b"base64:k0@1\nbase64:k1@2\n", 3)
