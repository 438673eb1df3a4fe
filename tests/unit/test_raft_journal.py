"""raft/ reaches into pysyncobj 0.3.17's journal to make it durable; keep that true."""

from __future__ import annotations

import os
from pathlib import Path

from pysyncobj.journal import createJournal

from raft.syncobj_node import journal_fd


def test_the_journal_file_descriptor_is_found_and_is_the_journal(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    journal = createJournal(str(path))
    journal.add(b"\x00entry", 2, 1)
    fd = journal_fd(journal)
    assert fd is not None
    assert os.fstat(fd).st_ino == path.stat().st_ino
    os.fdatasync(fd)
    journal._destroy()
    reopened = createJournal(str(path))
    assert reopened[len(reopened) - 1] == (b"\x00entry", 2, 1)
    reopened._destroy()


def test_the_in_memory_journal_has_no_file() -> None:
    assert journal_fd(createJournal(None)) is None
