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

from node.state.commands import Batch, Command, Delete, Put, encode_entry
from node.storage.config import FsyncPolicy, StorageConfig
from node.storage.datadir import LOG_DIR, OWNER_FILE, STATE_DIR
from node.storage.lmdb_store import LmdbStore
from node.storage.record import Record, RecordOp, encode_record
from node.storage.recovery import NodeStorage, current_boot_id, open_storage
from tests.support.state import machine_of


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
        machine_of(storage).apply(i, encode_entry(Batch(tuple(commands), timestamp_ms=i)))


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
    machine_of(reopened).apply(11, again)
    assert reopened.commit_log.last_offset == head + 2
    reopened.close()


def test_lmdb_ahead_of_the_log_is_rebuilt_from_the_log(
    tmp_path: Path, small_config: StorageConfig, caplog: pytest.LogCaptureFixture
) -> None:
    """After a power loss the log may lose an unsynced tail that LMDB kept."""
    storage = open_storage(tmp_path, small_config)
    fill(storage, 3)
    survivor = snapshot(storage)
    machine_of(storage).apply(4, encode_entry(Batch((Put(b"late", b"lost"),), 4)))
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
    from node.state.commands import Batch, Put, encode_entry
    from node.storage.recovery import open_storage
    from node.state.machine import StateMachine
    from node.storage.config import FsyncPolicy, StorageConfig

    storage = open_storage(Path(sys.argv[1]), StorageConfig(
        segment_bytes=64 * 1024, fsync=FsyncPolicy.ALWAYS))
    machine = StateMachine.over(storage)
    index = machine.applied_index
    while True:
        index += 1
        entry = encode_entry(Batch(tuple(
            Put(b"w/%d/%d" % (index, j), b"v" * 200) for j in range(5)), index))
        results = machine.apply(index, entry)
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
    ("policy", "expected", "after_sync"),
    [(FsyncPolicy.ALWAYS, 3, 3), (FsyncPolicy.ON_SYNC, 0, 1)],
)
def test_fsync_policy_decides_when_appends_are_synced(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    policy: FsyncPolicy,
    expected: int,
    after_sync: int,
) -> None:
    storage = open_storage(tmp_path, StorageConfig(fsync=policy))
    calls: list[int] = []
    real_fsync = os.fdatasync

    def counting_fsync(fd: int) -> None:
        calls.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fdatasync", counting_fsync)
    for i in range(1, 4):
        machine_of(storage).apply(i, encode_entry(Batch((Put(b"k", b"v"),), i)))
    assert len(calls) == expected
    storage.commit_log.sync()  # syncs only what is not durable yet
    assert len(calls) == after_sync
    storage.commit_log.sync()
    assert len(calls) == after_sync
    monkeypatch.undo()
    storage.close()


def test_retry_after_a_failed_lmdb_write_does_not_duplicate_records(
    tmp_path: Path, small_config: StorageConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Raft retries an entry whose apply raised; the replica must match one that never failed."""
    failing = open_storage(tmp_path / "failing", small_config)
    clean = open_storage(tmp_path / "clean", small_config)
    entries = [
        encode_entry(Batch((Put(b"a", b"%d" % i), Put(b"b%d" % i, b"x")), i)) for i in range(1, 6)
    ]
    real_write = failing.store.write
    calls = {"n": 0}

    def write_failing_once(*args: object, **kwargs: object) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device")
        real_write(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(failing.store, "write", write_failing_once)
    for index, entry in enumerate(entries, start=1):
        machine_of(clean).apply(index, entry)
        try:
            machine_of(failing).apply(index, entry)
        except OSError:
            machine_of(failing).apply(index, entry)  # what pysyncobj does: the same entry again
    assert calls["n"] >= 5
    assert snapshot(failing) == snapshot(clean)
    failing_log = [(r.offset, r.raft_index, r.key) for r in failing.commit_log.read(1)]
    clean_log = [(r.offset, r.raft_index, r.key) for r in clean.commit_log.read(1)]
    assert failing_log == clean_log
    failing.close()
    clean.close()


def test_a_failed_log_write_leaves_no_half_batch(
    tmp_path: Path, small_config: StorageConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = open_storage(tmp_path, small_config)
    machine_of(storage).apply(1, encode_entry(Batch((Put(b"k", b"1"),), 1)))
    real_write = os.write

    def half_then_enospc(fd: int, data: bytes) -> int:
        real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_enospc)
    with pytest.raises(OSError):
        machine_of(storage).apply(2, encode_entry(Batch((Put(b"k", b"2"), Put(b"j", b"3")), 2)))
    monkeypatch.undo()
    machine_of(storage).apply(2, encode_entry(Batch((Put(b"k", b"2"), Put(b"j", b"3")), 2)))
    assert [(r.offset, r.value) for r in storage.commit_log.read(1)] == [
        (1, b"1"),
        (2, b"2"),
        (3, b"3"),
    ]
    storage.close()
    reopened = open_storage(tmp_path, small_config)  # no torn tail, no corruption
    assert reopened.commit_log.last_offset == 3
    reopened.close()


def test_open_and_close_release_every_file_descriptor(
    tmp_path: Path, small_config: StorageConfig
) -> None:
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    storage = open_storage(tmp_path, small_config)
    fill(storage, 50)
    storage.close()
    before = open_fds()
    for _ in range(20):
        open_storage(tmp_path, small_config).close()
    assert open_fds() == before


def test_lmdb_left_open_by_an_earlier_boot_is_rebuilt(
    tmp_path: Path, small_config: StorageConfig, caplog: pytest.LogCaptureFixture
) -> None:
    storage = open_storage(tmp_path, small_config)
    fill(storage, 40)
    expected = snapshot(storage)
    storage.commit_log.close()  # the machine lost power: LMDB was never closed cleanly
    storage.store.close()  # (py-lmdb will not open one environment twice in a process)
    (tmp_path / OWNER_FILE).write_text("a-boot-id-from-before-the-power-loss")
    with caplog.at_level(logging.WARNING):
        reopened = open_storage(tmp_path, small_config)
    assert "LMDB was open when the machine went down" in caplog.text
    assert reopened.replayed_records == sum(1 for _ in reopened.commit_log.read(1))
    assert snapshot(reopened) == expected
    reopened.close()


def test_lmdb_left_open_by_this_boot_is_trusted(
    tmp_path: Path, small_config: StorageConfig
) -> None:
    storage = open_storage(tmp_path, small_config)
    fill(storage, 40)
    storage.commit_log.close()  # kill -9: the owner file still names this boot
    storage.store.close()
    assert (tmp_path / OWNER_FILE).read_text() == current_boot_id()
    reopened = open_storage(tmp_path, small_config)
    assert reopened.replayed_records == 0
    reopened.close()


def test_damaged_lmdb_files_are_rebuilt_from_the_log(
    tmp_path: Path, small_config: StorageConfig, caplog: pytest.LogCaptureFixture
) -> None:
    storage = open_storage(tmp_path, small_config)
    fill(storage, 40)
    expected = snapshot(storage)
    storage.close()
    data_file = tmp_path / STATE_DIR / "data.mdb"
    data_file.write_bytes(b"\xde\xad" * 8192)
    with caplog.at_level(logging.WARNING):
        reopened = open_storage(tmp_path, small_config)
    assert "rebuilding LMDB from the commit log" in caplog.text
    assert snapshot(reopened) == expected
    reopened.close()


@pytest.mark.parametrize("records_kept", [1, 2])
def test_an_entry_torn_at_a_record_boundary_is_dropped_whole(
    tmp_path: Path, small_config: StorageConfig, records_kept: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A power loss may keep only the first records of one write: the entry must go whole,
    so that raft's re-delivery applies all of it (a txn stays atomic)."""
    storage = open_storage(tmp_path, small_config)
    machine_of(storage).apply(1, encode_entry(Batch((Put(b"before", b"1"),), 1)))
    entry = encode_entry(Batch((Put(b"a", b"x"), Put(b"b", b"y"), Put(b"c", b"z")), 2))
    machine_of(storage).apply(2, entry)
    records = list(storage.commit_log.read(1))
    storage.close()
    segment = sorted((tmp_path / LOG_DIR).glob("*.log"))[-1]
    keep = len(encode_record(records[0])) + sum(
        len(encode_record(r)) for r in records[1 : 1 + records_kept]
    )
    os.truncate(segment, keep)
    with caplog.at_level(logging.WARNING):
        reopened = open_storage(tmp_path, small_config)
    assert "dropping an incomplete raft entry" in caplog.text
    assert [r.key for r in reopened.commit_log.read(1)] == [b"before"]
    assert reopened.store.applied_index == 1
    assert reopened.store.get(b"a") is None
    results = machine_of(reopened).apply(2, entry)  # raft delivers it again
    assert [r.ok for r in results] == [True, True, True]
    assert [r.key for r in reopened.commit_log.read(1)] == [b"before", b"a", b"b", b"c"]
    reopened.close()
