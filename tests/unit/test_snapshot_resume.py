"""A snapshot download cut half-way resumes after its last key, from the same read view
(replication/pull/download.py against the real route, node/snapshot/held.py)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import cast

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestServer

from http_api.app import build_app
from node.errors import ReplicationError
from node.service.kv import ConsensusLog, KvService
from node.snapshot.format import SnapshotReader
from node.state.commands import Batch, Put, encode_entry
from node.storage.compaction import CompactionPolicy
from node.storage.compactor import CompactionTriggers, Compactor
from node.storage.config import FsyncPolicy, StorageConfig
from node.storage.recovery import NodeStorage, open_storage
from replication.pull.download import download_snapshot
from tests.support.state import machine_of
from tests.unit.test_snapshot_route import StandInRaft, run_here

KEYS = 3000
VALUE = b"v" * 1000


class CuttingProxy:
    """Forwards TCP connections to ``upstream``; the first one is closed after
    ``cut_after`` bytes of the answer (then ``on_cut`` runs). Records each request's
    first line and the answer bytes it forwarded."""

    def __init__(self, upstream: tuple[str, int], cut_after: int, on_cut: Callable[[], None]):
        self.upstream = upstream
        self.cut_after = cut_after
        self.on_cut = on_cut
        self.requests: list[str] = []
        self.forwarded = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        first = True
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(
                target=self._answers, args=(upstream, client, first), daemon=True
            ).start()
            first = False

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while data := client.recv(65536):
                if data[:4] == b"GET ":
                    self.requests.append(data.split(b"\r\n", 1)[0].decode())
                upstream.sendall(data)
        except OSError:
            pass

    def _answers(self, upstream: socket.socket, client: socket.socket, cut: bool) -> None:
        sent = 0
        try:
            while data := upstream.recv(65536):
                if cut and sent + len(data) > self.cut_after:
                    client.sendall(data[: self.cut_after - sent])
                    self.forwarded += self.cut_after - sent
                    client.shutdown(socket.SHUT_RDWR)
                    client.close()
                    upstream.close()
                    self.on_cut()
                    return
                client.sendall(data)
                sent += len(data)
                self.forwarded += len(data)
        except OSError:
            pass
        finally:
            client.close()

    def close(self) -> None:
        self._listener.close()


def write_keys(storage: NodeStorage, index: int, keys: range, value: bytes) -> None:
    for start in range(keys.start, keys.stop, 100):
        stop = min(start + 100, keys.stop)
        commands = tuple(Put(b"k%06d" % i, value) for i in range(start, stop))
        machine_of(storage).apply(index, encode_entry(Batch(commands, 7)))
        index += 1


@pytest.fixture
def source_storage(tmp_path: Path) -> Iterator[NodeStorage]:
    # A map large enough for every write of the test: a map resize would (rightly)
    # make the source let go of the held view.
    config = StorageConfig(segment_bytes=1 << 20, fsync=FsyncPolicy.ON_SYNC, lmdb_map_size=1 << 28)
    storage = open_storage(tmp_path / "source", config)
    write_keys(storage, 1, range(KEYS), VALUE)
    yield storage
    storage.close()


@pytest_asyncio.fixture
async def served(source_storage: NodeStorage) -> AsyncIterator[tuple[TestServer, KvService]]:
    storage = source_storage
    compactor = Compactor(
        storage.commit_log,
        storage.store,
        policy=CompactionPolicy(tombstone_retention_ms=1000),
        triggers=CompactionTriggers(interval_seconds=300, min_closed_bytes=1 << 30),
        segment_bytes=1 << 20,
        on_apply_thread=run_here,
    )
    service = KvService(
        cast(ConsensusLog, StandInRaft()),
        storage.store,
        1024 * 1024,
        compactor=compactor,
        log=storage.commit_log,
        transfer_hold_seconds=30.0,
    )
    server = TestServer(build_app(service))
    await server.start_server()
    try:
        yield server, service
    finally:
        service.close_held_snapshots()
        await server.close()


@pytest.mark.asyncio
async def test_a_cut_download_resumes_from_the_same_view_after_its_last_key(
    served: tuple[TestServer, KvService], source_storage: NodeStorage, tmp_path: Path
) -> None:
    server, _ = served
    with source_storage.store.reader() as view:
        before = {key: stored.value for chunk in view.all_items() for key, stored in chunk}
    loop = asyncio.get_running_loop()

    def change_the_state() -> None:
        # After the cut, the source's state moves on: the resumed part must not show it.
        loop.call_soon_threadsafe(
            write_keys, source_storage, 1000, range(0, KEYS + 500, 7), b"changed"
        )

    assert server.port is not None
    proxy = CuttingProxy(("127.0.0.1", server.port), 1_200_000, change_the_state)
    try:
        path = tmp_path / "download.snapshot"
        received = await asyncio.to_thread(download_snapshot, proxy.url, path, 5.0)
    finally:
        proxy.close()
    assert len(proxy.requests) == 2, proxy.requests
    assert "transfer=" in proxy.requests[1] and "after=" in proxy.requests[1]
    # Resumed, not started over: what crossed the wire is about one snapshot.
    size = path.stat().st_size
    assert received < size * 1.2 and proxy.forwarded < size * 1.2
    with open(path, "rb") as f:
        reader = SnapshotReader(f, str(path))
        records = {record.key: record.value for record, _ in reader.records()}
    assert records == before and len(records) == KEYS  # the state of the first view


@pytest.mark.asyncio
async def test_a_transfer_no_longer_held_is_refused_and_the_download_fails(
    served: tuple[TestServer, KvService], tmp_path: Path
) -> None:
    server, service = served
    assert server.port is not None
    proxy = CuttingProxy(("127.0.0.1", server.port), 1_200_000, service.close_held_snapshots)
    try:
        with pytest.raises(ReplicationError, match="no longer holds"):
            await asyncio.to_thread(download_snapshot, proxy.url, tmp_path / "d.snapshot", 5.0)
    finally:
        proxy.close()
