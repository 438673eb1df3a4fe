"""raft/journal.py: pysyncobj's journal format, entries on disk only, compaction by bytes."""

from __future__ import annotations

import errno
import os
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pysyncobj.journal import FileJournal

from raft.journal import DiskJournal
from raft.syncobj_node import journal_fd

Op = tuple[str, int, bytes]


def entries_of(journal: object) -> list[tuple[bytes, int, int]]:
    return [tuple(journal[i]) for i in range(len(journal))]  # type: ignore[index, arg-type]


def apply(journal: object, op: Op, next_index: list[int]) -> None:
    kind, n, data = op
    if kind == "add":
        journal.add(data, next_index[0], 3)  # type: ignore[attr-defined]
        next_index[0] += 1
    elif kind == "from":
        journal.deleteEntriesFrom(min(n, len(journal)))  # type: ignore[attr-defined, arg-type]
        if len(journal):  # type: ignore[arg-type]
            # As in raft: the next entry follows the last one kept.
            next_index[0] = journal[len(journal) - 1][1] + 1  # type: ignore[index, arg-type]
    elif kind == "to":
        journal.deleteEntriesTo(min(n, len(journal)))  # type: ignore[attr-defined, arg-type]
    else:
        journal.clear()  # type: ignore[attr-defined]


ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "add", "from", "to", "clear"]),
        st.integers(0, 8),
        st.binary(max_size=300),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_it_behaves_like_pysyncobjs_file_journal_and_both_read_each_others_files(
    tmp_path_factory: object, sequence: list[Op]
) -> None:
    root = Path(tmp_path_factory.mktemp("j"))  # type: ignore[attr-defined]
    ours, theirs = DiskJournal(str(root / "ours")), FileJournal(str(root / "theirs"))
    ours_next, theirs_next = [1], [1]
    for op in sequence:
        apply(ours, op, ours_next)
        apply(theirs, op, theirs_next)
        assert entries_of(ours) == entries_of(theirs)
    expected = entries_of(theirs)
    ours._destroy()
    theirs._destroy()
    # Each reads the other's file: the format is pysyncobj's.
    assert entries_of(FileJournal(str(root / "ours"))) == expected
    assert entries_of(DiskJournal(str(root / "theirs"))) == expected
    assert entries_of(DiskJournal(str(root / "ours"))) == expected


def test_slices_are_views_whose_slices_are_lists(tmp_path: Path) -> None:
    journal = DiskJournal(str(tmp_path / "j"))
    for index in range(1, 11):
        journal.add(b"e%d" % index, index, 1)
    view = journal[4:]
    assert len(view) == 6 and view[0] == (b"e5", 5, 1) and view[-1] == (b"e10", 10, 1)
    assert list(view) == [(b"e%d" % i, i, 1) for i in range(5, 11)]
    tail = view[1:3]
    assert tail == [(b"e6", 6, 1), (b"e7", 7, 1)] and isinstance(tail, list)
    assert [entry[1] for entry in reversed(view[1:])] == [10, 9, 8, 7, 6]
    assert not journal[20:]
    journal._destroy()


def test_entries_live_in_the_file_not_in_python_memory(tmp_path: Path) -> None:
    journal = DiskJournal(str(tmp_path / "j"))
    chunk = os.urandom(1024 * 1024)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for index in range(1, 65):  # 64 MiB of entries
            journal.add(chunk, index, 1)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert journal.size_bytes >= 64 * 1024 * 1024
    assert after - before < 1024 * 1024, "the journal kept entries in Python memory"
    assert journal[63] == (chunk, 64, 1)
    journal.deleteEntriesTo(60)
    assert journal.size_bytes < 5 * 1024 * 1024 and journal[0][1] == 61
    journal._destroy()


def test_its_file_descriptor_is_the_journal_file(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    journal = DiskJournal(str(path))
    journal.add(b"\x00entry", 2, 1)
    fd = journal_fd(journal)
    assert fd is not None and os.fstat(fd).st_ino == path.stat().st_ino
    journal._destroy()


def test_raft_meta_survives_reopening(tmp_path: Path) -> None:
    journal = DiskJournal(str(tmp_path / "j"))
    journal.setCurrentTerm(7, "n2")
    journal.setRaftCommitIndex(42)
    journal.onOneSecondTimer()
    journal._destroy()
    reopened = DiskJournal(str(tmp_path / "j"))
    assert (reopened.getCurrentTerm(), reopened.getVotedForNodeId()) == (7, "n2")
    assert reopened.getRaftCommitIndex() == 42
    reopened._destroy()


def test_a_journal_on_a_nearly_full_disk_grows_by_what_it_needs_or_raises_enospc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its file grows with blocks allocated: a full disk is an OSError from add (and the
    journal goes on once space is back), never a SIGBUS on a page of the mapping."""
    import errno  # noqa: PLC0415

    journal = DiskJournal(str(tmp_path / "journal"))
    journal.add(b"first", 1, 1)
    size = os.path.getsize(tmp_path / "journal")
    room = [size + 300_000]  # the disk holds this much journal
    real = os.posix_fallocate

    def allocate(fd: int, offset: int, length: int) -> None:
        if offset + length > room[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", allocate)
    big = b"x" * size  # doubling the file would not fit; what it needs does
    journal.add(big, 2, 1)
    assert size < os.path.getsize(tmp_path / "journal") <= room[0]
    with pytest.raises(OSError, match="No space"):
        journal.add(b"y" * 400_000, 3, 1)
    assert entries_of(journal) == [(b"first", 1, 1), (big, 2, 1)]
    room[0] = 10 * size  # space freed
    journal.add(b"y" * 400_000, 3, 1)
    assert [index for _, index, _ in entries_of(journal)] == [1, 2, 3]
    journal._destroy()


def test_a_filesystem_that_cannot_allocate_ahead_still_grows_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    journal = DiskJournal(str(tmp_path / "j"))
    for index in range(1, 40):
        journal.add(b"x" * 100_000, index, 1)  # past the first MiB: the file grows
    journal._destroy()
    assert len(DiskJournal(str(tmp_path / "j"))) == 39
