"""Where to ask a master to resume the stream: the checkpoint, or an earlier point
where rkv's state is the same.

After the last command that changed data, the stream may go on with commands that
change nothing in rkv (:data:`DATA_NEUTRAL`: the master's PINGs, the sentinels'
hello messages, which are PUBLISHes, REPLCONF GETACK...). rkv's state after each of
them is the state after that last command, so the replicator may resume after any
of them, not only after the checkpoint's offset. That matters after a failover: the
old master keeps taking PINGs and hellos until it is demoted, so the checkpoint is
often past the new master's history (``PSYNC`` would answer ``+FULLRESYNC``), while
an earlier point is in it. And a new master that was itself resynced in full has a
backlog that starts late: the latest point it holds is the one to ask for.

:class:`ResumePoints` keeps those points (the last :data:`MAX_POINTS`, outside
MULTI blocks, up to the committed checkpoint); :meth:`ResumePoints.choose` picks
the latest the master can continue from, told by its ``INFO replication``
(:func:`master_history`; no INFO, e.g. an ACL refusing it: the checkpoint, as
before).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from replication.redis.link.resp_client import ReplyError, RespConnection
from replication.redis.link.types import MasterAddress, ReplicatedCommand

DATA_NEUTRAL = frozenset({b"ping", b"replconf", b"publish", b"multi", b"exec"})
"""Commands that change nothing in rkv whatever their arguments (SELECT is not one:
it changes the db the next commands apply to)."""
MAX_POINTS = 4096
"""Resume points kept (the sentinels' hellos add about one a second to an idle stream)."""
INFO_TIMEOUT = 5.0


@dataclass(frozen=True)
class MasterHistory:
    """What a master's ``INFO replication`` says it can continue from."""

    replid: str
    replid2: str
    offset: int
    """master_repl_offset: the end of its stream."""
    second_offset: int
    """second_repl_offset: the first offset not in replid2's history (-1: none)."""
    backlog_first: int
    backlog_length: int

    def continues(self, replid: str, offset: int) -> bool:
        """Whether ``PSYNC replid offset+1`` gets ``+CONTINUE`` (Redis's own test)."""
        wanted = offset + 1
        if not self.backlog_first <= wanted <= self.backlog_first + self.backlog_length:
            return False
        if replid == self.replid:
            return wanted <= self.offset + 1
        return replid == self.replid2 and wanted <= self.second_offset


def master_history(address: MasterAddress, timeout: float = INFO_TIMEOUT) -> MasterHistory | None:
    """The master's history from ``INFO replication``, or None if it cannot be had."""
    try:
        with RespConnection(address.host, address.port, timeout) as conn:
            if address.password is not None:
                login = [address.username] if address.username else []
                conn.call("AUTH", *login, address.password)
            reply = conn.call("INFO", "replication")
        text = bytes(reply).decode() if isinstance(reply, bytes) else ""
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        return MasterHistory(
            fields["master_replid"],
            fields["master_replid2"],
            int(fields["master_repl_offset"]),
            int(fields["second_repl_offset"]),
            int(fields["repl_backlog_first_byte_offset"]),
            int(fields["repl_backlog_histlen"]),
        )
    except (OSError, ConnectionError, ReplyError, KeyError, ValueError):
        return None


class ResumePoints:
    """The points of one stream after which rkv's state is the committed one."""

    def __init__(self) -> None:
        self._points: deque[int] = deque(maxlen=MAX_POINTS)
        self._db = 0
        self._changed = False  # a command since the last point changed data
        self._committed: tuple[str, int, int, list[int]] | None = None

    def start(self, offset: int, db: int) -> None:
        """A stream begins after ``offset`` with ``db`` selected."""
        self._points = deque([offset], maxlen=MAX_POINTS)
        self._db, self._changed = db, False

    def note(self, command: ReplicatedCommand, in_multi: bool, db: int) -> None:
        """``command`` was applied; ``in_multi``: a MULTI block is still open after it."""
        self._changed = self._changed or command.name not in DATA_NEUTRAL
        if in_multi:
            return
        if self._changed:
            self.start(command.end_offset, db)
        else:
            self._points.append(command.end_offset)

    def committed(self, replid: str, offset: int) -> None:
        """The checkpoint (``replid``, ``offset``) was committed."""
        points = [point for point in self._points if point <= offset]
        self._committed = (replid, offset, self._db, points)

    def choose(
        self, replid: str, offset: int, history: Callable[[], MasterHistory | None]
    ) -> tuple[int, int] | None:
        """An earlier (offset, db) to resume after instead of the checkpoint
        (``replid``, ``offset``), when the master continues from it and not from the
        checkpoint; else None. Only points this process committed count."""
        committed = self._committed
        if committed is None or committed[:2] != (replid, offset) or not committed[3]:
            return None
        told = history()
        if told is None or told.continues(replid, offset):
            return None
        for point in reversed(committed[3]):
            if told.continues(replid, point):
                return point, committed[2]
        return None
