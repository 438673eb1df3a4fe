"""File data written since the file's last fsync, kept so that a power cut can drop it.

The filesystem writes through to the backing file at once (so reads, mmap and
stat need nothing of their own) and keeps here, per inode, what a power cut must
bring back: the file's size at its last fsync and the content of each 4 KiB
block of that durable size that has been overwritten or truncated away since.
An fsync of the file makes everything durable (the blocks are forgotten); a
power cut writes the saved blocks back and truncates to the durable size.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

BLOCK = 4096


@dataclass
class FileUndo:
    durable_size: int
    blocks: dict[int, bytes] = field(default_factory=dict)

    def save(self, fd: int, start: int, stop: int) -> None:
        """Keep the durable content of every block in [start, stop) before it changes."""
        stop = min(stop, self.durable_size)
        if start >= stop:
            return
        for block in range(start // BLOCK, (stop - 1) // BLOCK + 1):
            if block not in self.blocks:
                self.blocks[block] = os.pread(fd, BLOCK, block * BLOCK)

    @property
    def held_bytes(self) -> int:
        return sum(len(b) for b in self.blocks.values())

    def restore(self, fd: int) -> None:
        for block, content in self.blocks.items():
            os.pwrite(fd, content, block * BLOCK)
        os.ftruncate(fd, self.durable_size)


class PendingData:
    """Every file's data not yet fsynced, keyed by the backing file's inode number."""

    def __init__(self) -> None:
        self.files: dict[int, FileUndo] = {}

    def _undo(self, fd: int) -> FileUndo:
        st = os.fstat(fd)
        undo = self.files.get(st.st_ino)
        if undo is None:
            undo = self.files[st.st_ino] = FileUndo(st.st_size)
        return undo

    def before_write(self, fd: int, offset: int, length: int) -> None:
        self._undo(fd).save(fd, offset, offset + length)

    def before_truncate(self, fd: int, length: int) -> None:
        undo = self._undo(fd)
        undo.save(fd, length, max(length, undo.durable_size))

    def synced(self, fd: int) -> None:
        self.files.pop(os.fstat(fd).st_ino, None)

    def forget(self, inode: int) -> None:
        self.files.pop(inode, None)

    @property
    def held_bytes(self) -> int:
        return sum(u.held_bytes for u in self.files.values())

    def drop(self, paths_by_inode: dict[int, str]) -> int:
        """The power cut: bring every file still present back to its durable content.
        Returns how many files were rolled back."""
        rolled = 0
        for inode, undo in self.files.items():
            path = paths_by_inode.get(inode)
            if path is None:
                continue  # the file itself is gone (its creation was not durable either)
            fd = os.open(path, os.O_WRONLY)
            try:
                undo.restore(fd)
                os.fsync(fd)
            finally:
                os.close(fd)
            rolled += 1
        self.files.clear()
        return rolled
