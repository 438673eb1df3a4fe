"""Audit exports running on this node: the state machine's audit hook, the worker
threads that write the exports (node/audit/export.py), and their status.

The hook runs on the apply thread, right after the entry holding an
``AuditCut`` committed to LMDB, with a :class:`DetachedView` of exactly
that state. It only registers the job and starts a thread: the export never
runs on the apply thread, so writes go on while it is written.

The commit log up to the cut must be read as it was at the cut: a compaction
that ran after it could drop a record that was still the key's version at the
cut (overwritten since). So the hook also takes the log's ``rewriting`` lock
when it is free (a compaction or a complete-range read holds it otherwise)
and the worker keeps it until the log is written; a ``threading.Lock`` may
be released by another thread than the one that took it. When it was taken
(a compaction was running at the cut), the worker waits for it, and fails the
export if the log's segments were swapped since the cut (``rewrites``
changed): the log could no longer be exact. Holding it costs: compactions wait
for the export, a lagging replica's complete-range pull from this node gets
409 meanwhile (it falls back to another source or a state install), and a
state install on this node waits for the export to finish. The LMDB view is
closed before the log is read, and a map resize interrupts it rather than
waiting (node/storage/lmdb_store.py), so neither the apply thread nor a compaction can
deadlock with an export.

Status survives restarts through the files: a directory with ``manifest.json``
is done, with ``error.json`` failed, with neither and no running job
interrupted (the node stopped while writing it; the cut cannot be taken again).

One export at a time: a cut applied while another export still runs on this
node is not exported; it is recorded as failed (``error.json`` with code
``audit_running``), so that a loop of audits never runs several full copies of
the state at once on one node. The leader refuses to start an audit while its
own export runs (node/service/audit.py), so this happens only to a node slower
than the leader, or after a leader change.

Old exports are deleted by the retention of node/audit/retention.py:
:meth:`AuditExporter.prune` runs when an export starts (before it writes) and
now and then (node/cli/wiring.py); a running export and one being downloaded
(:meth:`AuditExporter.hold`) are never deleted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node import metrics
from node.audit.export import (
    ERROR_NAME,
    MANIFEST_NAME,
    ExportProgress,
    build_manifest,
    export_directory,
    manifest_files,
    read_json,
    write_json_atomically,
    write_log,
    write_state,
)
from node.audit.retention import (
    Downloads,
    RetentionPolicy,
    beyond_retention,
    empty_trash,
    move_to_trash,
    own_exports,
    remove_moved,
)
from node.errors import AuditExportFailed, ExportInterrupted, KeyNotFound
from node.state.commands import audit_id_problem
from node.storage.commit_log import CommitLog
from node.storage.lmdb_store import DetachedView

logger = logging.getLogger(__name__)

RUNNING = "running"
DONE = "done"
FAILED = "failed"
AUDIT_RUNNING = "audit_running"
"""The code of a cut refused because another export was running (error.json, HTTP)."""


@dataclass(frozen=True, slots=True)
class AuditStatus:
    """One audit's export on this node: running (with progress), done (with the
    manifest) or failed (with the reason)."""

    audit_id: str
    state: str
    progress: dict[str, Any] | None = None
    manifest: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class _Job:
    audit_id: str
    split_points: tuple[bytes, ...]
    view: DetachedView
    directory: Path
    rewrites_at_cut: int
    holds_log: bool
    progress: ExportProgress = field(default_factory=ExportProgress)
    thread: threading.Thread | None = None


class AuditExporter:
    """Writes this node's exports under ``audit_dir`` as node ``replica``."""

    def __init__(
        self,
        audit_dir: Path,
        replica: str,
        log: CommitLog,
        retention: RetentionPolicy | None = None,
    ) -> None:
        self.audit_dir = audit_dir
        self.replica = replica
        self.retention = RetentionPolicy() if retention is None else retention
        self._log = log
        self._lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}
        self._failures: dict[str, str] = {}
        self._stopping = threading.Event()
        self._downloads = Downloads()
        self._pruning = threading.Lock()

    # -- the apply thread ---------------------------------------------------------

    def hook(self, audit_id: str, split_points: tuple[bytes, ...], view: DetachedView) -> None:
        """The state machine's audit hook: take over ``view`` and start the export."""
        if self._stopping.is_set() or audit_id_problem(self.replica) is not None:
            view.close()
            logger.warning(
                "audit %s: not exported (%s)",
                audit_id,
                "the node is stopping"
                if self._stopping.is_set()
                else f"the node id {self.replica!r} cannot name a directory",
            )
            return
        running = self.running()  # only this (the apply) thread adds jobs
        if running:
            view.close()
            if audit_id in running:
                logger.warning("audit %s: already being exported; this cut is ignored", audit_id)
            else:
                self._refuse(audit_id, running[0])
            return
        holds_log = self._log.rewriting.acquire(blocking=False)
        job = _Job(
            audit_id,
            split_points,
            view,
            export_directory(self.audit_dir, audit_id, self.replica),
            self._log.rewrites,
            holds_log,
        )
        with self._lock:
            self._jobs[audit_id] = job
            self._failures.pop(audit_id, None)
        job.thread = threading.Thread(
            target=self._run, args=(job,), name=f"audit-{audit_id}", daemon=True
        )
        try:
            job.thread.start()
        except BaseException:
            with self._lock:
                self._jobs.pop(audit_id, None)
            self._release(job)
            raise

    def _refuse(self, audit_id: str, running: str) -> None:
        """Record that the cut of ``audit_id`` is not exported: ``running`` still is."""
        message = (
            f"not exported: audit {running} was still being exported on this node, which "
            "writes one export at a time; run a new audit once it is done"
        )
        logger.warning("audit %s: %s", audit_id, message)
        with self._lock:
            self._failures[audit_id] = message
        directory = export_directory(self.audit_dir, audit_id, self.replica)
        # The files off the apply thread: mkdir and an fsynced error.json.
        threading.Thread(
            target=self._record_refusal,
            args=(audit_id, directory, message),
            name=f"audit-{audit_id}-refused",
            daemon=True,
        ).start()

    def _record_refusal(self, audit_id: str, directory: Path, message: str) -> None:
        try:
            directory.mkdir(parents=True, exist_ok=False)
            write_json_atomically(
                directory, ERROR_NAME, {"code": AUDIT_RUNNING, "message": message}
            )
        except OSError as error:  # an id used before, a full disk: the status is in memory
            logger.warning("audit %s: cannot record the refusal: %s", audit_id, error)

    def running(self) -> list[str]:
        """The audits this node is exporting now (at most one)."""
        with self._lock:
            return list(self._jobs)

    # -- the worker ---------------------------------------------------------------

    def _run(self, job: _Job) -> None:
        started = time.monotonic()
        try:
            try:
                job.directory.mkdir(parents=True, exist_ok=False)
            except FileExistsError:
                logger.warning(
                    "audit %s: %s exists already (the same audit id was used before); "
                    "this cut is not exported",
                    job.audit_id,
                    job.directory,
                )
                return
            self.prune()  # room for this export first; a running one is never deleted
            self._export(job, started)
        except Exception as exc:
            if metrics.enabled:
                metrics.AUDIT_EXPORTS.labels("failed").inc()
            self._fail(job, exc)
        else:
            if metrics.enabled:
                metrics.AUDIT_EXPORTS.labels("ok").inc()
        finally:
            self._release(job)
            with self._lock:
                self._jobs.pop(job.audit_id, None)

    def _export(self, job: _Job, started: float) -> None:
        stop = self._stopping.is_set
        try:
            state = write_state(
                job.view,
                job.directory,
                job.split_points,
                job.progress,
                audit_id=job.audit_id,
                stop=stop,
            )
        finally:
            job.view.close()  # before the log: nothing LMDB waits for is held from here
        self._hold_log(job)
        log_records = write_log(
            self._log,
            job.directory,
            state.applied_offset,
            job.progress,
            audit_id=job.audit_id,
            stop=stop,
        )
        self._release(job)
        seconds = time.monotonic() - started
        manifest = build_manifest(
            job.audit_id,
            self.replica,
            split_points=job.split_points,
            state=state,
            log_records=log_records,
            seconds=seconds,
        )
        write_json_atomically(job.directory, MANIFEST_NAME, manifest)
        logger.info(
            "audit %s: exported %d keys in %d buckets and %d log records at raft index %d "
            "(offset %d) in %.2fs",
            job.audit_id,
            manifest["key_count"],
            manifest["buckets"],
            log_records,
            state.raft_index,
            state.applied_offset,
            seconds,
        )

    def _hold_log(self, job: _Job) -> None:
        """Hold the log's rewriting lock (taken at the cut if it was free) and make
        sure no segment was swapped since the cut."""
        while not job.holds_log:
            if self._stopping.is_set():
                raise ExportInterrupted("the node is stopping")
            job.holds_log = self._log.rewriting.acquire(timeout=0.5)
        if self._log.rewrites != job.rewrites_at_cut:
            raise ExportInterrupted(
                "a log compaction (or state install) overlapped the cut, so this node's "
                "log up to the cut can no longer be exported exactly; run a new audit"
            )

    def _release(self, job: _Job) -> None:
        job.view.close()
        if job.holds_log:
            job.holds_log = False
            self._log.rewriting.release()

    def _fail(self, job: _Job, exc: Exception) -> None:
        message = str(exc) if isinstance(exc, ExportInterrupted) else f"{type(exc).__name__}: {exc}"
        if isinstance(exc, ExportInterrupted):
            logger.warning("audit %s: export stopped: %s", job.audit_id, message)
        else:
            logger.exception("audit %s: export failed", job.audit_id)
        with self._lock:
            self._failures[job.audit_id] = message
        try:
            write_json_atomically(
                job.directory, ERROR_NAME, {"code": AuditExportFailed.code, "message": message}
            )
        except OSError as error:
            logger.warning("audit %s: cannot record the failure: %s", job.audit_id, error)

    # -- status ---------------------------------------------------------------------

    def status(self, audit_id: str) -> AuditStatus | None:
        """This node's export of ``audit_id`` (a valid id), or None if it has none."""
        with self._lock:
            job = self._jobs.get(audit_id)
            failure = self._failures.get(audit_id)
        if job is not None:
            return AuditStatus(audit_id, RUNNING, progress=job.progress.as_json())
        directory = export_directory(self.audit_dir, audit_id, self.replica)
        manifest = read_json(directory / MANIFEST_NAME)
        if manifest is not None:
            return AuditStatus(audit_id, DONE, manifest=manifest)
        if failure is None:
            error = read_json(directory / ERROR_NAME)
            if error is not None:
                failure = str(error.get("message", "the export failed"))
            elif directory.is_dir():
                failure = "the export did not finish (the node stopped while writing it)"
        return None if failure is None else AuditStatus(audit_id, FAILED, error=failure)

    def exists(self, audit_id: str) -> bool:
        """Whether this node knows ``audit_id`` (running, done, failed)."""
        return (
            self.status(audit_id) is not None
            or (self.audit_dir / audit_id).exists()  # exported by another node here
        )

    def finished_file(self, audit_id: str, name: str) -> Path:
        """The path of ``name`` in the finished export of ``audit_id``: a file its
        manifest lists, or the manifest itself. Raises KeyNotFound or AuditExportFailed."""
        status = self.status(audit_id)
        if status is None:
            raise KeyNotFound(f"this node has no audit {audit_id}", code="audit_not_found")
        if status.state == FAILED:
            raise AuditExportFailed(f"audit {audit_id}: {status.error}")
        if status.manifest is None:
            raise KeyNotFound(
                f"audit {audit_id} is still being exported on this node",
                code="audit_not_finished",
            )
        directory = export_directory(self.audit_dir, audit_id, self.replica)
        allowed = manifest_files(status.manifest) | {MANIFEST_NAME}
        path = directory / name
        if name not in allowed or "/" in name or path.parent != directory or not path.is_file():
            raise KeyNotFound(
                f"audit {audit_id} has no file {name!r:.100}", code="audit_file_not_found"
            )
        return path

    # -- retention ----------------------------------------------------------------------

    def hold(self, audit_id: str) -> AbstractContextManager[None]:
        """While the block runs (a download), and for a grace period after, retention
        leaves the export of ``audit_id`` alone."""
        return self._downloads.hold(audit_id)

    def prune(self) -> list[str]:
        """Delete this node's exports beyond the retention (see node/audit/retention.py),
        never a running or held one; the audit ids deleted. Never raises for an I/O
        error (logged; the next pass tries again)."""
        with self._pruning:  # one pass at a time (the timer and an export's start)
            try:
                return list(self._prune())
            except OSError as error:
                logger.warning("audit exports: retention pass failed: %s", error)
                return []

    def _prune(self) -> Iterator[str]:
        empty_trash(self.audit_dir, self.replica)
        exports = own_exports(self.audit_dir, self.replica)
        doomed = beyond_retention(
            exports, self.retention, time.time_ns(), set(self.running()) | self._downloads.held()
        )
        for export in doomed:
            with self._lock:  # checked again: a download may have started since
                if export.audit_id in self._jobs or export.audit_id in self._downloads.held():
                    continue
                moved = move_to_trash(self.audit_dir, export.audit_id, self.replica)
                self._failures.pop(export.audit_id, None)
            remove_moved(self.audit_dir, export.audit_id, moved)
            logger.info(
                "audit %s: export deleted (retention: the %d newest, younger than %gs)",
                export.audit_id,
                self.retention.keep,
                self.retention.keep_age_seconds,
            )
            yield export.audit_id

    # -- shutdown ---------------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> None:
        """Stop running exports (they fail as interrupted) and wait for their threads."""
        self._stopping.set()
        with self._lock:
            threads = [job.thread for job in self._jobs.values() if job.thread is not None]
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
