from __future__ import annotations

import logging
from pathlib import Path

import pytest

from node.errors import CorruptLogError
from node.storage.commit_log import CommitLog
from node.storage.config import StorageConfig
from node.storage.record import PREFIX, Record, RecordOp, encode_entry_records, encode_record


def make_records(offsets: list[int], value_size: int = 40) -> list[Record]:
    return [
        Record(o, o * 10, 1_700_000_000_000 + o, RecordOp.PUT, b"key/%06d" % o, b"v" * value_size)
        for o in offsets
    ]


def offsets_from(log: CommitLog, start: int) -> list[int]:
    return [r.offset for r in log.read(start)]


def test_append_then_read_returns_every_field(tmp_path: Path, small_config: StorageConfig) -> None:
    log = CommitLog.open(tmp_path, small_config)
    records = make_records([1, 2, 3])
    records.append(Record(4, 41, 7, RecordOp.DELETE, b"key/000001"))
    log.append(records)
    assert list(log.read(1)) == records
    assert (log.first_offset, log.last_offset, log.next_offset) == (1, 4, 5)


def test_missing_offset_reads_from_the_next_greater_one(
    tmp_path: Path, small_config: StorageConfig
) -> None:
    log = CommitLog.open(tmp_path, small_config)
    log.append(make_records([2, 5, 9, 10, 30]))
    assert offsets_from(log, 0) == [2, 5, 9, 10, 30]
    assert offsets_from(log, 3) == [5, 9, 10, 30]
    assert offsets_from(log, 11) == [30]
    assert offsets_from(log, 31) == []


def test_offsets_must_increase(tmp_path: Path, small_config: StorageConfig) -> None:
    log = CommitLog.open(tmp_path, small_config)
    log.append(make_records([1, 2]))
    with pytest.raises(ValueError, match="not above the log head"):
        log.append(make_records([2]))
    with pytest.raises(ValueError, match="not above the log head"):
        log.append(make_records([5, 4]))


def test_segments_roll_and_reads_cross_them(tmp_path: Path, small_config: StorageConfig) -> None:
    log = CommitLog.open(tmp_path, small_config)
    for start in range(1, 1001, 10):
        log.append(make_records(list(range(start, start + 10))))
    assert log.segment_count > 5
    names = sorted(p.name for p in tmp_path.glob("*.log"))
    assert names[0] == "00000000000000000001.log"
    assert offsets_from(log, 1) == list(range(1, 1001))
    assert offsets_from(log, 777) == list(range(777, 1001))
    # every closed segment has its index on disk
    assert len(list(tmp_path.glob("*.index"))) == log.segment_count - 1


def test_reopen_keeps_everything_and_continues(tmp_path: Path, small_config: StorageConfig) -> None:
    log = CommitLog.open(tmp_path, small_config)
    for start in range(1, 501, 10):
        log.append(make_records(list(range(start, start + 10))))
    log.close()
    reopened = CommitLog.open(tmp_path, small_config)
    assert reopened.last_offset == 500
    assert reopened.next_offset == 501
    reopened.append(make_records([501]))
    assert offsets_from(reopened, 1) == list(range(1, 502))


def test_sparse_index_binary_search_lands_at_or_before_the_offset(
    tmp_path: Path, small_config: StorageConfig
) -> None:
    config = StorageConfig(segment_bytes=1 << 20, index_interval_bytes=256)
    log = CommitLog.open(tmp_path, config)
    records = make_records(list(range(1, 2001)))
    log.append(records)
    segment = log.active
    # ~100-byte records and a 256-byte interval: an index entry every few records
    assert 300 < segment.index_entries < 1000
    positions = {}
    position = 0
    for record in records:
        positions[record.offset] = position
        position += len(encode_record(record))
    for offset in (1, 2, 3, 999, 1000, 1999, 2000):
        found = segment.position_for(offset)
        assert found <= positions[offset]
        assert positions[offset] - found < 256 + 200  # within one index interval
        assert next(segment.read_from(offset)).offset == offset
    in_memory = [segment.position_for(offset) for offset in range(0, 2003)]
    # Closed, the segment keeps its index in its file only, and searches it there.
    entries = segment.index_entries
    log.roll()
    assert len(segment._index_offsets) == len(segment._index_positions) == 0
    assert segment.index_entries == entries
    assert [segment.position_for(offset) for offset in range(0, 2003)] == in_memory
    log.close()
    reopened = CommitLog.open(tmp_path, config)
    closed = reopened.closed_segments()[0]
    assert len(closed._index_offsets) == 0 and closed.index_entries == entries
    assert [closed.position_for(offset) for offset in range(0, 2003)] == in_memory
    assert [r.offset for r in reopened.read(1)] == list(range(1, 2001))
    assert len(list(closed.sample(16))) >= 16


def test_closed_segment_without_index_rebuilds_it(
    tmp_path: Path, small_config: StorageConfig
) -> None:
    log = CommitLog.open(tmp_path, small_config)
    for start in range(1, 301, 10):
        log.append(make_records(list(range(start, start + 10))))
    first_index = sorted(tmp_path.glob("*.index"))[0]
    first_index.unlink()
    reopened = CommitLog.open(tmp_path, small_config)
    assert first_index.exists()
    assert offsets_from(reopened, 1) == list(range(1, 301))


def test_torn_tail_is_truncated_and_logged(
    tmp_path: Path, small_config: StorageConfig, caplog: pytest.LogCaptureFixture
) -> None:
    log = CommitLog.open(tmp_path, small_config)
    log.append(make_records([1, 2, 3]))
    segment_path = log.active.log_path
    good_size = segment_path.stat().st_size
    log.close()
    torn = encode_record(make_records([4])[0])[:-7]  # a write cut short by a crash
    with open(segment_path, "ab") as f:
        f.write(torn)
    with caplog.at_level(logging.WARNING):
        reopened = CommitLog.open(tmp_path, small_config)
    assert "truncating torn tail" in caplog.text
    assert segment_path.stat().st_size == good_size
    assert offsets_from(reopened, 1) == [1, 2, 3]
    reopened.append(make_records([4]))
    assert offsets_from(reopened, 1) == [1, 2, 3, 4]


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param(b"\x00\x00\x00", id="partial-header"),
        pytest.param(bytes(4096), id="zero-filled"),
    ],
)
def test_other_torn_tails_are_truncated(
    tmp_path: Path, small_config: StorageConfig, tail: bytes
) -> None:
    log = CommitLog.open(tmp_path, small_config)
    log.append(make_records([1, 2]))
    path = log.active.log_path
    log.close()
    with open(path, "ab") as f:
        f.write(tail)
    assert offsets_from(CommitLog.open(tmp_path, small_config), 1) == [1, 2]


def test_bad_checksum_on_the_last_record_is_a_torn_tail(
    tmp_path: Path, small_config: StorageConfig
) -> None:
    log = CommitLog.open(tmp_path, small_config)
    log.append(make_records([1, 2]))  # one entry
    log.append(make_records([3]))  # the next
    path = log.active.log_path
    log.close()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    assert offsets_from(CommitLog.open(tmp_path, small_config), 1) == [1, 2]


def test_corruption_in_the_middle_of_the_active_segment_stops_the_open(
    tmp_path: Path, small_config: StorageConfig
) -> None:
    log = CommitLog.open(tmp_path, small_config)
    log.append(make_records([1, 2, 3]))
    path = log.active.log_path
    log.close()
    record_size = len(encode_record(make_records([1])[0]))
    data = bytearray(path.read_bytes())
    position = record_size + PREFIX.size + 20  # inside record 2's body
    data[position] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError) as info:
        CommitLog.open(tmp_path, small_config)
    assert info.value.path == path
    assert info.value.position == record_size
    assert "checksum mismatch" in str(info.value)
    assert str(path) in str(info.value)


def test_corruption_in_a_closed_segment_is_detected_on_read(
    tmp_path: Path, small_config: StorageConfig
) -> None:
    log = CommitLog.open(tmp_path, small_config)
    for start in range(1, 301, 10):
        log.append(make_records(list(range(start, start + 10))))
    first = sorted(tmp_path.glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    data[PREFIX.size + 40] ^= 0x10  # first record's body
    first.write_bytes(bytes(data))
    reopened = CommitLog.open(tmp_path, small_config)  # closed segments are not rescanned
    with pytest.raises(CorruptLogError) as info:
        list(reopened.read(1))
    assert info.value.path == first
    assert info.value.position == 0


def test_impossible_length_in_the_middle_is_corruption(
    tmp_path: Path, small_config: StorageConfig
) -> None:
    log = CommitLog.open(tmp_path, small_config)
    log.append(make_records([1, 2, 3]))
    path = log.active.log_path
    log.close()
    data = bytearray(path.read_bytes())
    data[0:4] = (0xFFFFFFF0).to_bytes(4, "big")
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError, match="impossible record length"):
        CommitLog.open(tmp_path, small_config)


def test_readers_see_whole_batches_only(tmp_path: Path, small_config: StorageConfig) -> None:
    log = CommitLog.open(tmp_path, small_config)
    log.append(make_records([1, 2]))
    reader = log.read(1)
    assert next(reader).offset == 1
    log.append(make_records([3]))
    assert [r.offset for r in reader] == [2]  # the reader's segment size was fixed at start
    assert offsets_from(log, 1) == [1, 2, 3]


def test_an_entrys_records_encode_as_each_record_alone() -> None:
    records = [
        Record(
            10 + i, 3, 1_700_000_000_000, op, b"k%d" % i, b"v" * i if op is RecordOp.PUT else b"", 7
        )
        for i, op in enumerate([RecordOp.PUT, RecordOp.DELETE, RecordOp.PUT])
    ]
    expected = [(r.offset, encode_record(r, last_of_entry=i == 2)) for i, r in enumerate(records)]
    assert encode_entry_records(records, 9) == expected
    with pytest.raises(ValueError, match="not above the log head"):
        encode_entry_records(records, 10)
    with pytest.raises(ValueError, match="not above the log head"):
        encode_entry_records([records[1], records[0]], 0)
