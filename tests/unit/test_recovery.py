"""Bringing LMDB up to the commit log after crashes."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from node.commands import Batch, Command, Delete, Put, encode_entry
from node.lmdb_store import LmdbStore
from node.record import Record, RecordOp, encode_record
from node.recovery import LOG_DIR, STATE_DIR, NodeStorage, open_storage
from node.storage_config import FsyncPolicy, StorageConfig


def snapshot(storage: NodeStorage) -> dict[bytes, tuple[int, int, bytes]]:
    with storage.store.reader() as view:
        return {
            k: (v.version, v.create_version, v.value)
            for k, v in view.scan(b"", limit=10**7, include_internal=True)
        }


def fill(storage: NodeStorage, entries: int) -> None:
    for i in range(1, entries + 1):
        commands: list[Command] = [
            Put(b"k/%d" % (i % 97), b"value-%d" % i),
            Put(b"other/%d" % i, b"x"),
        ]
        if i % 5 == 0:
            commands.append(Delete(b"other/%d" % (i - 1)))
        storage.state_machine.apply(i, encode_entry(Batch(tuple(commands), timestamp_ms=i)))


def test_deleting_lmdb_and_replaying_gives_the_identical_state(
    tmp_path: Path, small_config: StorageConfig
) -> None:
    storage = open_storage(tmp_path, small_config)
    fill(storage, 600)
    before = snapshot(storage)
    applied = (storage.store.applied_index, storage.store.applied_offset)
    storage.close()
    LmdbStore.destroy(tmp_path / STATE_DIR)
    reopened = open_storage(tmp_path, small_config)
    assert reopened.replayed_records > 1000
    assert snapshot(reopened) == before
    assert (reopened.store.applied_index, reopened.store.applied_offset) == applied
    reopened.close()


def test_records_the_log_has_but_lmdb_lacks_are_replayed(
    tmp_path: Path, small_config: StorageConfig
) -> None:
    """A crash between the log append and the LMDB commit."""
    storage = open_storage(tmp_path, small_config)
    fill(storage, 10)
    head = storage.commit_log.last_offset
    # what apply had appended when the process died, before LMDB was written
    storage.commit_log.append(
        [
            Record(head + 1, 11, 11, RecordOp.PUT, b"k/1", b"after-crash"),
            Record(head + 2, 11, 11, RecordOp.DELETE, b"other/3"),
        ]
    )
    storage.close()
    reopened = open_storage(tmp_path, small_config)
    assert reopened.replayed_records == 2
    k1 = reopened.store.get(b"k/1")
    assert k1 is not None and k1.value == b"after-crash" and k1.version == head + 1
    assert reopened.store.get(b"other/3") is None
    assert reopened.store.applied_index == 11
    # and raft re-delivering entry 11 changes nothing
    again = encode_entry(Batch((Put(b"k/1", b"after-crash"),), timestamp_ms=11))
    reopened.state_machine.apply(11, again)
    assert reopened.commit_log.last_offset == head + 2
    reopened.close()


def test_lmdb_ahead_of_the_log_is_rebuilt_from_the_log(
    tmp_path: Path, small_config: StorageConfig, caplog: pytest.LogCaptureFixture
) -> None:
    """After a power loss the log may lose an unsynced tail that LMDB kept."""
    storage = open_storage(tmp_path, small_config)
    fill(storage, 3)
    survivor = snapshot(storage)
    storage.state_machine.apply(4, encode_entry(Batch((Put(b"late", b"lost"),), 4)))
    storage.close()
    segment = sorted((tmp_path / LOG_DIR).glob("*.log"))[-1]
    last = list(open_storage(tmp_path, small_config).commit_log.read(1))[-1]
    size = segment.stat().st_size
    os.truncate(segment, size - len(encode_record(last)))
    with caplog.at_level(logging.WARNING):
        reopened = open_storage(tmp_path, small_config)
    assert "rebuilding LMDB from the commit log" in caplog.text
    assert snapshot(reopened) == survivor
    assert reopened.store.get(b"late") is None
    reopened.close()


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from node.commands import Batch, Put, encode_entry
    from node.recovery import open_storage
    from node.storage_config import FsyncPolicy, StorageConfig

    storage = open_storage(Path(sys.argv[1]), StorageConfig(
        segment_bytes=64 * 1024, fsync=FsyncPolicy.ALWAYS))
    index = storage.state_machine.applied_index
    while True:
        index += 1
        entry = encode_entry(Batch(tuple(
            Put(b"w/%d/%d" % (index, j), b"v" * 200) for j in range(5)), index))
        results = storage.state_machine.apply(index, entry)
        assert all(r.ok for r in results)
        print(index, flush=True)  # acknowledged: durable in the log before this line
    """
)


def test_kill_minus_nine_loses_nothing_acknowledged(tmp_path: Path) -> None:
    data_dir = tmp_path / "node"
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    acknowledged = 0
    for _round in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(data_dir)],
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        lines = 0
        for line in proc.stdout:
            acknowledged = max(acknowledged, int(line))
            lines += 1
            if lines >= 150 or time.monotonic() > deadline:
                break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        for line in proc.stdout:  # what it printed before dying is acknowledged too
            acknowledged = max(acknowledged, int(line))
        assert lines >= 150
    storage = open_storage(data_dir, StorageConfig(segment_bytes=64 * 1024))
    try:
        assert storage.store.applied_index >= acknowledged
        for index in range(1, acknowledged + 1):
            for j in range(5):
                assert storage.store.get(b"w/%d/%d" % (index, j)) is not None, (index, j)
        assert storage.commit_log.segment_count > 1
    finally:
        storage.close()


@pytest.mark.parametrize(
    ("policy", "expected"), [(FsyncPolicy.ALWAYS, 3), (FsyncPolicy.ON_SYNC, 0)]
)
def test_fsync_policy_decides_when_appends_are_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: FsyncPolicy, expected: int
) -> None:
    storage = open_storage(tmp_path, StorageConfig(fsync=policy))
    calls: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        calls.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    for i in range(1, 4):
        storage.state_machine.apply(i, encode_entry(Batch((Put(b"k", b"v"),), i)))
    assert len(calls) == expected
    storage.commit_log.sync()
    assert len(calls) == expected + 1
    monkeypatch.undo()
    storage.close()
