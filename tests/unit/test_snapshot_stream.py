"""node/snapshot/stream.py: a snapshot sent as it is read, with a bounded buffer."""

from __future__ import annotations

import io
import queue

from node.snapshot.export import export_snapshot
from node.snapshot.format import SnapshotReader
from node.snapshot.stream import SnapshotStream
from node.state.commands import Batch, Put, encode_entry
from node.storage.record import Record
from node.storage.recovery import NodeStorage
from tests.support.state import machine_of

CHUNK = 4096


def fill(storage: NodeStorage, keys: int) -> None:
    machine = machine_of(storage)
    for index in range(1, keys // 100 + 1):
        commands = tuple(Put(b"k%06d" % (index * 100 + i), b"v" * 200) for i in range(100))
        machine.apply(index, encode_entry(Batch(commands, 7)))


def drain(stream: SnapshotStream) -> bytes:
    body = bytearray()
    while chunk := stream.next_chunk(timeout=10):
        body += chunk
    return bytes(body)


def test_the_stream_is_the_snapshot_of_its_view(storage: NodeStorage) -> None:
    fill(storage, 2_000)
    stream = SnapshotStream(storage.store.open_detached(), chunk_bytes=CHUNK, rate_bytes=10**9)
    body = drain(stream)
    reader = SnapshotReader(io.BytesIO(body), "stream")
    streamed = [record for record, _ in reader.records()]
    reference = io.BytesIO()
    export_snapshot(storage.store, reference)
    reference.seek(0)
    exported = [record for record, _ in SnapshotReader(reference, "file").records()]

    def identity(records: list[Record]) -> list[tuple[int, bytes, bytes, int]]:
        return [(r.offset, r.key, r.value, r.create_version) for r in records]

    assert identity(streamed) == identity(exported) and len(streamed) == 2_000
    assert (reader.header.applied_index, reader.header.applied_offset) == (
        stream.applied_index,
        stream.applied_offset,
    )


def test_the_writer_stays_a_bounded_buffer_ahead_of_the_reader(storage: NodeStorage) -> None:
    fill(storage, 2_000)  # about 500 KB: far more than the buffer
    view = storage.store.open_detached()
    stream = SnapshotStream(view, chunk_bytes=CHUNK, buffer_chunks=2)
    first = stream.next_chunk(timeout=10)
    assert first.startswith(b"RKVSNAP")  # the header leaves before the export ends
    stream._thread.join(0.5)
    assert stream._thread.is_alive() and stream.header is None  # blocked on the buffer
    assert stream.sent_bytes <= 4 * CHUNK
    stream.cancel()
    stream._thread.join(5)
    assert not stream._thread.is_alive() and view.closed  # cancel ends it and frees LMDB


def test_a_cancelled_stream_hands_out_nothing_more(storage: NodeStorage) -> None:
    fill(storage, 500)
    stream = SnapshotStream(storage.store.open_detached(), chunk_bytes=CHUNK, buffer_chunks=1)
    stream.cancel()
    stream._thread.join(5)
    assert not stream._thread.is_alive()
    got = []
    while True:
        try:
            got.append(stream.next_chunk(timeout=0.1))
        except queue.Empty:
            break
    assert len(got) <= 1  # at most the chunk already buffered
