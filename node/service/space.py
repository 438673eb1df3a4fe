"""A node's disk space: its quota, the usage it measures, and the nospace alarm it
raises when it is over the quota or its disk is full.

Usage is what the node's data takes on disk (allocated blocks, so a sparse file
counts what it holds): the commit log, LMDB, the raft journal and marker, and a
snapshot install's staging (node/storage/datadir.py). It is measured every
``--space-check-interval`` seconds with one ``stat`` per file of those few flat
folders, never on the write path. ``--quota-bytes`` bounds it; by default half
the size of the data directory's filesystem when the node starts (a snapshot
install and a full compaction each write a second copy of the state before
dropping the first, so data over half the disk could not always be rebuilt).

A node is out of space when its data is over its quota, when its filesystem
has less than ``free_floor`` bytes free (``--nospace-free-bytes``, at least
1 MiB: whichever of its writers would meet ENOSPC next, the raft journal, a
marker file, a compaction or a snapshot install), or when a write of its own
failed with ENOSPC or LMDB's map full (:meth:`SpaceMonitor.disk_full`, which
any thread may call; the state machine's apply does). It says so once in its
log and in /readyz (``storage``), and raises a ``nospace`` alarm: over quota,
through its own raft (a follower's proposal goes to the leader like any other);
with a full disk, or when its raft is not healthy, by asking another member to
propose it (``relay``: POST /v1/alarms), since a node that cannot write its
raft journal no longer keeps up with raft, and a proposal queued there could
commit late, after an operator disarmed the alarm. A lone node with a full
disk has no member to ask: it says so in its log and /readyz only. It asks again every
check while the condition lasts and its alarm is not raised (a member asked
answers at once, without an entry, when it holds the alarm already), so a
disarm while the disk is still full is followed by a new alarm. The condition
ends when usage is back under the quota and the filesystem has ``free_floor``
bytes free again; the alarm stays until an operator disarms it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from node.errors import RequestError
from node.service.alarms import Proposer, raise_alarm
from node.state.alarm_commands import AlarmKind
from node.state.alarms import Alarm
from node.storage.datadir import INSTALL_STAGING_DIR, LOG_DIR, STATE_DIR

logger = logging.getLogger(__name__)

DEFAULT_QUOTA_FRACTION = 0.5
"""--quota-bytes by default: this part of the data directory's filesystem size."""
DEFAULT_SPACE_CHECK_INTERVAL = 5.0
MIN_FREE_FLOOR = 1024 * 1024
DEFAULT_FREE_FLOOR = 32 * 1024 * 1024
"""--nospace-free-bytes: room for a few raft entries (--max-entry-bytes, 4 MiB), each
written three times (journal, commit log, LMDB), when the alarm is raised."""

_DISK_FULL = "disk full: "
RELAY_AGAIN_SECONDS = 30.0
"""How often a node that cannot see its own alarm asks a member again that took it."""

Relay = Callable[[str, AlarmKind, str], Awaitable[str | None]]
"""Asks another member to raise (member, kind, reason): None once one did, else why not."""
_RAFT_DIR = "raft"
_MEASURED = (LOG_DIR, STATE_DIR, _RAFT_DIR, INSTALL_STAGING_DIR)


def default_quota(data_dir: Path) -> int:
    """Half the size of ``data_dir``'s filesystem (:data:`DEFAULT_QUOTA_FRACTION`)."""
    fs = os.statvfs(data_dir)
    return int(fs.f_blocks * fs.f_frsize * DEFAULT_QUOTA_FRACTION)


def _allocated(path: Path) -> int:
    total = 0
    try:
        entries = list(os.scandir(path))
    except (FileNotFoundError, NotADirectoryError):
        return 0
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                total += _allocated(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_blocks * 512
        except FileNotFoundError:
            continue  # removed while we looked (a segment compacted away)
    return total


def data_usage(data_dir: Path) -> int:
    """Bytes the node's data takes on disk (see the module docs)."""
    return sum(_allocated(data_dir / name) for name in _MEASURED)


def free_bytes(data_dir: Path) -> int:
    fs = os.statvfs(data_dir)
    return fs.f_bavail * fs.f_frsize


class SpaceMonitor:
    def __init__(
        self,
        member_id: str,
        data_dir: Path,
        quota_bytes: int,
        alarms: Callable[[], tuple[Alarm, ...]],
        consensus: Proposer,
        *,
        free_floor: int = DEFAULT_FREE_FLOOR,
        relay: Relay | None = None,
        propose_timeout: float = 10.0,
        raft_healthy: Callable[[], bool] = lambda: True,
    ) -> None:
        self._member = member_id
        self._data_dir = data_dir
        self.quota_bytes = quota_bytes
        """0: no quota (only a full disk raises the alarm)."""
        self._alarms = alarms
        self._consensus = consensus
        self._free_floor = max(free_floor, MIN_FREE_FLOOR)
        self._relay = relay
        self._propose_timeout = propose_timeout
        self._raft_healthy = raft_healthy
        self._relayed_at: float | None = None  # a member took the alarm then (monotonic)
        self._lock = threading.Lock()
        self._full: str | None = None  # why the disk was found full, until space is back
        self._problem: str | None = None
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.usage_bytes = 0
        self.checked_at = 0.0

    @property
    def problem(self) -> str | None:
        """Why this node is out of space now (for /readyz), or None."""
        with self._lock:
            return self._problem

    def disk_full(self, reason: str) -> None:
        """A write failed for want of space (ENOSPC, LMDB's map full). Any thread."""
        with self._lock:
            first = self._full is None
            self._full = reason
            self._problem = f"{_DISK_FULL}{reason}"
        if first:
            logger.error("out of space: %s; raising a NOSPACE alarm", reason)
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            loop.call_soon_threadsafe(wake.set)

    def _measure(self) -> str | None:
        usage = data_usage(self._data_dir)
        self.usage_bytes, self.checked_at = usage, time.time()
        free = free_bytes(self._data_dir)
        with self._lock:
            if self._full is not None and free >= self._free_floor:
                logger.warning("space is free again (%d bytes free)", free)
                self._full = None
            full = self._full
        if full is not None:
            problem: str | None = f"{_DISK_FULL}{full}"
        elif free < self._free_floor:
            problem = (
                f"{_DISK_FULL}the filesystem of {self._data_dir} has {free} bytes free, "
                f"under the {self._free_floor} this node keeps (--nospace-free-bytes)"
            )
        elif self.quota_bytes and usage > self.quota_bytes:
            problem = (
                f"over quota: the data takes {usage} bytes, more than --quota-bytes "
                f"{self.quota_bytes}"
            )
        else:
            problem = None
        with self._lock:
            was, self._problem = self._problem, problem
        if problem is not None and was is None:
            logger.error("%s; raising a NOSPACE alarm", problem)
        elif problem is None and was is not None:
            logger.warning(
                "back under quota with space free (%d bytes used); the NOSPACE alarm stays "
                "until an operator disarms it",
                usage,
            )
        return problem

    def gauges(self) -> tuple[int, int, int]:
        """(nospace alarms raised in the state, data bytes last measured, the quota)."""
        alarms = sum(a.kind is AlarmKind.NOSPACE for a in self._alarms())
        return alarms, self.usage_bytes, self.quota_bytes

    def _raised(self) -> bool:
        return any(a.member == self._member and a.kind is AlarmKind.NOSPACE for a in self._alarms())

    async def check(self) -> None:
        """Measure, and raise the alarm if needed (and not raised yet)."""
        problem = await asyncio.to_thread(self._measure)
        if problem is None:
            self._relayed_at = None
            return
        if self._raised():
            return
        failed = "this node's disk is full, or its raft is not healthy"
        # Proposed here only while this node's disk has room and its raft works: a
        # proposal queued in a raft that cannot write its journal might commit late,
        # after an operator disarmed the alarm.
        if not problem.startswith(_DISK_FULL) and self._raft_healthy():
            try:
                async with asyncio.timeout(self._propose_timeout):
                    await raise_alarm(self._consensus, self._member, AlarmKind.NOSPACE, problem)
                return
            except (RequestError, TimeoutError) as exc:
                failed = str(exc) or "no answer in time"
        if self._relay is None:
            logger.warning("could not raise the NOSPACE alarm yet: %s", failed)
            return
        # This node cannot see its alarm applied: a member that took it is asked again
        # only now and then (it answers without an entry while it holds the alarm).
        now = time.monotonic()
        if self._relayed_at is not None and now - self._relayed_at < RELAY_AGAIN_SECONDS:
            return
        refused = await self._relay(self._member, AlarmKind.NOSPACE, problem)
        if refused is None:
            if self._relayed_at is None:
                logger.warning("another member raised this node's NOSPACE alarm for it")
            self._relayed_at = now
            return
        logger.warning("could not raise the NOSPACE alarm yet: %s; %s", failed, refused)

    async def run(self, interval: float) -> None:
        """Check every ``interval`` seconds, and at once after :meth:`disk_full`."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        while True:
            try:
                await self.check()
            except OSError as exc:
                logger.warning("cannot measure the data directory's space: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), interval)
            self._wake.clear()
