"""The layout of a node's data directory: the names of its files and folders.

::

    <data_dir>/log/              commit-log segments (the source of truth)
    <data_dir>/state/            LMDB (a cache of the log)
    <data_dir>/state.owner       who has LMDB open: the machine's boot id, or "closed"
    <data_dir>/state.installing  present only while a snapshot install swaps the
                                 state in (node/snapshot/install.py)
    <data_dir>/.install-staging/ that install's staging directory
    <data_dir>/raft/             raft's journal and marker (raft/)

:func:`fsync_directory` makes a rename or an unlink in a directory durable;
every swap of files in the data directory ends with it.
"""

from __future__ import annotations

import os
from pathlib import Path

LOG_DIR = "log"
STATE_DIR = "state"
OWNER_FILE = "state.owner"
INSTALL_FLAG_FILE = "state.installing"
"""Written before a snapshot install swaps the state in, removed after."""
INSTALL_STAGING_DIR = ".install-staging"


def make_directories(path: Path, mode: int = 0o777) -> None:
    """``path`` and its missing parents, each new name made durable (its parent
    directory fsynced): a file fsynced inside a directory whose own name was never
    synced can vanish with that name in a power cut. An existing ``path``'s name is
    synced again too (an earlier version created it without)."""
    missing = []
    level = path
    while not level.exists():
        missing.append(level)
        level = level.parent
    for directory in reversed(missing):
        directory.mkdir(mode=mode, exist_ok=True)
    for directory in [path, *missing[1:]]:
        fsync_directory(directory.parent)


def fsync_directory(directory: Path) -> None:
    """Make the directory's entries (renames, new and removed files) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
