"""Snapshot files: export from one LMDB view, verify, restore into a fresh data dir."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from node.cli.snapshot import restore_snapshot_command
from node.errors import SnapshotFormatError, StorageError
from node.keyspace import RESERVED_PREFIX
from node.snapshot.file import (
    FORMAT_VERSION,
    HEADER_BYTES,
    STAGING_DIR,
    TRAILER_BYTES,
    SnapshotReader,
    export_snapshot,
    restore_snapshot,
    verify_snapshot,
    write_snapshot,
)
from node.state.commands import Barrier, Batch, Delete, Put, encode_entry
from node.storage.config import StorageConfig
from node.storage.datadir import LOG_DIR, STATE_DIR
from node.storage.key_order import LMDB_KEY_LIMIT
from node.storage.lmdb_store import LmdbStore
from node.storage.record import Record, RecordOp
from node.storage.recovery import NodeStorage, open_storage
from tests.support.state import machine_of

INTERNAL_KEY = RESERVED_PREFIX + b"sessions/p1"


def apply(storage: NodeStorage, *commands: Any) -> None:
    index = storage.store.applied_index + 1
    machine_of(storage).apply(index, encode_entry(Batch(tuple(commands), 1_000 + index)))


def add_internal(storage: NodeStorage, key: bytes, value: bytes) -> None:
    """An internal key is an ordinary record under the reserved prefix (as replication
    and sessions will write it); user commands cannot write one."""
    offset = storage.commit_log.next_offset
    index = storage.store.applied_index + 1
    record = Record(offset, index, 5, RecordOp.PUT, key, value, offset)
    storage.commit_log.append([record])
    storage.store.apply_records([record], index)


def fill(storage: NodeStorage) -> None:
    shared = b"s" * 600
    apply(storage, *(Put(b"k%04d" % i, b"v%d" % i) for i in range(150)))
    apply(storage, *(Put(b"k%04d" % i, b"second %d" % i) for i in range(0, 150, 3)))
    apply(storage, Put(b"\x00\xff binary", b""), Put(b"m" * (LMDB_KEY_LIMIT + 1), b"long"))
    apply(storage, *(Put(shared + b"%02d" % i, b"shared %d" % i) for i in range(5)))
    add_internal(storage, INTERNAL_KEY, b"internal state")
    apply(storage, Put(b"k0001", b"third"))
    apply(storage, Barrier())
    # The last writes are deletes: the applied offset is above every key's version.
    apply(storage, Delete(b"k0002"), Delete(b"k0004"))


def state_of(store: LmdbStore) -> tuple[tuple[int, int], list[tuple[bytes, int, int, bytes]]]:
    with store.reader() as view:
        items = [
            (key, stored.version, stored.create_version, stored.value)
            for chunk in view.all_items(chunk_items=7)
            for key, stored in chunk
        ]
        return view.applied(), items


@pytest.fixture
def source(tmp_path: Path, small_config: StorageConfig) -> NodeStorage:
    storage = open_storage(tmp_path / "source", small_config)
    fill(storage)
    return storage


@pytest.fixture
def snapshot(tmp_path: Path, source: NodeStorage) -> Path:
    path = tmp_path / "state.snapshot"
    with open(path, "wb") as f:
        export_snapshot(source.store, f)
    return path


def test_export_header_and_verify(snapshot: Path, source: NodeStorage) -> None:
    (index, offset), items = state_of(source.store)
    header = verify_snapshot(snapshot)
    assert header.format_version == FORMAT_VERSION
    assert (header.applied_index, header.applied_offset) == (index, offset)
    assert header.record_count == len(items)
    assert offset > max(version for _, version, _, _ in items)  # deletes came last
    assert any(key == INTERNAL_KEY for key, *_ in items)
    with open(snapshot, "rb") as f:
        records = [record for record, _ in SnapshotReader(f, "test").records()]
    assert [r.key for r in records] == [key for key, *_ in items]
    assert all(r.raft_index == index and r.op is RecordOp.PUT for r in records)


@pytest.mark.parametrize("keep_raft_index", [False, True])
def test_round_trip_into_a_fresh_dir(
    tmp_path: Path,
    snapshot: Path,
    source: NodeStorage,
    small_config: StorageConfig,
    keep_raft_index: bool,
) -> None:
    (index, offset), items = state_of(source.store)
    target = tmp_path / "restored"
    result = restore_snapshot(
        snapshot, target, config=small_config, keep_raft_index=keep_raft_index
    )
    assert result.raft_index == (index if keep_raft_index else 0)
    assert sorted(p.name for p in target.iterdir()) == [LOG_DIR, STATE_DIR]
    restored = open_storage(target, small_config)
    assert restored.replayed_records == 0
    assert state_of(restored.store) == ((result.raft_index, offset), items)
    assert restored.commit_log.next_offset == offset + 1
    # The next write continues the offsets; in a new cluster raft starts again at 1.
    first = 1 if not keep_raft_index else index + 1
    results = machine_of(restored).apply(first, encode_entry(Batch((Put(b"new", b"x"),), 9)))
    assert results[0].ok and results[0].version == offset + 1
    restored.close()
    # LMDB rebuilt from the restored log: the same state, and the raft index of the
    # last entry (the snapshot's records carry the restored raft index, not the old one).
    LmdbStore.destroy(target / STATE_DIR)
    rebuilt = open_storage(target, small_config)
    (rebuilt_index, _), rebuilt_items = state_of(rebuilt.store)
    assert rebuilt_index == first
    assert [i for i in rebuilt_items if i[0] != b"new"] == items
    rebuilt.close()


def test_round_trip_through_spilled_runs_and_merge_passes(
    tmp_path: Path, snapshot: Path, source: NodeStorage, small_config: StorageConfig
) -> None:
    _, items = state_of(source.store)
    phases: set[str] = set()
    restore_snapshot(
        snapshot,
        tmp_path / "restored",
        config=small_config,
        keep_raft_index=True,
        progress=lambda phase, done, total: phases.add(phase),
        run_records=7,
        merge_fan_in=3,
    )
    assert phases == {"verify", "write log", "load lmdb"}
    restored = open_storage(tmp_path / "restored", small_config)
    assert state_of(restored.store) == state_of(source.store)
    assert len(items) > 7 * 3  # several runs, more than one merge pass
    restored.close()


def test_the_export_is_one_consistent_view(tmp_path: Path, source: NodeStorage) -> None:
    before = state_of(source.store)
    out = io.BytesIO()
    with source.store.reader() as view:
        apply(source, Put(b"k0000", b"written during the export"), Put(b"zz new", b"1"))
        header = write_snapshot(view, out)
    assert state_of(source.store) != before
    path = tmp_path / "during.snapshot"
    path.write_bytes(out.getvalue())
    assert (header.applied_index, header.applied_offset) == before[0]
    restore_snapshot(path, tmp_path / "restored", keep_raft_index=True)
    restored = open_storage(tmp_path / "restored", StorageConfig())
    assert state_of(restored.store) == before
    restored.close()


def test_an_empty_state_round_trips(tmp_path: Path, small_config: StorageConfig) -> None:
    empty = open_storage(tmp_path / "empty", small_config)
    path = tmp_path / "empty.snapshot"
    with open(path, "wb") as f:
        header = export_snapshot(empty.store, f)
    assert header.record_count == 0
    assert path.stat().st_size == HEADER_BYTES + TRAILER_BYTES
    restore_snapshot(path, tmp_path / "restored", config=small_config)
    restored = open_storage(tmp_path / "restored", small_config)
    assert state_of(restored.store) == ((0, 0), [])
    restored.close()


# -- refusing bad files -----------------------------------------------------------


def refused(path: Path, data: bytes, tmp_path: Path, match: str) -> None:
    """verify_snapshot and restore_snapshot both refuse ``data``, naming the problem,
    and the restore leaves nothing behind."""
    path.write_bytes(data)
    with pytest.raises(SnapshotFormatError, match=match):
        verify_snapshot(path)
    target = tmp_path / "target"
    with pytest.raises(SnapshotFormatError, match=match):
        restore_snapshot(path, target)
    assert not target.exists()


def test_truncated_files_are_refused(tmp_path: Path, snapshot: Path) -> None:
    data = snapshot.read_bytes()
    body_end = len(data) - TRAILER_BYTES
    cuts = {
        0: "the file is empty",
        3: "truncated: the file ends inside the header",
        8: "truncated: the file ends inside the header",
        HEADER_BYTES - 1: "truncated: the file ends inside the header",
        HEADER_BYTES: "truncated: the file ends inside record 0 ",
        HEADER_BYTES + 5: "truncated: the file ends inside record 0 ",
        HEADER_BYTES + 40: "truncated: the file ends inside record 0 ",
        (HEADER_BYTES + body_end) // 2: "truncated: the file ends inside record",
        body_end - 1: "truncated: the file ends inside record",
        body_end: "truncated: the file ends after record .* before the trailer",
        body_end + 8: "truncated: the file ends inside the trailer",
        len(data) - 1: "truncated: the file ends inside the trailer",
    }
    for cut, match in cuts.items():
        refused(tmp_path / f"cut{cut}", data[:cut], tmp_path, match)


def flipped(data: bytes, position: int) -> bytes:
    return data[:position] + bytes((data[position] ^ 0x01,)) + data[position + 1 :]


def test_a_flipped_byte_is_refused_wherever_it_is(tmp_path: Path, snapshot: Path) -> None:
    data = snapshot.read_bytes()
    body_end = len(data) - TRAILER_BYTES
    cases = {
        0: "not an rkv snapshot: wrong magic",
        10: "damaged header: its CRC-32 does not match",  # applied index
        HEADER_BYTES - 1: "damaged header",  # the header's CRC itself
        HEADER_BYTES + 2: "damaged record 0 at byte 44",  # the first record's length
        HEADER_BYTES + 30: "damaged record 0 at byte 44: its CRC-32 does not match",
        (HEADER_BYTES + body_end) // 2: "damaged record",
        body_end - 1: "damaged record .*CRC-32",  # the last value's last byte
        body_end: "damaged trailer .*wrong trailer magic",
        body_end + 12: "damaged trailer .*counts",
        len(data) - 1: "checksum mismatch: the SHA-256",
    }
    for position, match in cases.items():
        refused(tmp_path / f"flip{position}", flipped(data, position), tmp_path, match)


def test_wrong_magic_future_version_and_trailing_bytes(tmp_path: Path, snapshot: Path) -> None:
    data = snapshot.read_bytes()
    refused(tmp_path / "magic", b"NOTSNAP" + data[7:], tmp_path, "not an rkv snapshot")
    refused(
        tmp_path / "future",
        data[:7] + bytes((FORMAT_VERSION + 1,)) + data[8:],
        tmp_path,
        f"unsupported snapshot format version {FORMAT_VERSION + 1} "
        rf"\(this rkv reads version {FORMAT_VERSION}\)",
    )
    refused(tmp_path / "json", b'{"items": []}', tmp_path, "wrong magic")
    refused(tmp_path / "extra", data + b"\n", tmp_path, "unexpected bytes after the trailer")


# -- the data directory -----------------------------------------------------------


def test_restore_refuses_a_non_empty_dir(tmp_path: Path, snapshot: Path) -> None:
    target = tmp_path / "used"
    target.mkdir()
    (target / "something").write_text("keep me")
    with pytest.raises(StorageError, match=r"it is not empty .*something"):
        restore_snapshot(snapshot, target)
    assert [p.name for p in target.iterdir()] == ["something"]


def test_restore_accepts_lost_found_and_clears_an_interrupted_staging(
    tmp_path: Path, snapshot: Path
) -> None:
    target = tmp_path / "mount"
    (target / "lost+found").mkdir(parents=True)
    (target / STAGING_DIR / "log").mkdir(parents=True)
    restore_snapshot(snapshot, target)
    assert sorted(p.name for p in target.iterdir()) == [LOG_DIR, "lost+found", STATE_DIR]


def test_restore_refuses_values_above_the_limit(tmp_path: Path, snapshot: Path) -> None:
    with pytest.raises(StorageError, match="above the limit of 5"):
        restore_snapshot(snapshot, tmp_path / "t", config=StorageConfig(max_value_bytes=5))
    assert not (tmp_path / "t").exists()


# -- the command ------------------------------------------------------------------


def test_restore_command_exit_codes(
    tmp_path: Path, snapshot: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert restore_snapshot_command(snapshot, tmp_path / "ok") == 0
    out, err = capsys.readouterr()
    assert out.startswith("restored ") and "raft index reset for a new cluster" in out
    assert err == ""

    assert restore_snapshot_command(snapshot, tmp_path / "ok") == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "is not empty" in err

    bad = tmp_path / "bad.snapshot"
    bad.write_bytes(snapshot.read_bytes()[:-3])
    assert restore_snapshot_command(bad, tmp_path / "fresh") == 1
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "truncated" in err and "Traceback" not in err
    assert not (tmp_path / "fresh").exists()

    assert restore_snapshot_command(tmp_path / "absent", tmp_path / "fresh") == 1
    assert "is not a file" in capsys.readouterr().err
