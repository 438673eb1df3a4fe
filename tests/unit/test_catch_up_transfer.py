"""Catch-up downloads time out on a lack of progress, never on their total duration."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from node.errors import ReplicationError
from node.snapshot.export import export_snapshot
from node.state.commands import Batch, Put, encode_entry
from node.storage.recovery import NodeStorage
from replication.pull.catch_up import install_state
from tests.support.state import machine_of

IDLE = 0.6


class Trickle(BaseHTTPRequestHandler):
    """Sends the server's body in small pieces with a pause between them; with
    ``stop_after`` pieces it then goes silent (the connection stays open)."""

    body = b""
    piece = 1
    pause = 0.0
    stop_after: int | None = None

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        for sent, start in enumerate(range(0, len(self.body), self.piece)):
            if self.stop_after is not None and sent == self.stop_after:
                time.sleep(4 * IDLE)
                return
            self.wfile.write(self.body[start : start + self.piece])
            self.wfile.flush()
            time.sleep(self.pause)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def source(storage: NodeStorage) -> Iterator[type[Trickle]]:
    machine = machine_of(storage)
    commands = tuple(Put(b"k%03d" % i, b"v" * 100) for i in range(200))
    machine.apply(1, encode_entry(Batch(commands, 7)))
    body = io.BytesIO()
    export_snapshot(storage.store, body)

    class Handler(Trickle):
        pass

    Handler.body = body.getvalue()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Handler.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    try:
        yield Handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def follower(tmp_path: Path, small_config: object) -> Iterator[NodeStorage]:
    from node.storage.recovery import open_storage  # noqa: PLC0415

    opened = open_storage(tmp_path / "follower", small_config)  # type: ignore[arg-type]
    yield opened
    opened.close()


def test_a_slow_but_steady_source_is_not_abandoned(
    source: type[Trickle], follower: NodeStorage
) -> None:
    # About 26 KB in pieces of 4 KB every 0.3 s: longer in all than the idle timeout,
    # never silent for as long.
    source.piece, source.pause = 4096, IDLE / 2
    installed = install_state(follower, source.url, 1, 200, idle_timeout=IDLE)  # type: ignore[attr-defined]
    assert installed == 200
    assert follower.store.get(b"k199") is not None
    assert (follower.store.applied_index, follower.store.applied_offset) == (1, 200)


def test_a_source_that_stops_sending_is_abandoned_after_the_idle_timeout(
    source: type[Trickle], follower: NodeStorage
) -> None:
    source.piece, source.pause, source.stop_after = 4096, 0.0, 2
    with pytest.raises(ReplicationError, match="timed out"):
        install_state(follower, source.url, 1, 200, idle_timeout=IDLE)  # type: ignore[attr-defined]
    assert follower.store.applied_offset == 0  # nothing half-installed
