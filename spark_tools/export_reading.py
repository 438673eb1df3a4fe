"""Reading export files into comparable items, with node's own readers.

A state item is a key with its version and the SHA-256 of its value; a log
item is a record with the SHA-256 of its value. Both engines read through
these functions (the Spark engine inside its tasks), so they see the same
items and fail on the same damage.
"""

from __future__ import annotations

import bisect
import hashlib
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from node.errors import ReplicationError, SnapshotFormatError
from node.keyspace import MAX_KEY_BYTES
from node.snapshot.format import READ_BUFFER, SnapshotHeader, SnapshotReader
from node.storage.key_order import lmdb_key
from node.storage.log_feed import RecordDecoder
from node.storage.record import RecordOp, max_record_bytes

_KEY_LENGTH = struct.Struct(">I")
_VERSION = struct.Struct(">Q")
FINGERPRINT_BITS = 128
FINGERPRINT_MODULUS = 1 << FINGERPRINT_BITS
_LOG_CHUNK = 1024 * 1024
# The largest record any valid configuration writes (64 MiB values at most).
MAX_LOG_RECORD_BYTES = max_record_bytes(64 * 1024 * 1024, MAX_KEY_BYTES)
PUT = int(RecordOp.PUT)
DELETE = int(RecordOp.DELETE)


class ExportDamaged(Exception):
    """An export file is truncated, damaged or does not match its manifest."""


class StateItem(NamedTuple):
    key: bytes
    sort_key: bytes
    version: int
    value_sha: str


class LogItem(NamedTuple):
    offset: int
    raft_index: int
    op: int
    key: bytes
    sort_key: bytes
    value_sha: str


def sort_key(key: bytes) -> bytes:
    """The order snapshots and buckets use: LMDB's (byte order up to 511 bytes)."""
    return lmdb_key(key)


def bucket_of(key_order: bytes, split_sort_keys: Sequence[bytes]) -> int:
    """The bucket holding a key: bucket i spans ``split[i-1] <= key < split[i]``."""
    return bisect.bisect_right(split_sort_keys, key_order)


def digest_item(key: bytes, version: int, value_sha: bytes) -> bytes:
    """What a bucket digest hashes per key: key length, key, version, SHA-256(value)."""
    return b"".join((_KEY_LENGTH.pack(len(key)), key, _VERSION.pack(version), value_sha))


def fingerprint(key: bytes, version: int, value_sha_hex: str) -> int:
    """An order-free hash of one key's state: buckets are compared by the sum of
    their keys' fingerprints modulo 2**128 (and their counts), which a shuffled
    replay computes as easily as a sorted file."""
    item = digest_item(key, version, bytes.fromhex(value_sha_hex))
    return int.from_bytes(hashlib.sha256(item).digest()[:16], "big")


def add_fingerprints(a: int, b: int) -> int:
    return (a + b) % FINGERPRINT_MODULUS


class StateFile:
    """Reads one bucket file, verifying it as node's reader does, and digests it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.header: SnapshotHeader | None = None
        self.digest = hashlib.sha256()
        self.count = 0

    def items(self) -> Iterator[StateItem]:
        try:
            with open(self.path, "rb", buffering=READ_BUFFER) as f:
                reader = SnapshotReader(f, str(self.path))
                self.header = reader.header
                for record, _frame in reader.records():
                    value_sha = hashlib.sha256(record.value).digest()
                    self.digest.update(digest_item(record.key, record.offset, value_sha))
                    self.count += 1
                    yield StateItem(
                        record.key, sort_key(record.key), record.offset, value_sha.hex()
                    )
        except SnapshotFormatError as exc:
            raise ExportDamaged(str(exc)) from None
        except OSError as exc:
            raise ExportDamaged(f"{self.path}: {exc}") from None


def read_state(path: Path) -> Iterator[StateItem]:
    return StateFile(path).items()


def read_log(path: Path, applied_offset: int) -> Iterator[LogItem]:
    """The records of a log export, checked: CRC-32, ascending offsets, none above the cut."""
    decoder = RecordDecoder(str(path), MAX_LOG_RECORD_BYTES)
    previous = 0
    try:
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(_LOG_CHUNK):
                for record in decoder.feed(chunk):
                    if record.offset <= previous:
                        raise ExportDamaged(
                            f"{path}: offset {record.offset} follows offset {previous}"
                        )
                    if record.offset > applied_offset:
                        raise ExportDamaged(
                            f"{path}: offset {record.offset} is beyond the cut's {applied_offset}"
                        )
                    previous = record.offset
                    yield LogItem(
                        record.offset,
                        record.raft_index,
                        int(record.op),
                        record.key,
                        sort_key(record.key),
                        hashlib.sha256(record.value).hexdigest(),
                    )
            decoder.finish()
    except ReplicationError as exc:
        raise ExportDamaged(str(exc)) from None
    except OSError as exc:
        raise ExportDamaged(f"{path}: {exc}") from None
