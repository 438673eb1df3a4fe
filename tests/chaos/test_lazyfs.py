"""The rig's lazy filesystem (tests/chaos/rig/lazyfs/) on a real FUSE mount:
what was made durable survives a power cut, what was not is lost (file data,
mmap pages, directory entries), and the disk-full mode answers ENOSPC at its
cap and recovers when the cap is lifted. Also the bug issue 20 names:
pysyncobj's meta storer (write + rename, no fsync) forgets a vote, and rkv's
journal (raft/meta_file.py) keeps it."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from pysyncobj.journal import MetaStorer

from tests.chaos.rig.lazyfs.mount import LazyMount

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def lazy(tmp_path: Path) -> Iterator[LazyMount]:
    mount = LazyMount(tmp_path / "disk", tmp_path / "mnt").start()
    try:
        yield mount
    finally:
        mount.stop()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_fsynced(path: Path, content: bytes) -> None:
    with open(path, "wb") as f:
        f.write(content)
        f.flush()
        os.fsync(f.fileno())


def _power_cycle(lazy: LazyMount) -> None:
    lazy.power_cut()
    lazy.start()


def test_fsynced_data_survives_a_power_cut_and_unsynced_data_is_lost(lazy: LazyMount) -> None:
    mnt = lazy.mountpoint
    with open(mnt / "log", "wb") as f:
        f.write(b"durable")
        f.flush()
        os.fsync(f.fileno())
        f.write(b" and more")  # written, readable, never fsynced
    _fsync_dir(mnt)
    assert (mnt / "log").read_bytes() == b"durable and more"
    with open(mnt / "log", "r+b") as f:  # an overwrite inside the durable part
        f.write(b"DUR")
    assert lazy.stats()["pending_files"] == 1

    _power_cycle(lazy)

    assert (mnt / "log").read_bytes() == b"durable"
    assert lazy.stats()["pending_files"] == 0


def test_a_truncate_not_fsynced_is_undone(lazy: LazyMount) -> None:
    mnt = lazy.mountpoint
    _write_fsynced(mnt / "f", b"x" * 10_000)
    _fsync_dir(mnt)
    os.truncate(mnt / "f", 10)

    _power_cycle(lazy)

    assert (mnt / "f").read_bytes() == b"x" * 10_000


def test_a_clean_unmount_keeps_everything(lazy: LazyMount) -> None:
    (lazy.mountpoint / "f").write_bytes(b"never fsynced")
    lazy.stop()
    lazy.start()
    assert (lazy.mountpoint / "f").read_bytes() == b"never fsynced"


def test_mmap_pages_msynced_survive_and_dirty_pages_of_a_killed_process_are_lost(
    lazy: LazyMount,
) -> None:
    path = lazy.mountpoint / "journal"
    with open(path, "wb") as f:
        f.truncate(3 * 4096)
        os.fsync(f.fileno())
    _fsync_dir(lazy.mountpoint)
    # A process maps the file, msyncs its first page, dirties the third, dies by SIGKILL.
    program = textwrap.dedent(f"""
        import mmap, os, signal
        fd = os.open({str(path)!r}, os.O_RDWR)
        m = mmap.mmap(fd, 0)
        m[0:6] = b"synced"
        m.flush()
        m[8192:8197] = b"dirty"
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", program], check=False)
    assert done.returncode == -9
    # The kernel still holds the dirty page: it is visible until the power goes.
    assert path.read_bytes()[8192:8197] == b"dirty"

    _power_cycle(lazy)

    content = path.read_bytes()
    assert content[0:6] == b"synced"
    assert content[8192:8197] == b"\0" * 5
    assert len(content) == 3 * 4096


def test_a_rename_is_durable_only_after_its_directory_is_fsynced(lazy: LazyMount) -> None:
    mnt = lazy.mountpoint
    (mnt / "state").write_bytes(b"old")
    lazy.stop()  # a clean unmount: "old" is durable
    lazy.start()
    for name, content in (("a.tmp", b"new-a"), ("b.tmp", b"new-b")):
        _write_fsynced(mnt / name, content)
    os.rename(mnt / "a.tmp", mnt / "state")  # not followed by an fsync of mnt
    assert (mnt / "state").read_bytes() == b"new-a"

    _power_cycle(lazy)

    assert (mnt / "state").read_bytes() == b"old"
    assert sorted(os.listdir(mnt)) == ["state"]  # the temporary files' names were lost too

    _write_fsynced(mnt / "c.tmp", b"new-c")
    os.rename(mnt / "c.tmp", mnt / "state")
    _fsync_dir(mnt)
    _power_cycle(lazy)
    assert (mnt / "state").read_bytes() == b"new-c"
    assert sorted(os.listdir(mnt)) == ["state"]


def test_an_unlink_not_made_durable_comes_back(lazy: LazyMount) -> None:
    mnt = lazy.mountpoint
    (mnt / "sub").mkdir()
    (mnt / "sub" / "keep").write_bytes(b"k")
    lazy.stop()
    lazy.start()
    (mnt / "sub" / "keep").unlink()
    (mnt / "sub" / "other").write_bytes(b"o")
    _fsync_dir(mnt)  # the parent's fsync does not cover sub/'s entries

    _power_cycle(lazy)

    assert sorted(os.listdir(mnt / "sub")) == ["keep"]
    assert (mnt / "sub" / "keep").read_bytes() == b"k"


def test_the_disk_full_mode_answers_enospc_at_the_cap_then_recovers(lazy: LazyMount) -> None:
    mnt = lazy.mountpoint
    used = lazy.stats()["used"]
    cap = used + 64 * 1024
    lazy.set_cap(cap)
    st = os.statvfs(mnt)
    assert st.f_blocks * st.f_frsize == cap
    assert st.f_bavail * st.f_frsize <= 64 * 1024

    written = 0
    with open(mnt / "fill", "wb", buffering=0) as f:
        with pytest.raises(OSError) as full:
            for _ in range(100):
                written += f.write(b"z" * 4096)
        assert full.value.errno == errno.ENOSPC
        with pytest.raises(OSError) as no_room:
            os.posix_fallocate(f.fileno(), written, 1 << 20)
        assert no_room.value.errno == errno.ENOSPC
    assert 0 < written <= 64 * 1024
    assert lazy.stats()["refused"] == 2
    assert (mnt / "fill").stat().st_size == written  # nothing torn past what was accepted

    # A sparse file's holes are not allocated yet: filling them needs room too.
    lazy.set_cap(None)
    with open(mnt / "sparse", "wb") as f:
        f.truncate(1 << 20)
    lazy.set_cap(lazy.stats()["used"] + 64 * 1024)
    with open(mnt / "sparse", "r+b", buffering=0) as f, pytest.raises(OSError) as hole:
        for offset in range(0, 1 << 20, 4096):
            f.seek(offset)
            f.write(b"h" * 4096)
    assert hole.value.errno == errno.ENOSPC

    lazy.set_cap(None)
    with open(mnt / "fill", "ab") as f:
        f.write(b"z" * 200_000)
        os.posix_fallocate(f.fileno(), 0, 300_000)
    assert (mnt / "fill").stat().st_size == 300_000


def test_pysyncobj_meta_storer_forgets_a_vote_on_a_power_cut(lazy: LazyMount) -> None:
    """The bug issue 20 names: write + rename without any fsync."""
    storer = MetaStorer(str(lazy.mountpoint / "journal.meta"))
    storer.storeMeta({"currentTerm": 4, "votedForNodeId": "n1"})
    lazy.stop()  # term 4 is durable
    lazy.start()
    storer.storeMeta({"currentTerm": 5, "votedForNodeId": "n2"})  # the vote granted
    assert storer.getMeta()["votedForNodeId"] == "n2"

    _power_cycle(lazy)

    # The node comes back in term 4 with no memory of its term-5 vote: it may vote again.
    assert storer.getMeta() == {"currentTerm": 4, "votedForNodeId": "n1"}


def _set_term_then_die(journal: Path, term: int, vote: str) -> None:
    """rkv's journal in a process that records a vote and is killed right after."""
    program = textwrap.dedent(f"""
        import os, signal
        from raft.journal import DiskJournal
        DiskJournal({str(journal)!r}).setCurrentTerm({term}, {vote!r})
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    assert subprocess.run([sys.executable, "-c", program], env=env, check=False).returncode == -9


def test_rkv_disk_journal_keeps_a_vote_across_a_power_cut(lazy: LazyMount) -> None:
    """raft/meta_file.py: term and vote fsynced, renamed, the directory fsynced."""
    from raft.journal import DiskJournal  # noqa: PLC0415 (the engine's owner, in a test)

    journal = lazy.mountpoint / "journal"
    _set_term_then_die(journal, 4, "n1")
    lazy.stop()  # term 4 durable whatever the storer does
    lazy.start()
    _set_term_then_die(journal, 5, "n2")

    _power_cycle(lazy)

    restarted = DiskJournal(str(journal))
    try:
        assert (restarted.getCurrentTerm(), restarted.getVotedForNodeId()) == (5, "n2")
    finally:
        restarted._destroy()


def test_in_the_journal_model_a_file_fsync_makes_earlier_name_changes_durable(
    tmp_path: Path,
) -> None:
    lazy = LazyMount(tmp_path / "disk", tmp_path / "mnt", names="journal").start()
    try:
        mnt = lazy.mountpoint
        (mnt / "sub").mkdir()
        (mnt / "sub" / "a").write_bytes(b"never fsynced")
        _write_fsynced(mnt / "b", b"fsynced")  # commits sub/, sub/a and b
        (mnt / "c").write_bytes(b"after the last fsync")

        _power_cycle(lazy)

        assert sorted(os.listdir(mnt)) == ["b", "sub"]
        assert (mnt / "b").read_bytes() == b"fsynced"
        assert (mnt / "sub" / "a").read_bytes() == b""  # its name survived, its data not
    finally:
        lazy.stop()
