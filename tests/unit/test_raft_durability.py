"""Raft's files after a power cut: the term and vote reach the disk before they are
acted on (raft/meta_file.py), and a journal whose end offset reached the disk before
its last records did opens without them (raft/journal.py)."""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import pytest
from pysyncobj.journal import LAST_RECORD_OFFSET_OFFSET, MetaStorer

from node.storage import datadir
from raft.journal import DiskJournal
from raft.meta_file import DurableMeta, MetaFileError


def test_a_meta_file_written_by_pysyncobj_opens_unchanged(tmp_path: Path) -> None:
    path = str(tmp_path / "raft.journal.meta")
    MetaStorer(path).storeMeta({"currentTerm": 7, "votedForNodeId": "n2", "raftCommitIndex": 40})
    journal = DiskJournal(str(tmp_path / "raft.journal"))
    assert journal.getCurrentTerm() == 7
    assert journal.getVotedForNodeId() == "n2"
    assert journal.getRaftCommitIndex() == 40


def test_the_vote_is_fsynced_before_the_rename_and_the_rename_before_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    meta_path = tmp_path / "raft.journal.meta"

    def fsync(fd: int) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}")
        events.append(f"fsync {Path(target).name}")
        real_fsync(fd)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        events.append(f"rename {Path(src).name} -> {Path(dst).name}")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    journal = DiskJournal(str(tmp_path / "raft.journal"))
    events.clear()
    journal.setCurrentTerm(5, "n1")
    assert events == [
        "fsync raft.journal.meta.tmp",
        "rename raft.journal.meta.tmp -> raft.journal.meta",
        f"fsync {tmp_path.name}",
    ]
    assert DurableMeta(str(meta_path)).getMeta()["votedForNodeId"] == "n1"


@pytest.mark.parametrize("content", [b"", b"\x80\x04garbage", b"\x00" * 64])
def test_an_unreadable_meta_file_stops_the_node_instead_of_forgetting_its_vote(
    tmp_path: Path, content: bytes
) -> None:
    """An empty file is what pysyncobj's write-and-rename can leave after a power cut."""
    (tmp_path / "raft.journal.meta").write_bytes(content)
    with pytest.raises(MetaFileError, match="vote twice"):
        DiskJournal(str(tmp_path / "raft.journal"))


def _journal_with(path: Path, count: int) -> list[int]:
    journal = DiskJournal(str(path))
    starts = []
    for index in range(1, count + 1):
        journal.add(f"command {index}".encode() * 20, index, 2)
        starts.append(journal._starts[-1])
    journal._destroy()
    return starts


def _entries(path: Path) -> list[tuple[int, int]]:
    journal = DiskJournal(str(path))
    try:
        return [(entry[1], entry[2]) for entry in journal]
    finally:
        journal._destroy()


def test_a_record_whose_pages_never_reached_the_disk_is_dropped_with_what_follows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "raft.journal"
    starts = _journal_with(path, 4)
    with open(path, "r+b") as f:  # records 3 and 4: zeros, the end offset says 4 records
        f.seek(starts[2])
        f.write(b"\0" * 400)
    with caplog.at_level(logging.WARNING, logger="raft.journal"):
        assert _entries(path) == [(1, 2), (2, 2)]
    assert "dropped the torn tail" in caplog.text
    journal = DiskJournal(str(path))  # appending goes on after the last whole record
    journal.add(b"again", 3, 2)
    journal._destroy()
    assert _entries(path) == [(1, 2), (2, 2), (3, 2)]


def test_stale_records_past_the_synced_end_are_not_taken_for_new_ones(tmp_path: Path) -> None:
    """After a compaction moved the records down, the bytes past the end still hold old,
    well-formed records; an end offset written back before the new records' pages
    must not make them entries again."""
    path = tmp_path / "raft.journal"
    _journal_with(path, 6)
    journal = DiskJournal(str(path))
    old_end = journal._end
    journal.deleteEntriesTo(3)  # entries 4..6 move to the front; old bytes remain behind
    new_end = journal._end
    journal._destroy()
    with open(path, "r+b") as f:  # the power cut: the old end offset is what the disk has
        f.seek(LAST_RECORD_OFFSET_OFFSET)
        f.write(struct.pack("<I", old_end))
    assert new_end < old_end
    assert _entries(path) == [(4, 2), (5, 2), (6, 2)]


def test_new_directories_are_made_with_durable_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[Path] = []
    real = datadir.fsync_directory

    def recording(directory: Path) -> None:
        synced.append(directory)
        real(directory)

    monkeypatch.setattr(datadir, "fsync_directory", recording)
    target = tmp_path / "a" / "b" / "c"
    datadir.make_directories(target)
    assert target.is_dir()
    assert set(synced) == {tmp_path, tmp_path / "a", tmp_path / "a" / "b"}
    synced.clear()
    datadir.make_directories(target)  # an existing one: its name is synced again
    assert synced == [tmp_path / "a" / "b"]
