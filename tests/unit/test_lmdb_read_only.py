"""ReadOnlyStore: another process's read-only view of a node's LMDB (the HTTP workers).

LMDB must not be opened twice in one process, so the owner (the writer) runs in a
child process here, driven line by line over its stdin, as a node's main process
would write while a worker reads.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from node.storage.lmdb_store import ReadOnlyStore, StoredValue

OWNER = r"""
import shutil, sys
from pathlib import Path
from node.storage.lmdb_store import LmdbStore, StoredValue
path = Path(sys.argv[1])
store = LmdbStore.open(path, 64 * 1024)
offset = 0
for line in sys.stdin:
    command, _, arg = line.strip().partition(" ")
    if command == "write":  # arg keys of 4 KiB (the map grows)
        changes = []
        for i in range(int(arg)):
            offset += 1
            changes.append((b"k%05d" % i, StoredValue(offset, offset, b"v" * 4096)))
        store.write(changes, offset, offset)
    elif command == "replace":  # a state install: the whole directory swapped
        staging = path.with_name("staging")
        shutil.rmtree(staging, ignore_errors=True)
        other = LmdbStore.open(staging, 64 * 1024)
        other.write([(b"installed", StoredValue(7, 7, b"new"))], 1, 1000)
        other.close()
        store.replace_with(staging)
    print("done", store.map_size, flush=True)
"""


class Owner:
    def __init__(self, path: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", OWNER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def do(self, command: str) -> int:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline().split()
        assert answer[0] == "done", answer
        return int(answer[1])


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[Owner]:
    running = Owner(tmp_path / "state")
    try:
        yield running
    finally:
        assert running.process.stdin is not None
        running.process.stdin.close()
        running.process.wait(timeout=10)


def test_a_reader_sees_each_commit_across_map_growth_and_a_swapped_directory(
    owner: Owner, tmp_path: Path
) -> None:
    first_size = owner.do("write 1")
    reader = ReadOnlyStore(tmp_path / "state")
    try:
        assert reader.applied_offset == 1
        grown = owner.do("write 200")  # 800 KiB into a 64 KiB map: it grows
        assert grown > first_size
        assert reader.applied_offset == 201  # read from LMDB's meta, not cached
        assert reader.get(b"k00199") == StoredValue(201, 201, b"v" * 4096)
        with reader.reader() as view:
            assert len(view.scan(b"k", None, 1000)) == 200
        owner.do("replace")
        assert reader.get(b"installed") == StoredValue(7, 7, b"new")
        assert reader.get(b"k00000") is None
        assert reader.applied_offset == 1000
    finally:
        reader.close()
