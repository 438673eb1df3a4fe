"""The newest changes, read from the log once for every watch.

Each open watch used to read the log itself whenever the applied offset moved:
with hundreds of watches on a busy node, every write was read from a segment
and encoded hundreds of times, and the loop had no time left for anything else
(issue 15's watch flood). :class:`ChangeTail` keeps the newest user records in
memory, at most ``TAIL_BYTES`` of keys and values: the first watch that needs
records beyond it reads them, once, for all; each watch then takes the records
of its prefix from memory, and each record's NDJSON line is encoded once per
encoding. A watch whose position is older than the tail (a replay from an old
offset, or one that fell behind) reads the log itself, as before, until it
reaches the tail.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable

from aiohttp import web

from http_api.fair_share import in_thread
from http_api.kv_api import KvApi
from node.service.types import Record

TAIL_BYTES = 4 * 1024 * 1024
"""Keys and values the tail keeps (its memory bound, with the encoded lines: at
most about 3x this, for base64 and utf-8 lines of every record)."""
READ_RECORDS = 1000
READ_BYTES = 1024 * 1024


class _Entry:
    __slots__ = ("lines", "record")

    def __init__(self, record: Record) -> None:
        self.record = record
        self.lines: dict[str, bytes] = {}


class ChangeTail:
    """The newest user records (all prefixes): every record with an offset in
    [start, end) is here (the log's offsets between them hold other records)."""

    def __init__(self, kv: KvApi, line: Callable[[Record, str], bytes]) -> None:
        self._kv = kv
        self._line = line
        self._entries: list[_Entry] = []
        self._offsets: list[int] = []
        self._bytes = 0
        self._start = 0
        self._end = 0
        self._lock = asyncio.Lock()

    async def batch(
        self,
        request: web.Request,
        prefix: bytes,
        position: int,
        head: int,
        *,
        encoding: str,
        max_records: int,
        max_bytes: int,
    ) -> tuple[bytes, int] | None:
        """The lines of ``prefix``'s changes from ``position`` up to ``head`` (at most
        ``max_records`` records or about ``max_bytes``) and the position to go on from;
        None when ``position`` is older than the tail (read the log instead)."""
        async with self._lock:
            if position > self._end:
                self._reset(position)  # the first watch, or none for a while
            if position < self._start:
                return None
            if self._end <= head:
                start = self._end
                records, end = await in_thread(
                    request,
                    lambda: self._kv.changes(
                        b"", start, head, max_records=READ_RECORDS, max_bytes=READ_BYTES
                    ),
                    shared_pool=True,
                )
                self._append(records, end)
            if position < self._start:  # the read pushed the window past it
                return None
            end = min(head + 1, self._end)
            return self._take(
                prefix,
                position,
                end,
                encoding=encoding,
                max_records=max_records,
                max_bytes=max_bytes,
            )

    def _reset(self, position: int) -> None:
        self._entries.clear()
        self._offsets.clear()
        self._bytes = 0
        self._start = self._end = position

    def _append(self, records: list[Record], end: int) -> None:
        for record in records:
            self._entries.append(_Entry(record))
            self._offsets.append(record.offset)
            self._bytes += len(record.key) + len(record.value)
        self._end = end
        dropped = 0
        while self._bytes > TAIL_BYTES and dropped < len(self._entries) - 1:
            record = self._entries[dropped].record
            self._bytes -= len(record.key) + len(record.value)
            dropped += 1
        if dropped:
            self._start = self._entries[dropped - 1].record.offset + 1
            del self._entries[:dropped]
            del self._offsets[:dropped]

    def _take(
        self,
        prefix: bytes,
        position: int,
        end: int,
        *,
        encoding: str,
        max_records: int,
        max_bytes: int,
    ) -> tuple[bytes, int]:
        lines: list[bytes] = []
        size = 0
        first = bisect.bisect_left(self._offsets, position)
        for scanned, entry in enumerate(self._entries[first:], 1):
            record = entry.record
            if record.offset >= end:
                break
            if record.key.startswith(prefix):
                line = entry.lines.get(encoding)
                if line is None:
                    line = entry.lines[encoding] = self._line(record, encoding)
                lines.append(line)
                size += len(line)
            if scanned >= max_records or size >= max_bytes:
                return b"".join(lines), record.offset + 1
        return b"".join(lines), end
