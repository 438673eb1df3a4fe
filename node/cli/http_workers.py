"""The HTTP worker processes of a node (--http-workers), seen from its main process.

Main starts each worker as ``python -m node.cli http-worker`` with one end of
a link (node/cli/worker_link.py), sends it its settings, and from then on:
hands it read and write connections (http_api/dispatch.py), proposes the
write commands it built (``service.execute``, node/cli/write_link.py) and
sends back their results, answers its read checks
(``service.prepare_read``: linearizable is main's ReadIndex read barrier,
leader is main's own view of its role) and its Basic logins (main keeps the
node's failed-login counts), pushes every change of the node's stalled state,
and adds its request metrics into main's.

A handed connection counts towards main's connection caps until its worker
reports it closed. A worker that dies releases its connections' counts, its
LMDB reader slots are freed, and it is started again (at most once per
:data:`RESTART_PAUSE`); meanwhile main serves every connection itself.

Workers never outlive main: each has PR_SET_PDEATHSIG and watches its link,
whose end closes when main dies (node/cli/http_worker.py); on a clean stop main
terminates them by PID and kills any that does not exit in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from http_api.connections import ConnectionCounts, HttpLimits
from http_api.tls import ServerTls
from node.cli.worker_link import Link, Message, link_pair
from node.cli.worker_metrics import add_deltas
from node.cli.write_link import WRITES, WriteServer
from node.errors import InvalidRequest
from node.service.auth import AuthService
from node.service.kv import Consistency, KvService
from node.storage.lmdb_store import LmdbStore

logger = logging.getLogger(__name__)

READY_TIMEOUT = 30.0
STOP_TIMEOUT = 2.0
STALL_POLL_SECONDS = 0.02
"""How often main looks for a change of its stalled state to push to workers."""
RESTART_PAUSE = 1.0


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """What a worker needs to serve like main (sent over the link, never on argv)."""

    node_id: str
    state_dir: Path
    limits: HttpLimits
    max_value_bytes: int
    max_page_bytes: int
    max_txn_ops: int
    max_txn_result_bytes: int | None
    max_txn_bytes: int | None
    secret: bytes | None = field(repr=False)
    token_ttl: float
    awaiting_bootstrap: bool
    tls: ServerTls | None
    metrics: bool
    log_level: str
    log_format: str


def settings_message(settings: WorkerSettings, index: int, socket_path: str, key: str) -> Message:
    tls = settings.tls
    return {
        "t": "config",
        "index": index,
        "node_id": settings.node_id,
        "state_dir": str(settings.state_dir),
        "limits": asdict(settings.limits),
        "max_value_bytes": settings.max_value_bytes,
        "max_page_bytes": settings.max_page_bytes,
        "max_txn_ops": settings.max_txn_ops,
        "max_txn_result_bytes": settings.max_txn_result_bytes,
        "max_txn_bytes": settings.max_txn_bytes,
        "secret": None if settings.secret is None else settings.secret.hex(),
        "token_ttl": settings.token_ttl,
        "awaiting_bootstrap": settings.awaiting_bootstrap,
        "tls": None
        if tls is None
        else {
            "certfile": str(tls.certfile),
            "keyfile": str(tls.keyfile),
            "client_cafile": None if tls.client_cafile is None else str(tls.client_cafile),
            "handshake_timeout": tls.handshake_timeout,
        },
        "metrics": settings.metrics,
        "log_level": settings.log_level,
        "log_format": settings.log_format,
        "private_socket": socket_path,
        "worker_key": key,
    }


_MAX_SOCKET_PATH = 100
"""sun_path holds 108 bytes on Linux, 104 on BSDs."""


def _private_socket_path(data_dir: Path) -> str:
    """Where main listens for what its workers forward: in the data directory, in a
    folder only the node's user may enter (a fresh temporary one when the data
    directory's path is too long for a unix socket). A stale socket is removed."""
    folder = data_dir / "http-workers"
    path = str(folder / "main.sock")
    if len(path) > _MAX_SOCKET_PATH:
        return os.path.join(tempfile.mkdtemp(prefix="rkv-main-"), "main.sock")
    folder.mkdir(mode=0o700, exist_ok=True)
    folder.chmod(0o700)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return path


class _Worker:
    def __init__(self, index: int) -> None:
        self.index = index
        self.process: subprocess.Popen[bytes] | None = None
        self.link: Link | None = None
        self.writes: WriteServer | None = None
        self.writes_before = 0
        """Writes proposed for the worker's earlier processes."""
        self.ready = False
        self.open: Counter[str] = Counter()

    @property
    def load(self) -> int:
        return self.open.total()

    @property
    def proposed(self) -> int:
        return self.writes_before + (0 if self.writes is None else self.writes.proposed)


class HttpWorkers:
    """Main's side of its workers; the dispatcher's :class:`http_api.dispatch.Handoff`."""

    def __init__(
        self,
        count: int,
        settings: WorkerSettings,
        service: KvService,
        auth: AuthService,
        store: LmdbStore,
    ) -> None:
        self._settings = settings
        self._service = service
        self._auth = auth
        self._store = store
        self._workers = [_Worker(i + 1) for i in range(count)]
        self.socket_path = _private_socket_path(store.path.parent)
        self.key = secrets.token_urlsafe(32)
        self.counts: ConnectionCounts | None = None
        """Main's connection counts (set once its HTTP server exists)."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopping = False
        self._stalled: str | None = None

    # -- the dispatcher's view --------------------------------------------------------

    def ready_count(self) -> int:
        return sum(1 for w in self._workers if w.ready)

    def hand(self, conn: socket.socket, address: str) -> bool:
        ready = [w for w in self._workers if w.ready and w.link is not None]
        if not ready:
            return False
        worker = min(ready, key=lambda w: w.load)
        assert worker.link is not None
        worker.open[address] += 1
        worker.link.send({"t": "conn", "address": address}, conn)
        return True

    def status(self) -> list[dict[str, Any]]:
        return [
            {
                "index": w.index,
                "pid": None if w.process is None else w.process.pid,
                "ready": w.ready,
                "connections": w.load,
                "writes": w.proposed,
            }
            for w in self._workers
        ]

    # -- life -------------------------------------------------------------------------

    async def start(self) -> None:
        """Spawn the workers and return at once: until a worker is ready, main serves
        every connection itself (the dispatcher hands only to ready workers), so the
        port opens as fast as without workers (a restarted node is not refusing
        connections while its workers import)."""
        for worker in self._workers:
            self._spawn(worker)
        self._run(self._push_stalled())
        self._run(self._warn_if_not_ready())

    async def _warn_if_not_ready(self) -> None:
        deadline = asyncio.get_running_loop().time() + READY_TIMEOUT
        while not all(w.ready for w in self._workers):
            if asyncio.get_running_loop().time() >= deadline:
                logger.error(
                    "%d of %d HTTP workers not ready after %gs: main serves their share",
                    len(self._workers) - self.ready_count(),
                    len(self._workers),
                    READY_TIMEOUT,
                )
                return
            await asyncio.sleep(0.05)

    def _run(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _spawn(self, worker: _Worker) -> None:
        main_end, worker_end = link_pair()
        try:
            # From the event loop's thread: PR_SET_PDEATHSIG fires when the thread that
            # started the worker ends, and this one lives as long as the process.
            worker.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "node.cli",
                    "http-worker",
                    "--link-fd",
                    str(worker_end.fileno()),
                    "--parent-pid",
                    str(os.getpid()),
                    *(["--tls"] if self._settings.tls is not None else []),
                ],
                pass_fds=(worker_end.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        finally:
            worker_end.close()
        worker.link = Link(
            main_end,
            lambda message, passed: self._on_message(worker, message, passed),
            lambda: self._on_end(worker),
            lambda kind, payload: self._on_frame(worker, kind, payload),
        )
        worker.writes = WriteServer(worker.link, self._service.execute)
        worker.link.send(settings_message(self._settings, worker.index, self.socket_path, self.key))
        if self._stalled is not None:
            worker.link.send({"t": "stalled", "reason": self._stalled})
        logger.info("HTTP worker %d started, pid %d", worker.index, worker.process.pid)

    async def stop(self) -> None:
        self._stopping = True
        for task in list(self._tasks):
            task.cancel()
        for worker in self._workers:
            worker.ready = False
            if worker.process is not None and worker.process.poll() is None:
                worker.process.terminate()
        for worker in self._workers:
            process = worker.process
            if process is None:
                continue
            try:
                await asyncio.to_thread(process.wait, STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                logger.warning("HTTP worker %d did not stop: killed", worker.index)
                process.kill()
                await asyncio.to_thread(process.wait)
            if worker.link is not None:
                worker.link.close()
        with contextlib.suppress(OSError):
            os.unlink(self.socket_path)

    def _on_end(self, worker: _Worker) -> None:
        worker.ready = False
        worker.link = None
        # Proposals already made go on (their outcome is the log's); only the answers
        # have nowhere to go.
        if worker.writes is not None:
            worker.writes_before += worker.writes.proposed
        worker.writes = None
        counts = self.counts
        if counts is not None:
            for address, n in worker.open.items():
                for _ in range(n):
                    counts.closed(address)
        worker.open.clear()
        if self._stopping:
            return
        code = None if worker.process is None else worker.process.poll()
        logger.error("HTTP worker %d ended (exit code %s): starting it again", worker.index, code)
        self._run(self._restart(worker))

    async def _restart(self, worker: _Worker) -> None:
        process = worker.process
        if process is not None:
            await asyncio.to_thread(process.wait)
        # Its read transactions died with it: free their slots so LMDB reuses pages.
        self._store.clear_stale_readers()
        await asyncio.sleep(RESTART_PAUSE)
        if not self._stopping:
            self._spawn(worker)

    # -- messages from a worker ----------------------------------------------------------

    def _on_message(self, worker: _Worker, message: Message, passed: socket.socket | None) -> None:
        if passed is not None:  # workers pass nothing
            passed.close()
        kind = message.get("t")
        link = worker.link
        if link is None:
            return
        if kind == "closed":
            address = str(message.get("address", "?"))
            if worker.open[address] > 0:
                worker.open[address] -= 1
                if worker.open[address] == 0:
                    del worker.open[address]
                if self.counts is not None:
                    self.counts.closed(address)
        elif kind == "read":
            self._run(self._answer(link, message, self._read_check(message)))
        elif kind == "login":
            self._run(self._answer(link, message, self._login(message)))
        elif kind == "metrics":
            add_deltas(message)
        elif kind == "ready":
            worker.ready = True
            logger.info("HTTP worker %d ready", worker.index)
        else:
            logger.warning("HTTP worker %d sent an unknown message %r", worker.index, kind)

    def _on_frame(self, worker: _Worker, kind: int, payload: bytes) -> None:
        if kind == WRITES and worker.writes is not None:
            worker.writes.on_writes(payload)
        else:
            logger.warning("HTTP worker %d sent an unknown frame %d", worker.index, kind)

    async def _read_check(self, message: Message) -> None:
        try:
            consistency = Consistency(message.get("consistency"))
        except ValueError as exc:
            raise InvalidRequest(f"unknown consistency {message.get('consistency')!r}") from exc
        await self._service.prepare_read(consistency, None)

    async def _login(self, message: Message) -> None:
        await self._auth.check_login(
            str(message.get("user", "")),
            str(message.get("password", "")),
            str(message.get("address", "?")),
        )

    async def _answer(self, link: Link, request: Message, work: Any) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the error goes back to the worker, which answers it
            link.reply(request, exc)
            return
        link.reply(request)

    async def _push_stalled(self) -> None:
        stalled: Callable[[], str | None] = self._service.unreadable_reason
        while True:
            reason = stalled()
            if reason != self._stalled:
                self._stalled = reason
                for worker in self._workers:
                    if worker.link is not None:
                        worker.link.send({"t": "stalled", "reason": reason})
            await asyncio.sleep(STALL_POLL_SECONDS)
