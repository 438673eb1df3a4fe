"""Directory entries changed since their directory's last fsync, kept so that a
power cut can undo them.

The model (strict POSIX, as an fsync-happy application must assume): creating,
linking, removing or renaming a name is durable only once a directory it
changed has been fsynced. Until then the change is recorded here; a power cut
undoes the pending changes newest first. A rename changes two directories, and
an fsync of either makes it durable (a journaling filesystem commits a rename
as one transaction). A file's data is another matter (pending.py): a durable
name may still lead to data that was never fsynced.

Removed names are not deleted at once: the file or directory moves to a trash
directory beside the backing directory (same filesystem, so a rename), where a
power cut can fetch it back; it is deleted once the removal is durable.
Undo steps are best effort: one that no longer applies (its name has moved on
through a change that is durable) is skipped and counted.
"""

from __future__ import annotations

import itertools
import os
import shutil
from dataclasses import dataclass


@dataclass
class EntryChange:
    kind: str
    """'create' (a new name: file, directory, link, symlink, node), 'remove', 'rename'."""
    path: str
    """The name created or removed, or a rename's source (relative to the root, '/a/b')."""
    target: str = ""
    """A rename's destination."""
    trashed: str = ""
    """Where a removed name (or the file a rename replaced) waits in the trash."""

    def directories(self) -> set[str]:
        dirs = {os.path.dirname(self.path)}
        if self.target:
            dirs.add(os.path.dirname(self.target))
        return dirs


class PendingEntries:
    def __init__(self, root: str, trash: str) -> None:
        self.root = root
        self.trash = trash
        self.changes: list[EntryChange] = []
        self._numbers = itertools.count()
        os.makedirs(trash, exist_ok=True)

    def backing(self, path: str) -> str:
        return self.root + path

    def _to_trash(self, path: str) -> str:
        trashed = os.path.join(self.trash, str(next(self._numbers)))
        os.rename(self.backing(path), trashed)
        return trashed

    # -- the changes -----------------------------------------------------------------

    def created(self, path: str) -> None:
        self.changes.append(EntryChange("create", path))

    def remove(self, path: str) -> int:
        """Remove ``path`` (file or empty directory); returns the inode it had."""
        inode = os.lstat(self.backing(path)).st_ino
        self.changes.append(EntryChange("remove", path, trashed=self._to_trash(path)))
        return inode

    def rename(self, old: str, new: str) -> None:
        trashed = ""
        if os.path.lexists(self.backing(new)):
            if os.path.isdir(self.backing(new)) and os.listdir(self.backing(new)):
                raise OSError(39, "Directory not empty")  # ENOTEMPTY, as rename(2)
            trashed = self._to_trash(new)
        try:
            os.rename(self.backing(old), self.backing(new))
        except OSError:
            if trashed:
                os.rename(trashed, self.backing(new))
            raise
        self.changes.append(EntryChange("rename", old, target=new, trashed=trashed))

    # -- durability ----------------------------------------------------------------

    def synced_directory(self, directory: str) -> None:
        """An fsync of ``directory``: its pending changes become durable."""
        durable = [c for c in self.changes if directory in c.directories()]
        self.changes = [c for c in self.changes if directory not in c.directories()]
        for change in durable:
            _delete(change.trashed)

    def make_all_durable(self) -> None:
        """A clean unmount: everything that happened stays."""
        for change in self.changes:
            _delete(change.trashed)
        self.changes.clear()

    def drop(self) -> int:
        """The power cut: undo every pending change, newest first. Returns how many
        undo steps did not apply (their names had moved on)."""
        skipped = 0
        for change in reversed(self.changes):
            try:
                self._undo(change)
            except OSError:
                skipped += 1
        self.changes.clear()
        for leftover in os.listdir(self.trash):
            _delete(os.path.join(self.trash, leftover))
        return skipped

    def _undo(self, change: EntryChange) -> None:
        if change.kind == "create":
            _delete(self.backing(change.path), must_exist=True)
        elif change.kind == "remove":
            os.rename(change.trashed, self.backing(change.path))
        else:
            os.rename(self.backing(change.target), self.backing(change.path))
            if change.trashed:
                os.rename(change.trashed, self.backing(change.target))


def _delete(path: str, must_exist: bool = False) -> None:
    if not path:
        return
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif must_exist or os.path.lexists(path):
        os.unlink(path)
