"""The log check's data: each log as (offset, record identity) pairs, shared by
both engines.

A record's identity is 64 bits of a SHA-256 over what must agree between
replicas at one offset (raft index, op, key, value SHA-256); two different
records share it with probability 2**-64. A log's pairs are packed in offset
order, 16 bytes each, while phase one reads it, with a digest of the packing:
logs whose digests are equal hold the same records at the same offsets and
need no further comparison (the usual case: no compaction ran, or the same).
Otherwise the pairs are merged by offset (the Python engine here, the Spark
engine by grouping them in a DataFrame).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from pathlib import Path

from spark_tools.export_reading import LogItem, read_log
from spark_tools.export_scan import LogScanTask
from spark_tools.findings import LogAgreement

PAIR = struct.Struct(">Qq")
_IDENTITY_HEADER = struct.Struct(">QBI")


def record_identity(item: LogItem) -> int:
    """A signed 64-bit hash of a record's raft index, op, key and value."""
    head = _IDENTITY_HEADER.pack(item.raft_index, item.op, len(item.key))
    digest = hashlib.sha256(head + item.key + bytes.fromhex(item.value_sha)).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class IdentityLog:
    """A log's (offset, identity) pairs, packed as it is read."""

    def __init__(self) -> None:
        self.pairs = bytearray()

    def add(self, item: LogItem) -> None:
        self.pairs += PAIR.pack(item.offset, record_identity(item))

    def digest(self) -> str:
        return hashlib.sha256(self.pairs).hexdigest()


def unpack(pairs: bytes) -> Iterator[tuple[int, int]]:
    return PAIR.iter_unpack(pairs)


def agree_by_digest(
    replicas: list[int], digests: dict[int, str], records: dict[int, int]
) -> LogAgreement | None:
    """The agreement of logs whose packed pairs are identical (every offset held by
    all of them, the same record at each); None when the digests differ."""
    if len({digests[r] for r in replicas}) != 1:
        return None
    compared = records[replicas[0]] if len(replicas) >= 2 else 0
    return LogAgreement(replicas=replicas, offsets_compared=compared)


def merge_pairs(replicas: list[int], pairs: dict[int, bytes]) -> LogAgreement:
    """The logs compared offset by offset, from their packed pairs (first_records
    not filled: see :func:`records_at`)."""
    agreement = LogAgreement(replicas=replicas)
    readers = [unpack(pairs[r]) for r in replicas]
    heads = [next(reader, None) for reader in readers]
    while True:
        present = [h[0] for h in heads if h is not None]
        if not present:
            break
        offset = min(present)
        identities = set()
        holders = 0
        for i, h in enumerate(heads):
            if h is not None and h[0] == offset:
                identities.add(h[1])
                holders += 1
                heads[i] = next(readers[i], None)
        if holders >= 2:
            agreement.offsets_compared += 1
            if len(identities) > 1:
                agreement.divergent_offsets += 1
                if agreement.first_offset is None:
                    agreement.first_offset = offset
    return agreement


def record_at(task: LogScanTask, offset: int) -> LogItem | None:
    """The log's record at ``offset``, if it holds one."""
    for item in read_log(Path(task.path), task.applied_offset):
        if item.offset >= offset:
            return item if item.offset == offset else None
    return None
