"""Builds audit exports (the node's `audit snapshot` output) from Python values.

The bytes are node's own: bucket files through node.snapshot.export.write_snapshot
(fed by a dict-backed stand-in for an LMDB read view), log records through
node.storage.record.encode_record. The manifest's digests are computed here,
independently of spark_tools, from the format's definition.

    state = {b"k1": (3, b"v")}                       # key -> (version, value)
    log = [put(3, b"k1", b"v")]                      # records up to the cut
    write_export(root / "a1" / "n1", "a1", "n1", state, log, raft_index=9, applied_offset=3)
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

from node.snapshot.export import write_snapshot
from node.storage.key_order import lmdb_key
from node.storage.lmdb_store import ReadView, StoredValue
from node.storage.record import Record, RecordOp, encode_record

State = dict[bytes, tuple[int, bytes]]
"""key -> (version, value); the create version is taken equal to the version
unless given as a third element through ``create_versions``."""

CREATED_MS = 1_700_000_000_000


def put(offset: int, key: bytes, value: bytes, raft_index: int | None = None) -> Record:
    return Record(
        offset,
        offset if raft_index is None else raft_index,
        CREATED_MS,
        RecordOp.PUT,
        key,
        value,
        offset,
    )


def delete(offset: int, key: bytes, raft_index: int | None = None) -> Record:
    return Record(
        offset, offset if raft_index is None else raft_index, CREATED_MS, RecordOp.DELETE, key
    )


def replay(log: Sequence[Record]) -> State:
    """The state a log produces: each key's last record, deletes removing it."""
    state: State = {}
    for record in log:
        if record.op is RecordOp.PUT:
            state[record.key] = (record.offset, record.value)
        else:
            state.pop(record.key, None)
    return state


def history(writes: Sequence[tuple[bytes, bytes | None]]) -> list[Record]:
    """A log from writes (value None: delete), one record per offset from 1."""
    return [
        put(offset, key, value) if value is not None else delete(offset, key)
        for offset, (key, value) in enumerate(writes, 1)
    ]


class _DictView:
    """What write_snapshot reads from an LMDB read view, served from a sorted list."""

    def __init__(
        self, items: list[tuple[bytes, StoredValue]], raft_index: int, applied_offset: int
    ) -> None:
        self._items = items
        self._applied = (raft_index, applied_offset)

    def applied(self) -> tuple[int, int]:
        return self._applied

    def count(self, include_internal: bool = False) -> int:
        return len(self._items)

    def all_items(
        self,
        chunk_items: int = 1000,
        chunk_bytes: int = 4 * 1024 * 1024,
        *,
        after: bytes | None = None,
    ) -> Iterator[list[tuple[bytes, StoredValue]]]:
        items = self._items
        if after is not None:
            items = [item for item in items if lmdb_key(item[0]) > lmdb_key(after)]
        for start in range(0, len(items), chunk_items):
            yield items[start : start + chunk_items]


def bucket_index(key: bytes, split_points: Sequence[bytes]) -> int:
    """Bucket i holds split[i-1] <= key < split[i] (LMDB order)."""
    order = lmdb_key(key)
    return sum(1 for s in split_points if lmdb_key(s) <= order)


def bucket_digest(items: Sequence[tuple[bytes, StoredValue]]) -> str:
    digest = hashlib.sha256()
    for key, stored in items:
        digest.update(struct.pack(">I", len(key)) + key)
        digest.update(struct.pack(">Q", stored.version))
        digest.update(hashlib.sha256(stored.value).digest())
    return digest.hexdigest()


def even_splits(keys: Sequence[bytes], buckets: int) -> list[bytes]:
    """Split points giving ``buckets`` buckets of about equal key counts."""
    ordered = sorted(set(keys), key=lmdb_key)
    if buckets <= 1 or not ordered:
        return []
    step = len(ordered) / buckets
    return [ordered[int(step * i)] for i in range(1, buckets)]


def write_export(
    directory: Path,
    audit_id: str,
    replica: str,
    state: State,
    log: Sequence[Record] | None,
    *,
    raft_index: int,
    applied_offset: int,
    split_points: Sequence[bytes] = (),
    manifest: bool = True,
    manifest_changes: dict[str, Any] | None = None,
) -> Path:
    """Write one replica's export into ``directory``; returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    buckets: list[list[tuple[bytes, StoredValue]]] = [[] for _ in range(len(split_points) + 1)]
    for key in sorted(state, key=lmdb_key):
        version, value = state[key]
        buckets[bucket_index(key, split_points)].append((key, StoredValue(version, version, value)))
    files = []
    for i, items in enumerate(buckets):
        name = f"bucket-{i:05d}.rkvsnap"
        with open(directory / name, "wb") as f:
            write_snapshot(
                cast(ReadView, _DictView(items, raft_index, applied_offset)),
                f,
                created_at_ms=CREATED_MS,
            )
        files.append(name)
    if log is not None:
        with open(directory / "log.rkvlog", "wb") as f:
            for record in log:
                f.write(encode_record(record))
    if manifest:
        document: dict[str, Any] = {
            "format": 1,
            "audit_id": audit_id,
            "replica": replica,
            "raft_index": raft_index,
            "applied_offset": applied_offset,
            "key_count": len(state),
            "buckets": len(buckets),
            "split_points": [base64.b64encode(s).decode("ascii") for s in split_points],
            "bucket_counts": [len(items) for items in buckets],
            "bucket_digests": [bucket_digest(items) for items in buckets],
            "files": {"state": files, "log": "log.rkvlog" if log is not None else None},
            "log_records": None if log is None else len(log),
            "created_ms": CREATED_MS,
            "seconds": 0.01,
        }
        document.update(manifest_changes or {})
        (directory / "manifest.json").write_text(json.dumps(document, indent=2))
    return directory
