"""Catching up with a leader whose raft marker is ahead of this node's state.

A follower that was away (or wiped) while the leader compacted its raft
journal gets the leader's raft marker instead of the entries. Before any
later entry is applied (this runs on pysyncobj's thread, inside the marker
load), the follower downloads the leader's state (GET /v1/snapshot: every
key with its value and version from one LMDB read transaction, at one raft
index and offset at or above the marker's) and installs it in place of its
own (node/snapshot/install.py). Raft entries up to the installed index are then
skipped as already applied; later ones apply as on every replica.

A follower that missed only recent entries first asks for just the missing
range of the source's commit log (``GET /v1/log?complete=1``). The source
serves it only if no compaction has touched those offsets (and holds
compaction off while it streams); the range is then exactly the records the
missing entries wrote, tombstones included. Otherwise (409 range_compacted)
the follower installs the whole state: in a compacted range, a key
overwritten after the range's end has no record left inside it, and later
entries that read it (conditions, counters, producer state) would decide
differently here (the chaos campaigns found exactly that).
"""

from __future__ import annotations

import logging
import shutil
import time

from http_api.client.control import ControlClient, HeadersHook, HttpStatusError
from http_api.client.credentials import Credentials
from node.errors import ReplicationError
from node.snapshot.format import SnapshotReader
from node.snapshot.install import install_snapshot
from node.storage.log_feed import RecordDecoder
from node.storage.record import Record
from node.storage.recovery import NodeStorage
from replication.pull.download import download_snapshot

logger = logging.getLogger(__name__)

_READ_BYTES = 1024 * 1024
_PROGRESS_SECONDS = 2.0
IDLE_TIMEOUT_SECONDS = 30.0
"""The default longest wait for a byte: a transfer that makes progress is never
abandoned, however long it takes; one that stalls is, after this long."""
DOWNLOAD_DIR = ".catch-up"


def catch_up(
    storage: NodeStorage,
    source_url: str,
    to_index: int,
    to_offset: int,
    *,
    idle_timeout: float = IDLE_TIMEOUT_SECONDS,
    credentials: Credentials | None = None,
    headers: HeadersHook | None = None,
) -> int:
    """Bring the state to raft index ``to_index`` and offset ``to_offset`` from
    ``source_url``: the missing range of its log when it is complete there, else
    its whole state. Returns the records pulled or keys installed. ``credentials``: the
    CA the source's https:// URL is verified against, and this node's certificate.
    Raises ReplicationError, SnapshotFormatError, StorageError or OSError."""
    try:
        return pull_range(
            storage,
            source_url,
            to_offset,
            to_index,
            idle_timeout,
            credentials=credentials,
            headers=headers,
        )
    except HttpStatusError as exc:
        if exc.status != 409:
            raise
        logger.info("catching up: %s has compacted the range; installing its state", source_url)
    return install_state(
        storage,
        source_url,
        to_index,
        to_offset,
        idle_timeout,
        credentials=credentials,
        headers=headers,
    )


def pull_range(
    storage: NodeStorage,
    source_url: str,
    to_offset: int,
    raft_index: int,
    idle_timeout: float = IDLE_TIMEOUT_SECONDS,
    *,
    credentials: Credentials | None = None,
    headers: HeadersHook | None = None,  # auth (issue 16): the member token
) -> int:
    """Pull the offsets after this node's applied offset up to ``to_offset``, which the
    source holds complete; afterwards the state stands at ``raft_index``."""
    log, store = storage.commit_log, storage.store
    from_offset = store.applied_offset + 1
    logger.info("catching up: pulling offsets %d..%d from %s", from_offset, to_offset, source_url)
    decoder = RecordDecoder(source_url, log.max_record_bytes)
    pulled = received = 0
    started = time.monotonic()
    control = ControlClient([source_url], idle_timeout, credentials, headers)
    with control.log_range(source_url, from_offset, to_offset) as response:
        head = int(response.getheader("Rkv-Head-Offset") or 0)
        if head < to_offset:
            raise ReplicationError(
                f"{source_url} holds offsets up to {head} only, not up to {to_offset}"
            )
        while chunk := response.read(_READ_BYTES):
            received += len(chunk)
            records: list[Record] = decoder.feed(chunk)
            if records:
                log.append(records)
                store.apply_records(records, max(store.applied_index, records[-1].raft_index))
                pulled += len(records)
    decoder.finish()
    log.advance_to(to_offset + 1)
    log.sync()
    store.write([], raft_index, max(store.applied_offset, to_offset))
    store.sync()
    logger.info(
        "caught up: %d records (%.1f MB) pulled from %s in %.2fs; now at raft index %d, offset %d",
        pulled,
        received / 1e6,
        source_url,
        time.monotonic() - started,
        raft_index,
        store.applied_offset,
    )
    return pulled


def install_state(
    storage: NodeStorage,
    source_url: str,
    to_index: int,
    to_offset: int,
    idle_timeout: float = IDLE_TIMEOUT_SECONDS,
    *,
    credentials: Credentials | None = None,
    headers: HeadersHook | None = None,  # auth (issue 16): the member token
) -> int:
    """Install ``source_url``'s whole state (at or above ``to_index``/``to_offset``)."""
    started = time.monotonic()
    directory = storage.data_dir / DOWNLOAD_DIR
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir()
    try:
        snapshot = directory / "leader.snapshot"
        logger.info("catching up: downloading the state of %s", source_url)
        received = download_snapshot(
            source_url, snapshot, idle_timeout, credentials=credentials, headers=headers
        )
        with open(snapshot, "rb") as f:
            header = SnapshotReader(f, str(snapshot)).header
        if header.applied_index < to_index or header.applied_offset < to_offset:
            # Cannot happen with a source that wrote the marker: its state only grows.
            raise ReplicationError(
                f"{source_url} sent a state at raft index {header.applied_index}, offset "
                f"{header.applied_offset}, behind its marker (index {to_index}, "
                f"offset {to_offset})"
            )
        install_snapshot(storage, snapshot)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    logger.info(
        "caught up: %d records (%.1f MB) pulled from %s in %.2fs; now at raft index %d, offset %d",
        header.record_count,
        received / 1e6,
        source_url,
        time.monotonic() - started,
        header.applied_index,
        header.applied_offset,
    )
    return header.record_count
