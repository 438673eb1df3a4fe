"""node/snapshot/stream.py: a snapshot sent as it is read, with a bounded buffer."""

from __future__ import annotations

import hashlib
import io
import queue
import threading

from node.snapshot.export import export_snapshot, snapshot_header
from node.snapshot.format import HEADER_BYTES, TRAILER, SnapshotReader
from node.snapshot.held import HeldViews
from node.snapshot.stream import SnapshotStream
from node.state.commands import Batch, Put, encode_entry
from node.storage.record import PREFIX, Record, decode_body
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
    assert stream._thread.is_alive()  # blocked on the buffer
    assert stream.sent_bytes <= 4 * CHUNK
    assert stream.end(keep=False) is None
    assert not stream._thread.is_alive() and view.closed  # ending it frees LMDB


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


def _records(body: bytes) -> list[tuple[bytes, bytes, int]]:
    """(key, value, offset) of every complete record after the header of a cut body."""
    found = []
    at = HEADER_BYTES
    while at + PREFIX.size <= len(body):
        length, _ = PREFIX.unpack_from(body, at)
        if at + PREFIX.size + length > len(body):
            break
        record = decode_body(body[at + PREFIX.size : at + PREFIX.size + length])
        found.append((record.key, record.value, record.offset))
        at += PREFIX.size + length
    return found


def test_a_cut_stream_resumes_after_its_last_key_from_the_same_view(
    storage: NodeStorage,
) -> None:
    fill(storage, 2_000)
    reference = io.BytesIO()
    export_snapshot(storage.store, reference)
    whole = [
        (r.key, r.value, r.offset)
        for r, _ in SnapshotReader(io.BytesIO(reference.getvalue()), "f").records()
    ]
    stream = SnapshotStream(storage.store.open_detached(), chunk_bytes=CHUNK, buffer_chunks=2)
    received = b"".join(stream.next_chunk(timeout=10) for _ in range(5))
    view = stream.end(keep=True)
    assert view is not None and not view.closed  # cut: the view is handed on, open
    # Meanwhile the state moves on; the resumed part must not see it.
    fill(storage, 3_000)
    first = _records(received)
    assert 0 < len(first) < 2_000
    rest = SnapshotStream(view, chunk_bytes=CHUNK, header=stream.header, after=first[-1][0])
    part = drain(rest)
    assert part[:HEADER_BYTES] == received[:HEADER_BYTES]  # the same header
    magic, count, digest = TRAILER.unpack(part[-TRAILER.size :])
    assert magic == b"RKVSNEND" and count == 2_000 - len(first)
    assert hashlib.sha256(part[: -TRAILER.size]).digest() == digest
    assert first + _records(part[: -TRAILER.size]) == whole
    assert not view.closed  # sent whole, yet kept: the reader may not have got it all
    assert rest.end(keep=False) is None and view.closed


def test_held_views_are_let_go_when_lmdb_asks_or_time_runs_out(storage: NodeStorage) -> None:
    fill(storage, 200)
    held = HeldViews(hold_seconds=30.0)
    with storage.store.reader() as view:
        header = snapshot_header(view)
    kept = storage.store.open_detached()
    held.hold("a", kept, header)
    held.hold("b", storage.store.open_detached(), header)
    held.hold("c", storage.store.open_detached(), header)  # at most 2: "a" goes
    assert kept.closed and held.take("a") is None and len(held) == 2
    b = held.take("b")
    assert b is not None and not b.view.closed  # taken: the caller owns it now
    b.view.close()
    c_view = storage.store.open_detached()
    held.hold("d", c_view, header)
    c_view.interrupted.set()  # a map resize asks every reader to let go
    for _ in range(100):
        if c_view.closed:
            break
        threading.Event().wait(0.05)
    assert c_view.closed and held.take("d") is None
    short = HeldViews(hold_seconds=0.1)
    expiring = storage.store.open_detached()
    short.hold("e", expiring, header)
    for _ in range(100):
        if expiring.closed:
            break
        threading.Event().wait(0.05)
    assert expiring.closed and short.take("e") is None
    held.close_all()
