"""Reading the commit log for others: pull replication, catch-up, change feeds.

The wire form of a record is exactly its commit-log framing
(:func:`node.storage.record.encode_record`: length, CRC-32, fields), so a puller
verifies every record's checksum just as segment reads do. Compacted
segments are included: a range that compaction thinned returns the records
that remain (the latest value of each key), offsets unchanged, and an offset
that was removed reads as the next greater one.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterator

from node.errors import ReplicationError
from node.storage.commit_log import CommitLog
from node.storage.record import BODY_HEADER, PREFIX, Record, decode_body, encode_record

LOG_CONTENT_TYPE = "application/x-rkv-log"


def encoded_records(
    log: CommitLog, from_offset: int, to_offset: int | None = None, limit: int | None = None
) -> Iterator[bytes]:
    """Framed records with ``from_offset <= offset <= to_offset``, at most ``limit``."""
    records: Iterator[Record] = log.read(from_offset)
    if limit is not None:
        records = itertools.islice(records, limit)
    for record in records:
        if to_offset is not None and record.offset > to_offset:
            return
        yield encode_record(record)


class RecordDecoder:
    """Splits a byte stream of framed records back into records, checking each CRC."""

    def __init__(self, source: str, max_record_bytes: int) -> None:
        self._buffer = bytearray()
        self._source = source
        self._max = max_record_bytes
        self._consumed = 0

    def feed(self, data: bytes) -> list[Record]:
        self._buffer += data
        records: list[Record] = []
        start = 0
        buffer = self._buffer
        while len(buffer) - start >= PREFIX.size:
            length, crc = PREFIX.unpack_from(buffer, start)
            if not BODY_HEADER.size <= length <= self._max:
                self._fail(start, f"impossible record length {length}")
            end = start + PREFIX.size + length
            if end > len(buffer):
                break
            body = bytes(buffer[start + PREFIX.size : end])
            if zlib.crc32(body) != crc:
                self._fail(start, "checksum mismatch")
            try:
                records.append(decode_body(body))
            except ValueError as exc:
                self._fail(start, str(exc))
            start = end
        del buffer[:start]
        self._consumed += start
        return records

    def finish(self) -> None:
        if self._buffer:
            self._fail(0, "the stream ended inside a record")

    def _fail(self, start: int, reason: str) -> None:
        raise ReplicationError(
            f"the log stream from {self._source} is damaged at byte {self._consumed + start}: "
            f"{reason}"
        )
