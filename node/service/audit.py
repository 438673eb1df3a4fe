"""Starting a consistency audit, and what the HTTP layer asks about exports.

``start`` runs on the leader (a follower raises NotLeader, which HTTP answers
with a 307 to the leader, as for membership changes): it picks the split
points from the leader's own LMDB (:func:`node.audit.export.choose_split_points`,
in a worker thread, one short-lived read transaction over the keys only) and
proposes ``AuditCut(audit_id, split_points)``; every node exports when it
applies it (node/audit/jobs.py). The answer carries the raft index of the
entry, where every replica cuts.

One audit at a time: ``start`` refuses with Conflict ``audit_running`` while
the leader's own export of an earlier cut still runs, or another start is being
proposed. That is decided here, before proposing, from this node's state (so it
needs nothing from the state machine, and replicas cannot disagree about it).
It does not wait for the other members' exports: a member still exporting the
previous cut when the next one applies skips it (node/audit/jobs.py), which
``GET /v1/audit/{id}`` reports as a failed export.
"""

from __future__ import annotations

import asyncio
import os
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from node.audit.export import DEFAULT_BUCKETS, choose_split_points
from node.audit.jobs import AUDIT_RUNNING, AuditExporter, AuditStatus
from node.errors import Conflict, InvalidRequest, KeyNotFound, NotLeader
from node.service.kv import ConsensusLog
from node.service.kv_writes import result_error
from node.state.commands import MAX_AUDIT_BUCKETS, AuditCut, audit_id_problem
from node.state.results import ResultCode
from node.storage.lmdb_store import LmdbStore


@dataclass(frozen=True, slots=True)
class AuditStarted:
    audit_id: str
    raft_index: int
    split_points: tuple[bytes, ...]


def new_audit_id() -> str:
    """A fresh id: the UTC time and 6 random hex digits (``20240102T030405Z-1a2b3c``)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + os.urandom(3).hex()


def check_audit_id(audit_id: str) -> None:
    problem = audit_id_problem(audit_id)
    if problem is not None:
        raise InvalidRequest(problem, code="invalid_audit_id")


class AuditService:
    def __init__(
        self,
        consensus: ConsensusLog,
        store: LmdbStore,
        exporter: AuditExporter,
        stall_timeout: float = 30.0,
    ) -> None:
        self._consensus = consensus
        self._store = store
        self._exporter = exporter
        self._starting = False
        self.stall_timeout = stall_timeout
        """Seconds a download may wait for a client that reads nothing (the node's
        --transfer-idle-timeout)."""

    async def start(self, audit_id: str | None = None, buckets: int | None = None) -> AuditStarted:
        """Propose an audit cut; ``buckets`` 1..1024 (default 16)."""
        if audit_id is not None:
            check_audit_id(audit_id)
        wanted = DEFAULT_BUCKETS if buckets is None else buckets
        if type(wanted) is not int or not 1 <= wanted <= MAX_AUDIT_BUCKETS:
            raise InvalidRequest(
                f"buckets must be an integer from 1 to {MAX_AUDIT_BUCKETS}, not {wanted!r:.40}",
                code="invalid_buckets",
            )
        if not self._consensus.is_leader():
            raise NotLeader("audits are started on the leader", self._consensus.leader_http_url())
        audit_id = audit_id or new_audit_id()
        if self._exporter.exists(audit_id):
            raise Conflict(f"audit {audit_id} exists already", code="audit_exists")
        running = self._exporter.running()
        if running or self._starting:
            what = f"audit {running[0]} is" if running else "another audit is being started and"
            raise Conflict(
                f"{what} still being exported on the leader; one audit runs at a time: "
                "start this one when it is done",
                code=AUDIT_RUNNING,
            )
        self._starting = True  # one event loop: no other start passes the check meanwhile
        try:
            split_points = tuple(await asyncio.to_thread(self._split_points, wanted))
            result = await self._consensus.propose(AuditCut(audit_id, split_points))
        finally:
            self._starting = False
        if result.code is not ResultCode.OK:
            raise result_error(result)
        return AuditStarted(audit_id, int(result.value), split_points)

    def _split_points(self, buckets: int) -> list[bytes]:
        with self._store.reader() as view:
            return choose_split_points(view, buckets)

    def status(self, audit_id: str) -> AuditStatus:
        """This node's export of ``audit_id``; KeyNotFound if it has none (yet)."""
        check_audit_id(audit_id)
        status = self._exporter.status(audit_id)
        if status is None:
            raise KeyNotFound(f"this node has no audit {audit_id}", code="audit_not_found")
        return status

    def file(self, audit_id: str, name: str) -> Path:
        """A file of this node's finished export of ``audit_id`` (see AuditExporter)."""
        check_audit_id(audit_id)
        return self._exporter.finished_file(audit_id, name)

    def hold(self, audit_id: str) -> AbstractContextManager[None]:
        """Keep retention off the export of ``audit_id`` while a download runs."""
        return self._exporter.hold(audit_id)
