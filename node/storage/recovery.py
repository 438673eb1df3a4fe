"""Opening a node's data directory and bringing LMDB up to the commit log.

The directory's layout is node/storage/datadir.py. An interrupted snapshot
install (its flag file present) discards the log and LMDB: the node starts
empty and the raft marker fills it again.

LMDB runs without fsync on commit. A process crash loses nothing (its pages
are in the kernel), but a machine crash can leave LMDB's files damaged. So
LMDB is discarded and rebuilt from the log when:

- it was left open (not "closed") by an earlier boot of the machine;
- LMDB reports its files damaged;
- it claims an offset the log does not have (the log lost an unsynced tail
  in a power loss while LMDB's pages reached the disk).

Otherwise the records after LMDB's applied offset are replayed into it.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from node.errors import StoreCorruptError
from node.storage.commit_log import CommitLog
from node.storage.config import StorageConfig
from node.storage.datadir import (
    INSTALL_FLAG_FILE,
    INSTALL_STAGING_DIR,
    LOG_DIR,
    OWNER_FILE,
    STATE_DIR,
    fsync_directory,
    make_directories,
)
from node.storage.lmdb_store import LmdbStore
from node.storage.replay import ReplayProgress, replay

logger = logging.getLogger(__name__)

_CLOSED = "closed"
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


@dataclass
class NodeStorage:
    data_dir: Path
    commit_log: CommitLog
    store: LmdbStore
    replayed_records: int
    config: StorageConfig

    def sync(self) -> None:
        """Make every applied entry durable (the commit log; LMDB is rebuilt from it)."""
        self.commit_log.sync()

    def close(self) -> None:
        self.commit_log.close()
        self.store.close()
        _write_owner(self.data_dir, _CLOSED)


def current_boot_id() -> str:
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:  # not Linux: treat every open as a new boot (always distrust)
        return f"unknown-{os.getpid()}"


def _write_owner(data_dir: Path, owner: str) -> None:
    path = data_dir / OWNER_FILE
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(owner)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    # Durable before LMDB is written: a lost rename would leave "closed" from the last
    # clean stop, and LMDB written since (never fsynced) would be trusted after a cut.
    fsync_directory(data_dir)


def _lmdb_trusted(data_dir: Path, boot_id: str) -> bool:
    try:
        owner = (data_dir / OWNER_FILE).read_text().strip()
    except FileNotFoundError:
        return True  # a new data directory, or LMDB never opened
    return owner in (_CLOSED, boot_id)


def _open_store(data_dir: Path, config: StorageConfig, rebuild: bool) -> LmdbStore:
    path = data_dir / STATE_DIR
    if rebuild:
        LmdbStore.destroy(path)
    try:
        return LmdbStore.open(path, config.lmdb_map_size)
    except StoreCorruptError as exc:
        logger.warning("%s: rebuilding LMDB from the commit log", exc)
        LmdbStore.destroy(path)
        return LmdbStore.open(path, config.lmdb_map_size)


def _discard_interrupted_install(data_dir: Path) -> None:
    """An install cut off mid-swap leaves a state that may be half old, half new:
    remove it, so the node starts empty and raft's raft marker fills it again."""
    shutil.rmtree(data_dir / INSTALL_STAGING_DIR, ignore_errors=True)
    flag = data_dir / INSTALL_FLAG_FILE
    if not flag.exists():
        return
    logger.warning(
        "%s: a snapshot install was interrupted; starting from an empty state, "
        "which the leader's raft marker fills again",
        data_dir,
    )
    for name in (LOG_DIR, STATE_DIR, LOG_DIR + ".replaced", STATE_DIR + ".replaced"):
        shutil.rmtree(data_dir / name, ignore_errors=True)
    fsync_directory(data_dir)
    flag.unlink()
    fsync_directory(data_dir)


def open_storage(
    data_dir: Path, config: StorageConfig, progress: ReplayProgress | None = None
) -> NodeStorage:
    make_directories(data_dir, mode=0o700)  # the owner's only
    _discard_interrupted_install(data_dir)
    commit_log = CommitLog.open(data_dir / LOG_DIR, config)
    boot_id = current_boot_id()
    trusted = _lmdb_trusted(data_dir, boot_id)
    if not trusted:
        logger.warning(
            "LMDB was open when the machine went down: rebuilding it from the commit log"
        )
    store = _open_store(data_dir, config, rebuild=not trusted)
    if store.applied_offset >= commit_log.next_offset:
        logger.warning(
            "LMDB has applied offset %d but the commit log ends at %d: "
            "rebuilding LMDB from the commit log",
            store.applied_offset,
            commit_log.next_offset - 1,
        )
        store.close()
        store = _open_store(data_dir, config, rebuild=True)
    _write_owner(data_dir, boot_id)
    replayed = replay(commit_log, store, progress)
    if replayed:
        store.sync()
    return NodeStorage(data_dir, commit_log, store, replayed, config)
