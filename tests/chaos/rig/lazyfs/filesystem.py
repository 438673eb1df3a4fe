"""The lazy filesystem: a passthrough to a backing directory that can lose, on
a power cut, everything not made durable (pending.py: file data; entries.py:
directory entries), and can play a full disk (a byte cap: writes and fallocate
past it answer ENOSPC, statfs reports it).

mfusepy's high-level API calls these methods from several threads; one lock
keeps the bookkeeping consistent. Handles are the backing files' descriptors.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from typing import Any

from mfusepy import FuseOSError, Operations

from tests.chaos.rig.lazyfs.entries import PendingEntries
from tests.chaos.rig.lazyfs.pending import PendingData

logger = logging.getLogger(__name__)

_STAT_KEYS = (
    "st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks",
    "st_atime_ns", "st_mtime_ns", "st_ctime_ns", "st_ino", "st_dev",
)  # fmt: skip


_KERNEL_FLAGS = os.O_TRUNC | os.O_APPEND
"""Done here or by the kernel, never by the backing descriptor: truncation goes
through the bookkeeping, and the kernel already turns appends into offsets."""


NAME_MODELS = ("strict", "journal")
"""When a name change (create, unlink, rename) becomes durable. ``strict``: once a
directory it changed is fsynced (POSIX; entries.py). ``journal``: also at any fsync
of a file, which commits every name change made before it, as a journaling
filesystem (ext4, XFS) does in practice."""


def _backing_flags(flags: int) -> int:
    """Write-only opens become read-write: saving a block's durable content reads it."""
    flags &= ~_KERNEL_FLAGS
    if flags & os.O_ACCMODE == os.O_WRONLY:
        flags = flags & ~os.O_ACCMODE | os.O_RDWR
    return flags


def _unallocated(fd: int, start: int, end: int) -> int:
    """Bytes of [start, end) the file has no blocks for yet (holes, and past its end):
    what writing there would allocate (a backing filesystem without SEEK_HOLE
    reports no holes)."""
    if start >= os.fstat(fd).st_size:
        return end - start
    missing = 0
    position = start
    while position < end:
        hole = os.lseek(fd, position, os.SEEK_HOLE)
        if hole >= end:
            break
        try:
            data = os.lseek(fd, hole, os.SEEK_DATA)
        except OSError:  # ENXIO: only a hole up to the end of the file
            data = end
        missing += min(data, end) - hole
        position = data
    return missing


def _used_bytes(root: str) -> int:
    used = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                used += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except FileNotFoundError:
                continue
    return used


def paths_by_inode(root: str) -> dict[int, str]:
    found: dict[int, str] = {}
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            found[os.lstat(path).st_ino] = path
    return found


class LazyFS(Operations):  # type: ignore[misc]
    use_ns = True

    def __init__(self, root: str, trash: str, names: str = "strict") -> None:
        if names not in NAME_MODELS:
            raise ValueError(f"names: one of {NAME_MODELS}")
        self.names = names
        self.root = os.path.realpath(root)
        self.data = PendingData()
        self.entries = PendingEntries(self.root, trash)
        self.cap: int | None = None
        self.refused = 0
        """How many writes and fallocates the cap refused (ENOSPC)."""
        self.used = _used_bytes(self.root)
        self._mutex = threading.RLock()

    def _path(self, path: str) -> str:
        return self.root + path

    # -- the control channel's operations --------------------------------------------

    def set_cap(self, cap: int | None) -> None:
        with self._mutex:
            self.cap = cap
            self.used = _used_bytes(self.root)

    def stats(self) -> dict[str, Any]:
        with self._mutex:
            return {
                "pending_files": len(self.data.files),
                "pending_bytes": self.data.held_bytes,
                "pending_entries": len(self.entries.changes),
                "cap": self.cap,
                "used": self.used,
                "refused": self.refused,
            }

    def power_cut(self) -> dict[str, int]:
        """Drop everything not durable. Called once nothing is mounted any more."""
        with self._mutex:
            skipped = self.entries.drop()
            files = self.data.drop(paths_by_inode(self.root))
            return {"files_rolled_back": files, "entry_undos_skipped": skipped}

    def keep_everything(self) -> None:
        with self._mutex:
            self.entries.make_all_durable()
            self.data.files.clear()

    # -- space ------------------------------------------------------------------------

    def _check_space(self, fd: int, start: int, end: int) -> int:
        """Refuse to allocate past the cap; returns the file's allocation before the change."""
        if self.cap is not None and self.used + _unallocated(fd, start, end) > self.cap:
            self.refused += 1
            raise FuseOSError(errno.ENOSPC)
        return int(os.fstat(fd).st_blocks)

    def _account(self, fd: int, blocks_before: int) -> None:
        self.used += (os.fstat(fd).st_blocks - blocks_before) * 512

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._path(path))
        stats = {
            key: getattr(st, key)
            for key in (
                "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                "f_files", "f_ffree", "f_favail", "f_namemax",
            )
        }  # fmt: skip
        if self.cap is not None:
            free = max(0, self.cap - self.used) // st.f_frsize
            stats["f_blocks"] = self.cap // st.f_frsize
            stats["f_bfree"] = stats["f_bavail"] = free
        return stats

    # -- metadata ---------------------------------------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = os.fstat(fh) if fh is not None else os.lstat(self._path(path))
        return {key: getattr(st, key) for key in _STAT_KEYS}

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._path(path), amode):
            raise FuseOSError(errno.EACCES)
        return 0

    def readdir(self, path: str, fh: int) -> list[str | tuple[str, dict[str, int], int]]:
        # With use_ino the inode numbers must be given: readdir(3) hides entries of inode 0.
        entries: list[str | tuple[str, dict[str, int], int]] = [".", ".."]
        with os.scandir(self._path(path)) as found:
            for entry in found:
                st = entry.stat(follow_symlinks=False)
                entries.append((entry.name, {"st_mode": st.st_mode, "st_ino": st.st_ino}, 0))
        return entries

    def readlink(self, path: str) -> str:
        return os.readlink(self._path(path))

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._path(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.lchown(self._path(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        if times is None:
            os.utime(self._path(path), follow_symlinks=False)
        else:
            os.utime(self._path(path), ns=times, follow_symlinks=False)
        return 0

    # -- directory entries ----------------------------------------------------------

    def mknod(self, path: str, mode: int, dev: int) -> int:
        with self._mutex:
            os.mknod(self._path(path), mode, dev)
            self.entries.created(path)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        with self._mutex:
            os.mkdir(self._path(path), mode)
            self.entries.created(path)
        return 0

    def symlink(self, target: str, source: str) -> int:
        with self._mutex:
            os.symlink(source, self._path(target))
            self.entries.created(target)
        return 0

    def link(self, target: str, source: str) -> int:
        with self._mutex:
            os.link(self._path(source), self._path(target))
            self.entries.created(target)
        return 0

    def unlink(self, path: str) -> int:
        with self._mutex:
            st = os.lstat(self._path(path))
            self.entries.remove(path)
            self.used -= st.st_blocks * 512 if st.st_nlink == 1 else 0
        return 0

    def rmdir(self, path: str) -> int:
        with self._mutex:
            if os.listdir(self._path(path)):
                raise FuseOSError(errno.ENOTEMPTY)
            self.entries.remove(path)
        return 0

    def rename(self, old: str, new: str) -> int:
        with self._mutex:
            self.entries.rename(old, new)
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        with self._mutex:
            fd = os.open(self._path(path), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self.entries.synced_directory(path)
        return 0

    # -- files ------------------------------------------------------------------------

    def create(self, path: str, mode: int, fi: int | None = None) -> int:
        flags = (fi or 0) | os.O_CREAT
        with self._mutex:
            existed = os.path.lexists(self._path(path))
            fd = os.open(self._path(path), _backing_flags(flags), mode)
            if not existed:
                self.entries.created(path)
            if flags & os.O_TRUNC:
                self._truncate_fd(fd, 0)
        return fd

    def open(self, path: str, flags: int) -> int:
        with self._mutex:
            fd = os.open(self._path(path), _backing_flags(flags))
            if flags & os.O_TRUNC:
                self._truncate_fd(fd, 0)
        return fd

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self._mutex:
            blocks = self._check_space(fh, offset, offset + len(data))
            self.data.before_write(fh, offset, len(data))
            written = os.pwrite(fh, data, offset)
            self._account(fh, blocks)
        return written

    def _truncate_fd(self, fd: int, length: int) -> None:
        blocks = os.fstat(fd).st_blocks
        self.data.before_truncate(fd, length)
        os.ftruncate(fd, length)
        self._account(fd, blocks)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        with self._mutex:
            if fh is not None:
                self._truncate_fd(fh, length)
                return 0
            fd = os.open(self._path(path), os.O_RDWR)
            try:
                self._truncate_fd(fd, length)
            finally:
                os.close(fd)
        return 0

    def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
        if mode != 0:
            raise FuseOSError(errno.EOPNOTSUPP)
        with self._mutex:
            blocks = self._check_space(fh, offset, offset + size)
            self.data.before_truncate(fh, os.fstat(fh).st_size)  # records the durable size
            os.posix_fallocate(fh, offset, size)
            self._account(fh, blocks)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self._mutex:
            if datasync:
                os.fdatasync(fh)
            else:
                os.fsync(fh)
            self.data.synced(fh)
            if self.names == "journal":
                self.entries.make_all_durable()
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0
