"""Key-based compaction: what it keeps, that it is atomic, and that readers survive it."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from node.errors import CorruptLogError
from node.state.commands import Batch, Command, Delete, Put, encode_entry
from node.storage import segment_swap
from node.storage.compaction import CompactionPolicy, compact
from node.storage.config import FsyncPolicy, StorageConfig
from node.storage.datadir import LOG_DIR, STATE_DIR
from node.storage.lmdb_store import LmdbStore
from node.storage.record import RecordOp
from node.storage.recovery import NodeStorage, open_storage
from tests.support.state import machine_of

CONFIG = StorageConfig(
    segment_bytes=8192, index_interval_bytes=512, fsync=FsyncPolicy.ON_SYNC, lmdb_map_size=1 << 24
)
KEEP_NO_TOMBSTONES = CompactionPolicy(tombstone_retention_ms=0, tombstone_retention_offsets=0)


def state(storage: NodeStorage) -> dict[bytes, tuple[int, int, bytes]]:
    with storage.store.reader() as view:
        return {
            k: (v.version, v.create_version, v.value)
            for k, v in view.scan(b"", limit=10**7, include_internal=True)
        }


def state_from_log(storage: NodeStorage) -> dict[bytes, tuple[int, int, bytes]]:
    """Read the whole log from offset 0 and keep the last record per key."""
    result: dict[bytes, tuple[int, int, bytes]] = {}
    for record in storage.commit_log.read(0):
        if record.op is RecordOp.PUT:
            result[record.key] = (record.offset, record.create_version, record.value)
        else:
            result.pop(record.key, None)
    return result


def random_workload(
    storage: NodeStorage, rng: random.Random, entries: int, first_index: int
) -> int:
    keys = [b"key/%05d" % i for i in range(3000)]
    index = first_index
    for _ in range(entries):
        commands: list[Command] = []
        for _ in range(rng.randint(1, 20)):
            key = rng.choice(keys[: rng.choice([50, 500, 3000])])
            if rng.random() < 0.2:
                commands.append(Delete(key))
            else:
                commands.append(Put(key, b"v%d" % rng.randrange(10**6) * rng.randint(1, 5)))
        index += 1
        machine_of(storage).apply(index, encode_entry(Batch(tuple(commands), index)))
    return index


def test_random_workload_log_replays_to_lmdb_after_every_compaction(tmp_path: Path) -> None:
    rng = random.Random(7)
    storage = open_storage(tmp_path, CONFIG)
    index = 0
    for round_ in range(4):
        index = random_workload(storage, rng, 400, index)
        before = storage.commit_log.size_bytes
        result = compact(
            storage.commit_log, storage.store, KEEP_NO_TOMBSTONES, CONFIG.segment_bytes
        )
        assert result.records_dropped > 0, round_
        assert storage.commit_log.size_bytes < before
        assert state_from_log(storage) == state(storage), round_
    # With the active segment rolled first, the log holds exactly one record per live key.
    storage.commit_log.roll()
    compact(storage.commit_log, storage.store, KEEP_NO_TOMBSTONES, CONFIG.segment_bytes)
    records = list(storage.commit_log.read(0))
    assert all(r.op is RecordOp.PUT for r in records)
    assert sorted(r.key for r in records) == sorted(state(storage))
    storage.close()
    # and LMDB rebuilt from the compacted log is identical, create versions included
    expected = state_from_log(open_storage(tmp_path, CONFIG))
    LmdbStore.destroy(tmp_path / STATE_DIR)
    rebuilt = open_storage(tmp_path, CONFIG)
    assert state(rebuilt) == expected
    rebuilt.close()


def test_offsets_are_kept_and_a_removed_offset_reads_as_the_next(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, CONFIG)
    for i in range(1, 301):
        machine_of(storage).apply(i, encode_entry(Batch((Put(b"k%d" % (i % 10), b"x" * 50),), i)))
    storage.commit_log.roll()
    compact(storage.commit_log, storage.store, KEEP_NO_TOMBSTONES, CONFIG.segment_bytes)
    kept = [r.offset for r in storage.commit_log.read(0)]
    assert kept == list(range(291, 301))  # the last put of each of the 10 keys
    assert next(storage.commit_log.read(5)).offset == 291
    storage.close()


def test_tombstones_stay_inside_the_retention_window(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, CONFIG)
    machine = machine_of(storage)
    machine.apply(1, encode_entry(Batch((Put(b"a", b"1"), Put(b"b", b"2")), 1_000)))
    machine.apply(2, encode_entry(Batch((Delete(b"a"),), 2_000)))  # offset 3, at t=2s
    machine.apply(3, encode_entry(Batch((Delete(b"b"),), 9_000)))  # offset 4, at t=9s
    storage.commit_log.roll()
    by_time = CompactionPolicy(tombstone_retention_ms=5_000, tombstone_retention_offsets=0)
    compact(storage.commit_log, storage.store, by_time, CONFIG.segment_bytes, now_ms=10_000)
    assert [(r.offset, r.key) for r in storage.commit_log.read(0)] == [(4, b"b")]
    by_offsets = CompactionPolicy(tombstone_retention_ms=0, tombstone_retention_offsets=1)
    compact(storage.commit_log, storage.store, by_offsets, CONFIG.segment_bytes, now_ms=10_000)
    assert [r.offset for r in storage.commit_log.read(0)] == [4]  # head - 4 < 1
    compact(storage.commit_log, storage.store, KEEP_NO_TOMBSTONES, CONFIG.segment_bytes)
    assert list(storage.commit_log.read(0)) == []
    storage.close()


def test_a_reader_survives_a_compaction_under_it(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, CONFIG)
    for i in range(1, 401):
        machine_of(storage).apply(i, encode_entry(Batch((Put(b"k%d" % (i % 40), b"y" * 80),), i)))
    storage.commit_log.roll()
    reader = storage.commit_log.read(0)
    first = [next(reader).offset for _ in range(5)]
    compact(storage.commit_log, storage.store, KEEP_NO_TOMBSTONES, CONFIG.segment_bytes)
    rest = [r.offset for r in reader]
    offsets = first + rest
    assert offsets == sorted(set(offsets))  # strictly increasing, no error
    assert set(range(361, 401)) <= set(offsets)  # every live record is seen
    storage.close()


@pytest.mark.parametrize("step", ["staged", "manifest", "installing", "installed"])
def test_a_crash_at_any_step_leaves_the_old_set_or_the_new(
    tmp_path: Path, step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(11)
    storage = open_storage(tmp_path / "crash", CONFIG)
    index = random_workload(storage, rng, 300, 0)
    storage.commit_log.roll()
    live = state(storage)
    old_records = [tuple(r) for r in storage.commit_log.read(0)]
    storage.close()
    # the outcome of the same compaction without a crash, on a copy
    shutil.copytree(tmp_path / "crash", tmp_path / "clean")
    clean = open_storage(tmp_path / "clean", CONFIG)
    compact(clean.commit_log, clean.store, KEEP_NO_TOMBSTONES, CONFIG.segment_bytes)
    new_records = [tuple(r) for r in clean.commit_log.read(0)]
    clean.close()
    assert new_records != old_records

    storage = open_storage(tmp_path / "crash", CONFIG)

    class Crash(Exception):
        pass

    def crash_at(name: str) -> None:
        if name == step:
            raise Crash(name)

    monkeypatch.setattr(segment_swap, "crash_hook", crash_at)
    with pytest.raises(Crash):
        compact(storage.commit_log, storage.store, KEEP_NO_TOMBSTONES, CONFIG.segment_bytes)
    monkeypatch.undo()
    storage.commit_log.close()
    storage.store.close()  # the process dies here; the next open recovers

    reopened = open_storage(tmp_path / "crash", CONFIG)
    records = [tuple(r) for r in reopened.commit_log.read(0)]
    assert records in (old_records, new_records), step
    assert records == (new_records if step != "staged" else old_records)
    assert state(reopened) == live
    assert state_from_log(reopened) == live
    log_dir = tmp_path / "crash" / LOG_DIR
    assert not (log_dir / segment_swap.MANIFEST).exists()
    assert not (log_dir / segment_swap.STAGING).exists()
    reopened.close()
    LmdbStore.destroy(tmp_path / "crash" / STATE_DIR)
    replayed = open_storage(tmp_path / "crash", CONFIG)
    assert state(replayed) == live
    replayed.close()
    assert index > 0


def test_compaction_refuses_to_copy_a_corrupt_record(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, CONFIG)
    for i in range(1, 200):
        machine_of(storage).apply(i, encode_entry(Batch((Put(b"k%d" % (i % 7), b"z" * 90),), i)))
    storage.commit_log.roll()
    first = storage.commit_log.closed_segments()[0].log_path
    data = bytearray(first.read_bytes())
    data[300] ^= 0x40
    first.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError) as info:
        compact(storage.commit_log, storage.store, KEEP_NO_TOMBSTONES, CONFIG.segment_bytes)
    assert info.value.path == first
    assert not (tmp_path / LOG_DIR / segment_swap.MANIFEST).exists()  # nothing was swapped
    storage.close()


def test_the_log_knows_up_to_where_records_may_be_missing(tmp_path: Path) -> None:
    """``compacted_through``: a lagging replica may pull a range above it (every record is
    there) and must install the whole state below it (node/kv_service.complete_log_range)."""
    storage = open_storage(tmp_path / "n", CONFIG)
    log = storage.commit_log
    index = random_workload(storage, random.Random(3), 200, 0)
    assert log.segment_count > 2
    assert log.compacted_through == 0  # nothing was ever compacted in this process
    closed_end = log.closed_segments()[-1].last_offset
    compact(log, storage.store, KEEP_NO_TOMBSTONES, CONFIG.segment_bytes)
    assert log.compacted_through == closed_end
    # while a compaction runs (it holds the lock), no complete range can be promised
    with log.rewriting:
        assert log.rewriting.locked()
    random_workload(storage, random.Random(4), 50, index)
    assert log.compacted_through == closed_end  # appends do not move it
    storage.close()
    reopened = open_storage(tmp_path / "n", CONFIG)
    try:
        # after a restart nobody knows what was compacted: the closed segments count
        assert (
            reopened.commit_log.compacted_through
            == reopened.commit_log.closed_segments()[-1].last_offset
        )
    finally:
        reopened.close()


# -- the dirty ratio: a background pass rewrites only what pays ------------------------------


def _put_range(storage: NodeStorage, keys: range, index: int, tag: bytes) -> int:
    for start in range(keys.start, keys.stop, 10):
        index += 1
        batch = tuple(
            Put(b"key/%05d" % i, tag + b"-%05d" % i * 4)
            for i in range(start, min(start + 10, keys.stop))
        )
        machine_of(storage).apply(index, encode_entry(Batch(batch, index)))
    return index


def _inodes(storage: NodeStorage) -> dict[str, int]:
    return {p.name: p.stat().st_ino for p in (storage.data_dir / LOG_DIR).glob("*.log")}


def test_a_pass_over_unique_keys_rewrites_nothing(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, CONFIG)
    _put_range(storage, range(2000), 0, b"a")
    closed = storage.commit_log.closed_segments()
    assert len(closed) > 3
    before = _inodes(storage)
    result = compact(
        storage.commit_log, storage.store, KEEP_NO_TOMBSTONES, CONFIG.segment_bytes,
        min_dirty_ratio=0.5,
    )  # fmt: skip
    assert result.segments_before == 0 and result.bytes_before == 0
    assert result.segments_skipped == len(closed)
    assert result.bytes_skipped == sum(s.size for s in closed)
    assert _inodes(storage) == before  # not one segment was rewritten
    assert state_from_log(storage) == state(storage)


def test_a_pass_rewrites_only_the_segments_worth_it(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, CONFIG)
    index = _put_range(storage, range(1000), 0, b"a")  # segments of keys 0..999, version a
    first_round = {s.log_path.name for s in storage.commit_log.closed_segments()}
    index = _put_range(storage, range(1000), index, b"b")  # all of them overwritten
    _put_range(storage, range(1000, 2000), index, b"c")  # then new keys only
    storage.commit_log.roll()
    closed = storage.commit_log.closed_segments()
    before = _inodes(storage)
    result = compact(
        storage.commit_log, storage.store, KEEP_NO_TOMBSTONES, CONFIG.segment_bytes,
        min_dirty_ratio=0.5,
    )  # fmt: skip
    assert result.segments_skipped > 0
    assert result.bytes_reclaimed > 0
    after = _inodes(storage)
    rewritten = {name for name, inode in before.items() if after.get(name) != inode}
    # Every segment of the overwritten first round went, and no segment of new keys only.
    assert first_round - {s.log_path.name for s in closed[-1:]} <= rewritten
    assert result.segments_before + result.segments_skipped == len(closed)
    assert state_from_log(storage) == state(storage)
    # A forced pass (ratio 0) then leaves exactly one record per live key.
    compact(storage.commit_log, storage.store, KEEP_NO_TOMBSTONES, CONFIG.segment_bytes)
    records = list(storage.commit_log.read(0))
    assert len(records) == len(state(storage)) == 2000


def test_a_compaction_that_meets_a_full_disk_leaves_the_log_whole_and_can_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno  # noqa: PLC0415

    from node.storage import compaction  # noqa: PLC0415

    storage = open_storage(tmp_path, CONFIG)
    for i in range(1, 301):
        machine_of(storage).apply(i, encode_entry(Batch((Put(b"k%d" % (i % 10), b"x" * 50),), i)))
    storage.commit_log.roll()
    before = state_from_log(storage)
    real_write = compaction._StagedWriter.write
    calls = []

    def full_disk(self: object, frames: list[tuple[int, bytes]]) -> None:
        calls.append(len(frames))
        real_write(self, frames)  # type: ignore[arg-type]
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(compaction._StagedWriter, "write", full_disk)
    with pytest.raises(OSError, match="No space"):
        compact(storage.commit_log, storage.store, KEEP_NO_TOMBSTONES, CONFIG.segment_bytes)
    assert calls  # it had staged a segment when the disk filled
    log_dir = tmp_path / LOG_DIR
    assert not segment_swap.staging_dir(log_dir).exists()  # the staged copy is gone
    assert state_from_log(storage) == before  # the old segments are untouched
    monkeypatch.setattr(compaction._StagedWriter, "write", real_write)
    compact(storage.commit_log, storage.store, KEEP_NO_TOMBSTONES, CONFIG.segment_bytes)
    assert [r.offset for r in storage.commit_log.read(0)] == list(range(291, 301))
    storage.close()
