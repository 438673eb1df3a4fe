"""The consistency audit's cut and export (node/audit/export.py, node/audit/jobs.py):
the command's codec, the files and manifest written from the cut (digests, split
points and the log's replay recomputed here, independently of the writer), and
that writes go on while an export runs.

tests/cluster/test_audit_snapshot.py covers it across real node processes.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

import node.audit.export as audit_export
import node.audit.jobs as audit_jobs
from node.audit.export import (
    ERROR_NAME,
    LOG_NAME,
    MANIFEST_NAME,
    bucket_name,
    choose_split_points,
    export_directory,
)
from node.audit.jobs import DONE, FAILED, RUNNING, AuditExporter, AuditStatus
from node.cli.settings import add_node_arguments, node_config
from node.errors import EntryDecodeError, KeyNotFound
from node.keyspace import RESERVED_PREFIX
from node.snapshot.file import SnapshotReader, verify_snapshot, write_snapshot
from node.state.commands import (
    FORMAT_VERSION,
    MAX_AUDIT_BUCKETS,
    MAX_SPLIT_POINT_BYTES,
    TAG_AUDIT_CUT,
    AuditCut,
    Barrier,
    Batch,
    Command,
    Delete,
    Put,
    decode_entry,
    encode_entry,
)
from node.state.lease_commands import LeasedPut, LeaseGrant, Lock
from node.state.leases import LEASES_PREFIX, lease_id_of, lease_key, lock_key
from node.state.results import ResultCode
from node.storage import key_order
from node.storage.config import StorageConfig
from node.storage.lmdb_store import DetachedView
from node.storage.log_feed import RecordDecoder, encoded_records
from node.storage.record import Record, RecordOp
from node.storage.recovery import NodeStorage, open_storage
from tests.support.state import machine_of

INTERNAL_KEY = RESERVED_PREFIX + b"checkpoints/test"
LONG_PREFIX = b"L" * 600  # long keys sharing more than 495 bytes: LMDB orders them by digest

State = dict[bytes, tuple[int, int, bytes]]  # key -> (version, create version, value)


# -- the command ----------------------------------------------------------------------


def test_audit_snapshot_round_trips_among_other_commands() -> None:
    splits = (b"\x00rkv/z", b"a", b"m" * MAX_SPLIT_POINT_BYTES, b"\xff")
    commands: tuple[Command, ...] = (
        Put(b"k", b"v"),
        AuditCut("audit-1.x_Y", splits),
        AuditCut("a", ()),
        Barrier(),
    )
    batch = Batch(commands, 42)
    decoded = decode_entry(encode_entry(batch))
    assert decoded == batch
    assert [type(c) for c in decoded.commands] == [type(c) for c in commands]
    audit = decoded.commands[1]
    assert isinstance(audit, AuditCut) and audit.split_points == splits


def test_the_wire_form_is_documented_tag_12() -> None:
    raw = msgpack.unpackb(encode_entry(Batch((AuditCut("x", (b"a", b"b")),), 1))[1:], raw=False)
    assert TAG_AUDIT_CUT == 12
    assert raw == [1, [[12, "x", [b"a", b"b"]]]]


BAD_AUDITS = [
    AuditCut("", ()),
    AuditCut(".", ()),
    AuditCut("..", ()),
    AuditCut("a/b", ()),
    AuditCut("x" * 65, ()),
    AuditCut("sp ace", ()),
    AuditCut("ok", (b"b", b"a")),  # not ascending
    AuditCut("ok", (b"a", b"a")),  # not strictly
    AuditCut("ok", (b"",)),
    AuditCut("ok", (b"x" * (MAX_SPLIT_POINT_BYTES + 1),)),
    AuditCut("ok", tuple(b"%05d" % i for i in range(MAX_AUDIT_BUCKETS))),
    AuditCut("ok", ("text",)),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("command", BAD_AUDITS)
def test_a_malformed_audit_is_not_encoded(command: AuditCut) -> None:
    with pytest.raises(ValueError, match="audit snapshot"):
        encode_entry(Batch((command,)))


def entry_of(*raw_commands: Any) -> bytes:
    packed: bytes = msgpack.packb([7, list(raw_commands)], use_bin_type=True)
    return bytes((FORMAT_VERSION,)) + packed


@pytest.mark.parametrize(
    "raw",
    [
        [TAG_AUDIT_CUT, "ok"],  # a field missing
        [TAG_AUDIT_CUT, "ok", [], 1],  # one too many
        [TAG_AUDIT_CUT, 5, []],
        [TAG_AUDIT_CUT, "..", []],
        [TAG_AUDIT_CUT, "ok", b"ab"],
        [TAG_AUDIT_CUT, "ok", ["text"]],
        [TAG_AUDIT_CUT, "ok", [b"b", b"a"]],
        [TAG_AUDIT_CUT, "ok", [b"x" * (MAX_SPLIT_POINT_BYTES + 1)]],
    ],
)
def test_a_malformed_audit_is_refused_when_decoding(raw: list[Any]) -> None:
    with pytest.raises(EntryDecodeError):
        decode_entry(entry_of(raw))


def test_split_points_fit_lmdbs_long_key_prefix() -> None:
    assert MAX_SPLIT_POINT_BYTES == key_order.LONG_KEY_PREFIX


# -- a store to export ---------------------------------------------------------------


def apply(storage: NodeStorage, *commands: Command) -> int:
    """Apply one entry; its raft index."""
    index = storage.store.applied_index + 1
    results = machine_of(storage).apply(index, encode_entry(Batch(commands, 1_000 + index)))
    assert all(r.code is ResultCode.OK for r in results), results
    return index


def add_internal(storage: NodeStorage, key: bytes, value: bytes) -> None:
    offset = storage.commit_log.next_offset
    index = storage.store.applied_index + 1
    record = Record(offset, index, 5, RecordOp.PUT, key, value, offset)
    storage.commit_log.append([record])
    storage.store.apply_records([record], index)


def fill(storage: NodeStorage) -> None:
    apply(storage, *(Put(b"k%04d" % i, b"v%d" % i) for i in range(300)))
    apply(storage, *(Put(b"k%04d" % i, b"second %d" % i) for i in range(0, 300, 7)))
    apply(storage, *(Put(LONG_PREFIX + b"%02d" % i, b"long %d" % i) for i in range(6)))
    apply(storage, Put(b"\x00\xff binary", b""), Put(b"\xff\xfe", b"last"))
    add_internal(storage, INTERNAL_KEY, b"internal state")
    apply(storage, Delete(b"k0003"), Delete(b"k0010"), Put(b"k0001", b"third"))


def state_of(storage: NodeStorage) -> tuple[tuple[int, int], State]:
    with storage.store.reader() as view:
        state = {
            key: (stored.version, stored.create_version, stored.value)
            for chunk in view.all_items(chunk_items=13)
            for key, stored in chunk
        }
        return view.applied(), state


@pytest.fixture
def exporter(tmp_path: Path, storage: NodeStorage) -> Iterator[AuditExporter]:
    exporter = AuditExporter(tmp_path / "audits", "n1", storage.commit_log)
    machine_of(storage).audit_hook = exporter.hook
    yield exporter
    exporter.close()


def wait_status(exporter: AuditExporter, audit_id: str, timeout: float = 20.0) -> AuditStatus:
    deadline = time.monotonic() + timeout
    while True:
        status = exporter.status(audit_id)
        if status is not None and status.state != RUNNING:
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.01)


# -- what an export holds ----------------------------------------------------------------


def digest_of(records: list[Record]) -> str:
    """The manifest's bucket digest, written out from the format's description."""
    digest = hashlib.sha256()
    for record in records:
        digest.update(struct.pack(">I", len(record.key)))
        digest.update(record.key)
        digest.update(struct.pack(">Q", record.offset))
        digest.update(hashlib.sha256(record.value).digest())
    return digest.hexdigest()


def replay(records: list[Record]) -> State:
    state: State = {}
    for record in records:
        if record.op is RecordOp.PUT:
            state[record.key] = (record.offset, record.create_version, record.value)
        else:
            state.pop(record.key, None)
    return state


def read_bucket(path: Path) -> list[Record]:
    with open(path, "rb") as f:
        return [record for record, _ in SnapshotReader(f, str(path)).records()]


def read_log_file(path: Path) -> list[Record]:
    decoder = RecordDecoder(str(path), 64 * 1024 * 1024)
    records = decoder.feed(path.read_bytes())
    decoder.finish()
    return records


def test_an_export_is_the_state_at_the_cut(
    storage: NodeStorage, exporter: AuditExporter, tmp_path: Path
) -> None:
    fill(storage)
    with storage.store.reader() as view:
        splits = choose_split_points(view, 5)
    splits.append(LONG_PREFIX[:MAX_SPLIT_POINT_BYTES])  # cuts right before the long keys
    splits.sort()
    # The audit shares its entry with a put: the cut is after the whole entry.
    index = apply(storage, Put(b"same-entry", b"in"), AuditCut("a1", tuple(splits)))
    (cut_index, cut_offset), expected = state_of(storage)
    assert cut_index == index and b"same-entry" in expected and INTERNAL_KEY in expected
    status = wait_status(exporter, "a1")
    assert status.state == DONE, status
    manifest = status.manifest
    assert manifest is not None
    directory = export_directory(tmp_path / "audits", "a1", "n1")
    assert json.loads((directory / MANIFEST_NAME).read_bytes()) == manifest

    buckets = len(splits) + 1
    names = [bucket_name(i) for i in range(buckets)]
    assert names[0] == "bucket-00000.rkvsnap"
    assert sorted(p.name for p in directory.iterdir()) == sorted([*names, LOG_NAME, MANIFEST_NAME])
    assert {k: v for k, v in manifest.items() if k not in ("created_ms", "seconds")} == {
        "format": 1,
        "audit_id": "a1",
        "replica": "n1",
        "raft_index": cut_index,
        "applied_offset": cut_offset,
        "key_count": len(expected),
        "buckets": buckets,
        "split_points": [base64.b64encode(s).decode() for s in splits],
        "bucket_counts": manifest["bucket_counts"],
        "bucket_digests": manifest["bucket_digests"],
        "files": {"state": names, "log": LOG_NAME},
        "log_records": manifest["log_records"],
    }
    assert manifest["created_ms"] > 0 and manifest["seconds"] >= 0

    exported: State = {}
    bounds = [None, *splits, None]
    for i, name in enumerate(names):
        header = verify_snapshot(directory / name)
        assert (header.applied_index, header.applied_offset) == (cut_index, cut_offset)
        assert header.created_at_ms == manifest["created_ms"]
        records = read_bucket(directory / name)
        low, high = bounds[i], bounds[i + 1]
        assert all(low is None or low <= r.key for r in records), name
        assert all(high is None or r.key < high for r in records), name
        assert manifest["bucket_counts"][i] == len(records) == header.record_count
        assert manifest["bucket_digests"][i] == digest_of(records)
        exported.update(replay(records))
    assert exported == expected
    assert all(manifest["bucket_counts"]), "every bucket of this store has keys"

    log_file = directory / LOG_NAME
    assert log_file.read_bytes() == b"".join(encoded_records(storage.commit_log, 1, cut_offset))
    log_records = read_log_file(log_file)
    assert manifest["log_records"] == len(log_records)
    assert [r.offset for r in log_records] == sorted(r.offset for r in log_records)
    assert log_records[-1].offset <= cut_offset
    assert replay(log_records) == expected


def test_an_empty_store_exports_one_empty_bucket(
    storage: NodeStorage, exporter: AuditExporter, tmp_path: Path
) -> None:
    with storage.store.reader() as view:
        assert choose_split_points(view, 16) == []
    apply(storage, AuditCut("empty", ()))
    status = wait_status(exporter, "empty")
    assert status.manifest is not None
    assert status.manifest["buckets"] == 1 and status.manifest["bucket_counts"] == [0]
    assert status.manifest["bucket_digests"] == [hashlib.sha256().hexdigest()]
    assert status.manifest["log_records"] == 0
    directory = export_directory(tmp_path / "audits", "empty", "n1")
    assert verify_snapshot(directory / bucket_name(0)).record_count == 0
    assert (directory / LOG_NAME).read_bytes() == b""


def test_buckets_with_no_key_are_still_written(
    storage: NodeStorage, exporter: AuditExporter
) -> None:
    apply(storage, Put(b"m", b"1"))
    apply(storage, AuditCut("sparse", (b"a", b"b", b"x", b"y")))
    status = wait_status(exporter, "sparse")
    assert status.manifest is not None
    assert status.manifest["bucket_counts"] == [0, 0, 1, 0, 0]


def test_split_points_cut_keys_into_even_runs(storage: NodeStorage) -> None:
    fill(storage)
    with storage.store.reader() as view:
        count = view.count(include_internal=True)
        keys = [key for chunk in view.all_items() for key, _ in chunk]
        points = choose_split_points(view, 4)
        assert len(points) == 3 and points == sorted(set(points))
        assert all(0 < len(p) <= MAX_SPLIT_POINT_BYTES for p in points)
        sizes = [
            sum(1 for k in keys if (i == 0 or points[i - 1] <= k) and (i == 3 or k < points[i]))
            for i in range(4)
        ]
        assert sum(sizes) == count and max(sizes) - min(sizes) <= 2
        assert len(choose_split_points(view, MAX_AUDIT_BUCKETS)) < count
        assert choose_split_points(view, 1) == []
        with pytest.raises(ValueError):
            choose_split_points(view, MAX_AUDIT_BUCKETS + 1)


def test_fewer_keys_than_buckets_gives_one_key_per_bucket(storage: NodeStorage) -> None:
    apply(storage, Put(b"a", b"1"), Put(b"b", b"2"), Put(b"c", b"3"))
    with storage.store.reader() as view:
        assert choose_split_points(view, 16) == [b"b", b"c"]


# -- writes go on; what the export waits for ----------------------------------------------


@pytest.fixture
def paused(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Exports stop right before writing their state (the view open, the log held)
    until the second event is set, or a resize interrupts the view (as an export
    notices between chunks); the first event is set once one got there."""
    reached, go = threading.Event(), threading.Event()
    real = audit_export.write_state

    def held(view: DetachedView, *args: Any, **kwargs: Any) -> Any:
        reached.set()
        deadline = time.monotonic() + 20
        while not go.wait(0.01) and not view.interrupted.is_set():
            assert time.monotonic() < deadline
        return real(view, *args, **kwargs)

    monkeypatch.setattr(audit_jobs, "write_state", held)
    yield reached, go
    go.set()


def in_thread(fn: Callable[[], object], timeout: float = 10.0) -> None:
    """Run ``fn`` on another thread and fail unless it returns within ``timeout``."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "it waited for the export"
    assert not errors, errors


def test_writes_go_on_while_an_export_runs_and_stay_out_of_it(
    storage: NodeStorage,
    exporter: AuditExporter,
    paused: tuple[threading.Event, threading.Event],
) -> None:
    reached, go = paused
    fill(storage)
    apply(storage, AuditCut("busy", (b"k0100",)))
    (_, cut_offset), expected = state_of(storage)
    assert reached.wait(10)
    assert exporter.status("busy") == AuditStatus(
        "busy",
        RUNNING,
        progress=exporter.status("busy").progress,  # type: ignore[union-attr]
    )
    assert storage.commit_log.rewriting.locked()  # no compaction until the log is out

    in_thread(lambda: apply(storage, Put(b"k0050", b"after the cut"), Delete(b"k0060")))
    in_thread(lambda: apply(storage, *(Put(b"new%04d" % i, b"x" * 100) for i in range(500))))
    assert storage.store.get(b"k0050") is not None
    go.set()
    status = wait_status(exporter, "busy")
    assert status.manifest is not None and status.manifest["applied_offset"] == cut_offset
    directory = export_directory(exporter.audit_dir, "busy", "n1")
    exported: State = {}
    for name in status.manifest["files"]["state"]:
        exported.update(replay(read_bucket(directory / name)))
    assert exported == expected
    assert exported[b"k0050"][2] != b"after the cut" and b"k0060" in exported
    assert replay(read_log_file(directory / LOG_NAME)) == expected
    assert not storage.commit_log.rewriting.locked()


def test_a_map_resize_interrupts_an_export_instead_of_waiting(
    tmp_path: Path,
    small_config: StorageConfig,
    paused: tuple[threading.Event, threading.Event],
) -> None:
    storage = open_storage(tmp_path / "node", small_config)  # a 1 MiB map
    exporter = AuditExporter(tmp_path / "audits", "n1", storage.commit_log)
    machine_of(storage).audit_hook = exporter.hook
    try:
        reached, go = paused
        apply(storage, *(Put(b"k%04d" % i, b"v" * 200) for i in range(200)))
        size_at_cut = storage.store.map_size
        apply(storage, AuditCut("resized", ()))
        assert reached.wait(10)

        def fill_the_map() -> None:
            for n in range(40):
                apply(storage, *(Put(b"big%02d-%03d" % (n, i), b"w" * 1000) for i in range(100)))

        in_thread(fill_the_map, timeout=30)
        assert storage.store.map_size > size_at_cut
        go.set()
        status = wait_status(exporter, "resized")
        assert status.state == FAILED and status.error is not None
        assert "grow its map" in status.error
        error = json.loads(
            (export_directory(exporter.audit_dir, "resized", "n1") / ERROR_NAME).read_bytes()
        )
        assert error["code"] == "audit_export_failed"
        assert not storage.commit_log.rewriting.locked()
    finally:
        exporter.close()
        storage.close()


def test_a_compaction_overlapping_the_cut_fails_the_export(
    storage: NodeStorage, exporter: AuditExporter
) -> None:
    fill(storage)
    log = storage.commit_log
    assert log.rewriting.acquire()  # a compaction is running at the cut
    apply(storage, AuditCut("overlap", ()))
    time.sleep(0.1)
    log.rewrites += 1  # ... and swaps segments after it
    log.rewriting.release()
    status = wait_status(exporter, "overlap")
    assert status.state == FAILED and status.error is not None
    assert "compaction" in status.error


def test_a_range_read_holding_the_log_at_the_cut_is_waited_for(
    storage: NodeStorage, exporter: AuditExporter
) -> None:
    fill(storage)
    log = storage.commit_log
    assert log.rewriting.acquire()  # a complete-range pull, which rewrites nothing
    apply(storage, AuditCut("waited", ()))
    time.sleep(0.2)
    assert exporter.status("waited") is not None
    assert exporter.status("waited").state == RUNNING  # type: ignore[union-attr]
    log.rewriting.release()
    assert wait_status(exporter, "waited").state == DONE


# -- status and files ----------------------------------------------------------------------


def test_status_and_files_of_exports(storage: NodeStorage, exporter: AuditExporter) -> None:
    apply(storage, Put(b"a", b"1"))
    assert exporter.status("nothing") is None
    with pytest.raises(KeyNotFound) as missing:
        exporter.finished_file("nothing", MANIFEST_NAME)
    assert missing.value.code == "audit_not_found"
    apply(storage, AuditCut("s1", ()))
    wait_status(exporter, "s1")
    directory = export_directory(exporter.audit_dir, "s1", "n1")
    for name in (bucket_name(0), LOG_NAME, MANIFEST_NAME):
        assert exporter.finished_file("s1", name) == directory / name
    for name in ("../s1/n1/manifest.json", "bucket-00001.rkvsnap", ERROR_NAME, ".", ""):
        with pytest.raises(KeyNotFound) as unknown:
            exporter.finished_file("s1", name)
        assert unknown.value.code == "audit_file_not_found"

    # A directory without a manifest: the node stopped while writing it.
    (export_directory(exporter.audit_dir, "cut-short", "n1")).mkdir(parents=True)
    status = exporter.status("cut-short")
    assert status is not None and status.state == FAILED
    assert exporter.exists("cut-short") and exporter.exists("s1")
    # Another node's export in a shared audit directory also takes the id.
    export_directory(exporter.audit_dir, "theirs", "n2").mkdir(parents=True)
    assert exporter.exists("theirs") and exporter.status("theirs") is None


def test_the_same_audit_id_again_keeps_the_first_export(
    storage: NodeStorage, exporter: AuditExporter
) -> None:
    apply(storage, Put(b"a", b"1"))
    apply(storage, AuditCut("twice", ()))
    first = wait_status(exporter, "twice").manifest
    apply(storage, Put(b"b", b"2"))
    apply(storage, AuditCut("twice", ()))
    time.sleep(0.2)
    assert wait_status(exporter, "twice").manifest == first
    assert not storage.commit_log.rewriting.locked()


def test_without_a_hook_an_audit_is_a_no_op(storage: NodeStorage) -> None:
    apply(storage, Put(b"a", b"1"))
    before = state_of(storage)[1]
    index = storage.store.applied_index + 1
    (result,) = machine_of(storage).apply(index, encode_entry(Batch((AuditCut("none", ()),), 5)))
    assert result.code is ResultCode.OK and result.value == str(index).encode()
    assert storage.store.applied_index == index
    assert state_of(storage)[1] == before


def test_the_whole_state_snapshot_is_unchanged(storage: NodeStorage, tmp_path: Path) -> None:
    """write_snapshot now goes through the SnapshotWriter the buckets use."""
    fill(storage)
    path = tmp_path / "whole.snapshot"
    with storage.store.reader() as view, open(path, "wb") as out:
        header = write_snapshot(view, out)
    assert verify_snapshot(path) == header
    assert replay(read_bucket(path)) == state_of(storage)[1]


def test_a_cut_leaves_room_in_the_map_for_the_export(
    tmp_path: Path, small_config: StorageConfig
) -> None:
    storage = open_storage(tmp_path / "node", small_config)  # a 1 MiB map
    try:
        store = storage.store
        apply(storage, *(Put(b"k%04d" % i, b"v" * 1000) for i in range(400)))
        size = store.map_size
        assert 2 * store.used_bytes > size
        first = store.open_detached()  # more than half in use: the map doubles first
        assert store.map_size == 2 * size
        apply(storage, *(Put(b"j%04d" % i, b"v" * 1000) for i in range(400)))
        assert 2 * store.used_bytes > store.map_size
        second = store.open_detached()  # not while another detached view is open
        assert store.map_size == 2 * size and not first.interrupted.is_set()
        second.close()
        first.close()
        first.close()  # closing twice is harmless
        assert first.closed
    finally:
        storage.close()


def test_the_audit_directory_setting() -> None:
    def parse(argv: list[str], env: dict[str, str]) -> Path:
        parser = argparse.ArgumentParser()
        add_node_arguments(parser)
        base = ["--id", "n0", "--data-dir", "/tmp/x", "--raft-listen", "127.0.0.1:9001"]
        secret = {"RKV_CLUSTER_SECRET": "s" * 32}
        return node_config(parser.parse_args([*base, *argv]), {**secret, **env}).audit_path

    assert parse([], {}) == Path("/tmp/x/audit")
    assert parse([], {"RKV_AUDIT_DIR": "/shared/audits"}) == Path("/shared/audits")
    assert parse(["--audit-dir", "/flag"], {"RKV_AUDIT_DIR": "/env"}) == Path("/flag")


def test_leases_and_locks_are_exported_like_any_record(
    storage: NodeStorage, exporter: AuditExporter, tmp_path: Path
) -> None:
    """The audit compares lease state across replicas as it compares keys: its records
    (node/state/leases.py) are in the export."""
    apply(storage, LeaseGrant(60_000, "alice", 10, 10))
    with storage.store.reader() as view:
        ((key, _),) = view.scan(LEASES_PREFIX, None, 10, include_internal=True)
    lease_id = lease_id_of(key)
    apply(storage, LeasedPut(b"owned", b"v", None, lease_id), Lock("jobs/a", lease_id, b"", 5))
    apply(storage, AuditCut("leases", ()))
    _, expected = state_of(storage)
    status = wait_status(exporter, "leases")
    assert status.state == DONE, status
    directory = export_directory(tmp_path / "audits", "leases", "n1")
    exported = replay(read_bucket(directory / bucket_name(0)))
    assert exported == expected
    lease_state = {k for k in exported if k.startswith(RESERVED_PREFIX + b"lease")}
    assert lease_key(lease_id) in lease_state and len(lease_state) >= 4  # count, attachments
    assert lock_key("jobs/a") in exported
