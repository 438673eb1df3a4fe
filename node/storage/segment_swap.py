"""Replacing closed segments atomically: either the old set or the new, never a mix.

Protocol (each step durable before the next):

1. the new segment files (``.log`` + ``.index``) are written and fsynced in
   ``<log>/compaction.staging/``;
2. a manifest naming the segments to remove and the ones to install is
   written to ``<log>/compaction.manifest`` (tmp + rename + fsync);
3. roll forward: every staged file is renamed into the log directory
   (replacing an old segment of the same name), removed segments are
   deleted, the directory is fsynced, then the manifest and staging go.

On open, :func:`recover` rolls a present manifest forward (the new set was
complete before the manifest existed) and otherwise discards a staging
directory (the old set was never touched). Every step of the roll-forward is
idempotent, so a crash during recovery is recovered the same way.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from node.storage.datadir import fsync_directory
from node.storage.segment import INDEX_SUFFIX, LOG_SUFFIX

logger = logging.getLogger(__name__)

MANIFEST = "compaction.manifest"
STAGING = "compaction.staging"

crash_hook: Callable[[str], None] = lambda step: None  # noqa: E731
"""Called at each step with its name; tests replace it to simulate a crash there."""


def staging_dir(log_dir: Path) -> Path:
    return log_dir / STAGING


def discard_staging(log_dir: Path) -> None:
    """Remove a staging directory no manifest names (a compaction that failed before its
    swap began: the old segments were never touched)."""
    if not (log_dir / MANIFEST).exists():
        shutil.rmtree(staging_dir(log_dir), ignore_errors=True)


def commit(log_dir: Path, remove: list[str], install: list[str]) -> None:
    """Swap segments named ``remove`` for the staged ones named ``install`` (base names)."""
    staging = staging_dir(log_dir)
    staging.mkdir(exist_ok=True)  # empty when compaction kept nothing
    fsync_directory(staging)
    crash_hook("staged")
    manifest = log_dir / MANIFEST
    tmp = manifest.with_suffix(".tmp")
    tmp.write_text(json.dumps({"remove": remove, "install": install}))
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, manifest)
    fsync_directory(log_dir)
    crash_hook("manifest")
    roll_forward(log_dir)


def roll_forward(log_dir: Path) -> None:
    manifest = json.loads((log_dir / MANIFEST).read_text())
    staging = staging_dir(log_dir)
    install: list[str] = manifest["install"]
    for i, name in enumerate(install):
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX):
            staged = staging / (name + suffix)
            if staged.exists():
                os.replace(staged, log_dir / (name + suffix))
        if i == 0:
            crash_hook("installing")
    for name in manifest["remove"]:
        if name not in install:
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX):
                (log_dir / (name + suffix)).unlink(missing_ok=True)
    fsync_directory(log_dir)
    crash_hook("installed")
    shutil.rmtree(staging, ignore_errors=True)
    (log_dir / MANIFEST).unlink(missing_ok=True)
    fsync_directory(log_dir)


def recover(log_dir: Path) -> None:
    """Finish or undo a swap a crash interrupted (called when the log opens)."""
    if (log_dir / MANIFEST).exists():
        logger.warning("finishing a compaction that a crash interrupted in %s", log_dir)
        roll_forward(log_dir)
    elif staging_dir(log_dir).exists():
        logger.warning("discarding an unfinished compaction in %s", log_dir)
        shutil.rmtree(staging_dir(log_dir))
