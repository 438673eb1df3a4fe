"""Pulling the records a leader's snapshot marker says this node lacks.

A follower that was away while the leader compacted its raft journal gets
the leader's snapshot marker instead of the entries. Before any later entry
is applied (this runs on pysyncobj's thread, inside the marker load), the
follower pulls the missing commit-log range from the leader's GET /v1/log,
appends it to its own log and LMDB with the original offsets, and advances
its log head to the marker's offset so the next records get the offsets every
replica gives them. If the leader compacted that range, the pulled records
are the latest value of each key in it, and a key overwritten after the
marker may be missing at the marker: later entries that read it (conditions,
counters) can then decide differently here. This is a known open bug
(docs/OPERATIONS.md, "Known limits under faults"); only plain writes are sure
to converge.
"""

from __future__ import annotations

import logging
import time
import urllib.request

from node.log_feed import RecordDecoder
from node.record import Record
from node.recovery import NodeStorage

logger = logging.getLogger(__name__)

_READ_BYTES = 256 * 1024
_PROGRESS_SECONDS = 2.0
TIMEOUT_SECONDS = 30.0


def pull_range(storage: NodeStorage, source_url: str, to_offset: int, raft_index: int) -> int:
    """Pull offsets after this node's applied offset up to ``to_offset`` from
    ``source_url``; afterwards the state stands at ``raft_index``. Returns how
    many records were pulled. Raises ReplicationError or OSError."""
    log, store = storage.commit_log, storage.store
    from_offset = store.applied_offset + 1
    url = f"{source_url.rstrip('/')}/v1/log?from={from_offset}&to={to_offset}"
    logger.info("catching up: pulling offsets %d..%d from %s", from_offset, to_offset, url)
    decoder = RecordDecoder(source_url, log.max_record_bytes)
    pulled = received = 0
    started = last_report = time.monotonic()
    with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:
        while chunk := response.read(_READ_BYTES):
            received += len(chunk)
            records: list[Record] = decoder.feed(chunk)
            if not records:
                continue
            log.append(records)
            store.apply_records(records, max(store.applied_index, records[-1].raft_index))
            pulled += len(records)
            now = time.monotonic()
            if now - last_report >= _PROGRESS_SECONDS:
                last_report = now
                done = store.applied_offset - from_offset + 1
                left = to_offset - store.applied_offset
                eta = left * (now - started) / done if done > 0 else 0.0
                logger.info(
                    "catching up: %d records (%.1f MB), at offset %d of %d "
                    "(%.0f records/s, %.1f MB/s, ETA %.0fs)",
                    pulled,
                    received / 1e6,
                    store.applied_offset,
                    to_offset,
                    pulled / (now - started),
                    received / 1e6 / (now - started),
                    eta,
                )
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
