"""The working state of one raft entry while the state machine decides it.

Commands of a batch see the effects of the earlier ones: a lookup goes to
``pending`` (this entry's decided changes) before the LMDB snapshot. Each
mutation takes the next offset and appends its commit-log record. A
savepoint lets a transaction whose op fails half-way (an increment of a
non-integer) take back what it decided, so a txn has an effect whole or not
at all.

It also keeps count of the producers' state records (for ``--max-producers``):
how many the state held before the entry (given by the state machine when it
knows, else counted from the view on first need) plus those this entry created,
minus those it deleted.

The plain put/delete path of :mod:`node.state.machine` inlines this logic
for speed; everything else goes through here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from node.state.producers import (
    PRODUCERS_PREFIX,
    ProducerState,
    decode_state,
    encode_state,
    producer_key,
)
from node.storage.lmdb_store import ReadView, StoredValue
from node.storage.record import Record, RecordOp

_ABSENT = object()


@dataclass(slots=True)
class LeaseEvents:
    """What an entry did to leases and locks, for the node's lease clock and lock
    waiters (node/service/): leases granted or renewed (id, ttl in ms, the version of
    their record), leases ended, and the locks whose holder, value or queue changed."""

    renewed: list[tuple[int, int, int]] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)
    locks: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.renewed or self.ended or self.locks)


@dataclass(slots=True)
class Savepoint:
    offset: int
    records: int
    undo: list[tuple[bytes, object]] = field(default_factory=list)


class EntryWriter:
    __slots__ = (
        "_known_producers",
        "_loaded_producers",
        "_producer_base",
        "_savepoint",
        "dirty_producers",
        "flushed_producers",
        "lease_events",
        "new_attachments",
        "no_space",
        "offset",
        "pending",
        "producer_delta",
        "producers",
        "raft_index",
        "records",
        "timestamp_ms",
        "view",
    )

    def __init__(
        self,
        raft_index: int,
        timestamp_ms: int,
        offset: int,
        view: ReadView,
        known_producers: dict[int, tuple[int, ProducerState]] | None = None,
        *,
        producer_count: int | None = None,
    ) -> None:
        self.raft_index = raft_index
        self.timestamp_ms = timestamp_ms
        self.offset = offset
        self.view = view
        self.pending: dict[bytes, StoredValue | None] = {}
        self.records: list[Record] = []
        self.producers: dict[int, ProducerState | None] = {}
        self.dirty_producers: set[int] = set()
        self.flushed_producers: dict[int, tuple[int, ProducerState]] = {}
        self._known_producers = known_producers or {}
        self._loaded_producers: dict[int, StoredValue | None] = {}
        self._savepoint: Savepoint | None = None
        self._producer_base = producer_count
        self.producer_delta = 0
        self.lease_events = LeaseEvents()
        # Attachment keys this entry wrote, by lease: an LMDB scan of the view does not
        # see them, and a lease ended later in the same entry must.
        self.new_attachments: dict[int, list[bytes]] = {}
        self.no_space: str | None = None
        """Set while a nospace alarm is raised (node/state/alarms.py): the refusal's message."""

    def current(self, key: bytes) -> StoredValue | None:
        pending = self.pending
        return pending[key] if key in pending else self.view.get(key)

    def put(self, key: bytes, value: bytes, current: StoredValue | None) -> StoredValue:
        """Write ``value`` (``current`` is what :meth:`current` returned for ``key``)."""
        self._track(key)
        offset = self.offset
        create = offset if current is None else current.create_version
        stored = StoredValue(offset, create, value)
        self.pending[key] = stored
        self.records.append(
            Record(offset, self.raft_index, self.timestamp_ms, RecordOp.PUT, key, value, create)
        )
        self.offset = offset + 1
        return stored

    def delete(self, key: bytes) -> int:
        """Write a tombstone for ``key`` (which must exist); returns its offset."""
        self._track(key)
        offset = self.offset
        self.pending[key] = None
        self.records.append(
            Record(offset, self.raft_index, self.timestamp_ms, RecordOp.DELETE, key)
        )
        self.offset = offset + 1
        return offset

    # -- savepoints (one at a time: txns do not nest) ---------------------------

    def savepoint(self) -> None:
        self._savepoint = Savepoint(self.offset, len(self.records))

    def release(self) -> None:
        self._savepoint = None

    def rollback(self) -> None:
        """Take back every mutation since :meth:`savepoint`."""
        point = self._savepoint
        assert point is not None, "rollback without a savepoint"
        for key, previous in reversed(point.undo):
            if previous is _ABSENT:
                del self.pending[key]
            else:
                self.pending[key] = previous  # type: ignore[assignment]
        del self.records[point.records :]
        self.offset = point.offset
        self._savepoint = None

    def _track(self, key: bytes) -> None:
        if self._savepoint is not None:
            self._savepoint.undo.append((key, self.pending.get(key, _ABSENT)))

    # -- producer state ---------------------------------------------------------

    def producer(self, producer_id: int) -> ProducerState | None:
        """The producer's state as of this point of the entry (decoded once).

        ``known_producers`` (id -> (version of its state record, state)) spares
        the decoding: an entry is used, as a copy, only while the stored record
        still has that version, so any other writer of the key invalidates it."""
        if producer_id not in self.producers:
            stored = self.current(producer_key(producer_id))
            self._loaded_producers[producer_id] = stored
            state = None
            if stored is not None:
                known = self._known_producers.get(producer_id)
                if known is not None and known[0] == stored.version:
                    state = known[1].copy()
                else:
                    state = decode_state(stored.value)
            self.producers[producer_id] = state
        return self.producers[producer_id]

    def producer_count(self) -> int:
        """How many producers' state records the state holds at this point of the entry."""
        if self._producer_base is None:
            self._producer_base = self.view.count_prefix(PRODUCERS_PREFIX)
        return self._producer_base + self.producer_delta

    def producer_count_after(self) -> int | None:
        """:meth:`producer_count` if it is known without counting, else None."""
        return None if self._producer_base is None else self._producer_base + self.producer_delta

    def set_producer(self, producer_id: int, state: ProducerState | None) -> None:
        """Write the producer's state now (init, expiry)."""
        key = producer_key(producer_id)
        self.producers[producer_id] = state
        self.dirty_producers.discard(producer_id)
        current = self.current(key)
        if state is not None:
            if current is None:
                self.producer_delta += 1
            self.put(key, encode_state(state), current)
        elif current is not None:
            self.producer_delta -= 1
            self.delete(key)

    def flush_producers(self) -> None:
        """Write the state of every producer that applied writes in this entry, once
        each (a batch of many writes from one producer costs one record)."""
        for producer_id in sorted(self.dirty_producers):
            state = self.producers[producer_id]
            assert state is not None
            key = producer_key(producer_id)
            # Its record as loaded, unless this entry wrote it since (an init).
            current = (
                self.pending[key] if key in self.pending else self._loaded_producers[producer_id]
            )
            stored = self.put(key, encode_state(state), current)
            self.flushed_producers[producer_id] = (stored.version, state)
        self.dirty_producers.clear()
