"""Installing another member's state snapshot into a live node's storage
(node/snapshot/install.py): the catch-up path of a follower behind a leader's marker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from node.errors import SnapshotFormatError
from node.snapshot.file import export_snapshot
from node.snapshot.install import install_snapshot
from node.state.commands import Batch, Delete, Put, encode_entry
from node.storage.config import StorageConfig
from node.storage.datadir import INSTALL_FLAG_FILE
from node.storage.lmdb_store import LmdbStore
from node.storage.recovery import NodeStorage, open_storage
from tests.support.state import machine_of


def apply(storage: NodeStorage, *commands: Any) -> None:
    index = storage.store.applied_index + 1
    machine_of(storage).apply(index, encode_entry(Batch(tuple(commands), 1_000 + index)))


def items(store: LmdbStore) -> list[tuple[bytes, int, int, bytes]]:
    with store.reader() as view:
        return [
            (key, stored.version, stored.create_version, stored.value)
            for chunk in view.all_items()
            for key, stored in chunk
        ]


def state(storage: NodeStorage) -> tuple[int, int, list[tuple[bytes, int, int, bytes]]]:
    return storage.store.applied_index, storage.store.applied_offset, items(storage.store)


def export(storage: NodeStorage, path: Path) -> Path:
    with open(path, "wb") as f:
        export_snapshot(storage.store, f)
    return path


def common_history(storage: NodeStorage) -> None:
    apply(storage, *(Put(b"k%03d" % i, b"v%d" % i) for i in range(40)))
    apply(storage, Put(b"gone", b"soon deleted"), Put(b"over", b"first"))


def leader_only_history(storage: NodeStorage) -> None:
    """What the follower missed: overwrites, deletes (the tombstone is compacted away
    in a real leader), and writes whose outcome depends on the state."""
    apply(storage, Put(b"over", b"second"), Delete(b"gone"))
    apply(storage, *(Put(b"k%03d" % i, b"w%d" % i) for i in range(0, 40, 2)))
    apply(storage, Put(b"over", b"third"), Put(b"new", b"n"))


@pytest.fixture
def leader(tmp_path: Path, small_config: StorageConfig) -> NodeStorage:
    storage = open_storage(tmp_path / "leader", small_config)
    common_history(storage)
    leader_only_history(storage)
    return storage


@pytest.fixture
def follower(tmp_path: Path, small_config: StorageConfig) -> NodeStorage:
    storage = open_storage(tmp_path / "follower", small_config)
    common_history(storage)
    return storage


def test_install_replaces_the_live_state_with_the_leaders(
    tmp_path: Path, leader: NodeStorage, follower: NodeStorage
) -> None:
    snapshot = export(leader, tmp_path / "leader.snapshot")
    assert state(follower) != state(leader)

    result = install_snapshot(follower, snapshot)

    assert result.header.applied_index == leader.store.applied_index
    assert state(follower) == state(leader)
    # The log holds one record per key at its original offset...
    records = list(follower.commit_log.read())
    assert [(r.key, r.offset, r.value) for r in sorted(records, key=lambda r: r.key)] == [
        (key, version, value) for key, version, _, value in items(leader.store)
    ]
    # ...and the next offset is the one the leader gives next.
    assert follower.commit_log.next_offset == leader.commit_log.next_offset
    # the installed log has no history: no range below its head can be pulled from it
    assert follower.commit_log.compacted_through == leader.commit_log.last_offset
    assert not (follower.data_dir / INSTALL_FLAG_FILE).exists()


def test_entries_after_the_install_decide_and_number_as_on_the_leader(
    tmp_path: Path, leader: NodeStorage, follower: NodeStorage
) -> None:
    install_snapshot(follower, export(leader, tmp_path / "leader.snapshot"))
    version = leader.store.get(b"over")
    assert version is not None
    later = (
        Put(b"over", b"cas ok", expected_version=version.version),
        Delete(b"gone"),  # absent on both: no record
        Put(b"k001", b"after"),
    )
    for storage in (leader, follower):
        apply(storage, *later)
        # an index already in the state is skipped, as raft replays it
        machine_of(storage).apply(storage.store.applied_index, encode_entry(Batch(later, 1)))
    assert state(follower) == state(leader)
    tail = leader.store.applied_offset - 1
    assert [r.offset for r in follower.commit_log.read(tail)] == [
        r.offset for r in leader.commit_log.read(tail)
    ]


def test_install_survives_a_reopen(
    tmp_path: Path, leader: NodeStorage, follower: NodeStorage, small_config: StorageConfig
) -> None:
    install_snapshot(follower, export(leader, tmp_path / "leader.snapshot"))
    expected = state(leader)
    follower.close()
    reopened = open_storage(follower.data_dir, small_config)
    try:
        assert state(reopened) == expected
    finally:
        reopened.close()


def test_a_damaged_snapshot_leaves_the_live_state_untouched(
    tmp_path: Path, leader: NodeStorage, follower: NodeStorage
) -> None:
    snapshot = export(leader, tmp_path / "leader.snapshot")
    data = snapshot.read_bytes()
    snapshot.write_bytes(data[: len(data) - 40])
    before = state(follower)
    with pytest.raises(SnapshotFormatError):
        install_snapshot(follower, snapshot)
    assert state(follower) == before
    assert not (follower.data_dir / INSTALL_FLAG_FILE).exists()
    apply(follower, Put(b"still", b"writable"))
    assert follower.store.get(b"still") is not None


def test_a_crash_in_the_middle_of_the_swap_restarts_from_an_empty_state(
    tmp_path: Path,
    leader: NodeStorage,
    follower: NodeStorage,
    small_config: StorageConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The log is swapped, LMDB is not (the process dies there): the state on disk is
    half new, half old, so the next start discards it and begins empty."""
    snapshot = export(leader, tmp_path / "leader.snapshot")

    def die(_source: Path) -> None:
        raise SystemExit("killed between the two swaps")

    monkeypatch.setattr(follower.store, "replace_with", die)
    with pytest.raises(SystemExit):
        install_snapshot(follower, snapshot)
    assert (follower.data_dir / INSTALL_FLAG_FILE).exists()
    follower.commit_log.close()
    follower.store.close()

    reopened = open_storage(follower.data_dir, small_config)
    try:
        assert state(reopened) == (0, 0, [])
        assert reopened.commit_log.last_offset == 0
        assert not (follower.data_dir / INSTALL_FLAG_FILE).exists()
    finally:
        reopened.close()
