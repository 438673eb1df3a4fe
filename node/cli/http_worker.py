"""One HTTP worker process (``rkv http-worker``, started by a node's main process
only: node/cli/http_workers.py).

It opens the node's LMDB read-only, serves the key-value reads of the
connections main hands it and the common key-value writes (main proposes the
command the worker built: node/cli/write_link.py), and forwards everything else
to main (http_api/worker_app.py). It ends at once when main does: the kernel sends it
SIGKILL when main dies (PR_SET_PDEATHSIG, Linux), and it exits when its link
to main ends (any system) or when main terminates it.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import ctypes.util
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from http_api.connections import HttpLimits
from http_api.forwarding import MainForwarder
from http_api.tls import ServerTls, server_context
from http_api.worker_app import WorkerHttp, build_worker_app
from node import metrics as node_metrics
from node.cli.json_logs import JsonLogFormatter
from node.cli.worker_link import Link, Message
from node.cli.worker_metrics import SHIP_SECONDS, MetricDeltas
from node.cli.write_link import RESULTS, WriteClient
from node.service.auth import AuthService
from node.service.kv import Consistency
from node.service.worker_kv import WorkerKv
from node.state.commands import Command
from node.state.results import CommandResult
from node.storage.lmdb_store import ReadOnlyStore

logger = logging.getLogger(__name__)

CONFIG_TIMEOUT = 30.0
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies (Linux); exit now if it already has."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # it died before prctl took effect
        os._exit(1)


class _Main:
    """The worker's view of main (node/service/worker_kv.py's MainProcess)."""

    def __init__(self, stop: Callable[[], None]) -> None:
        self._stop = stop
        self.link: Link | None = None
        self.writes: WriteClient | None = None
        self.stalled: str | None = None

    def stalled_reason(self) -> str | None:
        return self.stalled

    async def read_check(self, consistency: Consistency) -> None:
        assert self.link is not None
        await self.link.call({"t": "read", "consistency": consistency.value})

    def attach(self, link: Link) -> None:
        self.link = link
        self.writes = WriteClient(link)

    def on_frame(self, kind: int, payload: bytes) -> None:
        if kind == RESULTS and self.writes is not None:
            self.writes.on_results(payload)

    def link_ended(self) -> None:
        if self.writes is not None:
            self.writes.on_end()
        self._stop()

    async def propose(self, command: Command) -> CommandResult:
        assert self.writes is not None
        return await self.writes.propose(command)

    async def login(self, user: str, password: str, address: str) -> None:
        assert self.link is not None
        await self.link.call({"t": "login", "user": user, "password": password, "address": address})


def _configure_logging(config: Message) -> None:
    tag = f"worker-{config['index']}"
    root = logging.getLogger()
    root.setLevel(config.get("log_level", "INFO"))
    formatter: logging.Formatter
    if config.get("log_format") == "json":
        formatter = JsonLogFormatter(f"{config['node_id']}/{tag}")
    else:
        formatter = logging.Formatter(f"%(asctime)s %(levelname)s [{tag}] %(name)s: %(message)s")
    for handler in root.handlers:
        handler.setFormatter(formatter)


def _server_tls(config: Message) -> ServerTls | None:
    tls = config.get("tls")
    if tls is None:
        return None
    return ServerTls(
        Path(tls["certfile"]),
        Path(tls["keyfile"]),
        None if tls["client_cafile"] is None else Path(tls["client_cafile"]),
        float(tls["handshake_timeout"]),
    )


async def _ship_metrics(link: Link) -> None:
    deltas = MetricDeltas()
    while True:
        await asyncio.sleep(SHIP_SECONDS)
        body = deltas.take()
        if body is not None:
            link.send({"t": "metrics", **body})


def _worker_http(config: Message, store: ReadOnlyStore, main: _Main, link: Link) -> WorkerHttp:
    secret = config.get("secret")
    auth = AuthService(
        None,
        store,
        None if secret is None else bytes.fromhex(secret),
        token_ttl=float(config["token_ttl"]),
        awaiting_bootstrap=bool(config["awaiting_bootstrap"]),
        verify_login=main.login,
    )
    limits = HttpLimits(**config["limits"])
    service = WorkerKv(
        store,
        main,
        int(config["max_value_bytes"]),
        max_page_bytes=int(config["max_page_bytes"]),
        max_txn_ops=int(config["max_txn_ops"]),
        max_txn_result_bytes=config["max_txn_result_bytes"],
        max_txn_bytes=config["max_txn_bytes"],
    )
    app = build_worker_app(
        service,
        MainForwarder(config["private_socket"], config["worker_key"]),
        limits,
        auth,
        metrics=bool(config["metrics"]),
    )
    tls = _server_tls(config)
    return WorkerHttp(
        app,
        limits,
        lambda address: link.send({"t": "closed", "address": address}),
        ssl_context=None if tls is None else server_context(tls),
        handshake_timeout=None if tls is None else tls.handshake_timeout,
    )


async def serve_worker(link_fd: int) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    # Ctrl-C reaches the whole process group: main decides when its workers stop.
    loop.add_signal_handler(signal.SIGINT, lambda: None)
    main = _Main(stop.set)
    config_came: asyncio.Future[Message] = loop.create_future()
    pending: list[tuple[socket.socket, str]] = []
    http: WorkerHttp | None = None
    serving: set[asyncio.Task[None]] = set()

    def serve(conn: socket.socket, address: str) -> None:
        assert http is not None
        task = asyncio.create_task(http.serve(conn, address))
        serving.add(task)
        task.add_done_callback(serving.discard)

    def on_message(message: Message, passed: socket.socket | None) -> None:
        kind = message.get("t")
        if kind == "conn" and passed is not None:
            address = str(message.get("address", "?"))
            if http is None:
                pending.append((passed, address))
            else:
                serve(passed, address)
            return
        if passed is not None:
            passed.close()
        if kind == "config" and not config_came.done():
            config_came.set_result(message)
        elif kind == "stalled":
            main.stalled = message.get("reason")

    link = Link(socket.socket(fileno=link_fd), on_message, main.link_ended, main.on_frame)
    main.attach(link)
    config = await asyncio.wait_for(config_came, CONFIG_TIMEOUT)
    _configure_logging(config)
    node_metrics.enabled = bool(config["metrics"])
    store = ReadOnlyStore(Path(config["state_dir"]))
    http = _worker_http(config, store, main, link)
    await http.start()
    for conn, address in pending:
        serve(conn, address)
    pending.clear()
    shipping = asyncio.create_task(_ship_metrics(link)) if config["metrics"] else None
    link.send({"t": "ready", "pid": os.getpid()})
    logger.info("serving key-value reads and writes, pid %d", os.getpid())
    try:
        await stop.wait()
    finally:
        if shipping is not None:
            shipping.cancel()
        await http.stop()
        link.close()
        store.close()


def run_http_worker(args: argparse.Namespace) -> int:
    die_with_parent(args.parent_pid)
    if args.tls:  # as main: the standard loop's TLS transport (node/cli/wiring.py)
        asyncio.run(serve_worker(args.link_fd))
        return 0
    try:
        import uvloop  # noqa: PLC0415 (optional dependency)
    except ImportError:
        asyncio.run(serve_worker(args.link_fd))
    else:
        uvloop.run(serve_worker(args.link_fd))
    return 0
