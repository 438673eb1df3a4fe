"""Which of its audit exports a node keeps, and deleting the others safely.

Every export is a full copy of the state and its log, so a client that starts
audits in a loop would fill the disk. Each node keeps, of its own exports
(``<audit_dir>/<audit id>/<node id>/``, complete, failed or interrupted alike),
the ``keep`` newest, and of those only the ones younger than ``keep_age_seconds``
(0: no age limit). Newest and age go by the export directory's modification
time, which its last file (the manifest, or error.json) sets when the export
ends. Never deleted, whatever their rank or age: an export being written, and
one being downloaded now or in the last :data:`DOWNLOAD_GRACE_SECONDS` (a client
such as ``rkv audit`` fetches an export file after file).

Deleting is crash-safe. An export is complete when its ``manifest.json`` is
there, so it must never be left half-deleted under its name: the directory is
first renamed (atomic, on the same file system) into
``<audit_dir>/~deleting/<node id>/``, the rename made durable, and only then
removed. A crash leaves either the whole export in place or a leftover under
``~deleting`` (``~`` can start no audit id, so nothing reads it as an audit),
which the next pass removes. Other nodes' exports in a shared audit directory
are never touched; the audit's own directory is removed once it is empty.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from node.state.commands import audit_id_problem
from node.storage.datadir import fsync_directory

logger = logging.getLogger(__name__)

DEFAULT_KEEP = 3
DEFAULT_KEEP_AGE_SECONDS = 24 * 3600.0
DOWNLOAD_GRACE_SECONDS = 120.0
TRASH_NAME = "~deleting"


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    keep: int = DEFAULT_KEEP
    """How many of its newest exports a node keeps (at least 1)."""
    keep_age_seconds: float = DEFAULT_KEEP_AGE_SECONDS
    """Exports older than this are deleted even among the newest; 0: no age limit."""

    def __post_init__(self) -> None:
        if self.keep < 1 or self.keep_age_seconds < 0:
            raise ValueError(f"a retention keeps at least 1 export, not {self!r}")


@dataclass(frozen=True, slots=True)
class ExportDirectory:
    audit_id: str
    path: Path
    mtime_ns: int


def own_exports(audit_dir: Path, replica: str) -> list[ExportDirectory]:
    """This node's export directories under ``audit_dir``, newest first."""
    found: list[ExportDirectory] = []
    try:
        audits = list(os.scandir(audit_dir))
    except FileNotFoundError:
        return found
    for audit in audits:
        if audit_id_problem(audit.name) is not None:
            continue  # ~deleting, stray files: not an audit
        path = Path(audit.path) / replica
        try:
            mtime_ns = path.stat().st_mtime_ns
        except (FileNotFoundError, NotADirectoryError):
            continue
        if path.is_dir():
            found.append(ExportDirectory(audit.name, path, mtime_ns))
    found.sort(key=lambda e: (e.mtime_ns, e.audit_id), reverse=True)
    return found


def beyond_retention(
    exports: list[ExportDirectory],
    policy: RetentionPolicy,
    now_ns: int,
    protected: Collection[str],
) -> list[ExportDirectory]:
    """Of ``exports`` (newest first), those the policy deletes: past the ``keep``
    newest, or older than the age limit; never an audit id in ``protected``."""
    max_age_ns = int(policy.keep_age_seconds * 1e9)
    return [
        export
        for rank, export in enumerate(exports)
        if export.audit_id not in protected
        and (rank >= policy.keep or (max_age_ns > 0 and now_ns - export.mtime_ns > max_age_ns))
    ]


def trash_directory(audit_dir: Path, replica: str) -> Path:
    return audit_dir / TRASH_NAME / replica


def move_to_trash(audit_dir: Path, audit_id: str, replica: str) -> Path:
    """Take the export out of sight in one rename, made durable; returns where it went."""
    trash = trash_directory(audit_dir, replica)
    trash.mkdir(parents=True, exist_ok=True)
    target = trash / f"{audit_id}~{os.urandom(4).hex()}"
    parent = audit_dir / audit_id
    os.rename(parent / replica, target)
    fsync_directory(parent)
    fsync_directory(trash)
    return target


def remove_moved(audit_dir: Path, audit_id: str, moved: Path) -> None:
    """Remove what :func:`move_to_trash` moved, and the audit's directory once empty
    (another node's export may still be in it: then it stays)."""
    shutil.rmtree(moved, ignore_errors=True)
    try:
        (audit_dir / audit_id).rmdir()
    except OSError:
        return
    fsync_directory(audit_dir)


def empty_trash(audit_dir: Path, replica: str) -> None:
    """Finish what deletions interrupted by a crash left behind."""
    trash = trash_directory(audit_dir, replica)
    try:
        leftovers = list(trash.iterdir())
    except FileNotFoundError:
        return
    for leftover in leftovers:
        audit_id = leftover.name.rpartition("~")[0]
        if audit_id_problem(audit_id) is None:
            remove_moved(audit_dir, audit_id, leftover)
        else:
            shutil.rmtree(leftover, ignore_errors=True)


class Downloads:
    """Which exports are being downloaded, and which were in the last
    :data:`DOWNLOAD_GRACE_SECONDS`: retention leaves them alone. Any thread."""

    def __init__(self, grace_seconds: float = DOWNLOAD_GRACE_SECONDS) -> None:
        self._grace = grace_seconds
        self._lock = threading.Lock()
        self._active: dict[str, int] = {}
        self._ended: dict[str, float] = {}

    @contextmanager
    def hold(self, audit_id: str) -> Iterator[None]:
        with self._lock:
            self._active[audit_id] = self._active.get(audit_id, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                left = self._active.pop(audit_id) - 1
                if left:
                    self._active[audit_id] = left
                self._ended[audit_id] = time.monotonic()

    def held(self) -> set[str]:
        """The audit ids being downloaded or downloaded within the grace period."""
        now = time.monotonic()
        with self._lock:
            for audit_id, ended in list(self._ended.items()):
                if now - ended > self._grace:
                    del self._ended[audit_id]
            return set(self._active) | set(self._ended)
