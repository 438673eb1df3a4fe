"""apply(raft_index, entry) -> results: the replicated state machine of a node.

Each entry is a :class:`node.state.commands.Batch`. Applying it:

1. decides every command against the current state (LMDB plus the effects of
   earlier commands of the same batch) and assigns each mutation the next
   offset;
2. appends the resulting records to the commit log;
3. writes them to LMDB in one write transaction that also stores the applied
   raft index and offset.

A crash between 2 and 3 is repaired on open by replaying the log, so LMDB
never holds a state the log does not. apply() is deterministic (the timestamp
comes from the entry, offsets from the log head), idempotent by raft index,
and returns error results instead of raising for business outcomes.

Plain puts and deletes are decided here, inline (the hot path); every other
command by :mod:`node.state.deciders` (txns, counters, members) or
:mod:`node.state.producer_apply` (idempotent producers) or
:mod:`node.state.auth_apply` (users, roles, permissions), through the entry's
:class:`node.state.entry_writer.EntryWriter`. A txn applies whole or not at all,
and its writes are consecutive records of one batch, appended and written to
LMDB together with the rest of the entry. Producers' states are written once
per entry, after its commands.

An :class:`node.state.commands.AuditCut` writes nothing. After the whole entry
holding it is applied (its LMDB transaction committed), :attr:`StateMachine.audit_hook`,
if the composition root set one, is called on this (the apply) thread with
the audit id, the split points and a :class:`node.storage.lmdb_store.DetachedView`
opened right then: the state as of exactly that raft index, the same on every
replica. The hook owns the view (it must close it) and must return at once:
the export runs on another thread (node/audit/jobs.py).
"""

from __future__ import annotations

import gc
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import cast

from node.errors import EntryDecodeError, UnsupportedEntryVersion, out_of_space
from node.keyspace import ALARMS_PREFIX, MAX_KEY_BYTES, RESERVED_PREFIX
from node.state.alarm_commands import DisarmAlarm, RaiseAlarm
from node.state.alarms import (
    Alarm,
    adds_data,
    decide_alarm,
    entry_no_space,
    no_space_message,
    no_space_refusal,
    read_alarms,
)
from node.state.auth_apply import decide_auth
from node.state.auth_commands import AuthChange
from node.state.commands import (
    Append,
    AuditCut,
    Barrier,
    Batch,
    Command,
    Delete,
    ExpireProducers,
    Fenced,
    Incr,
    InitProducer,
    Produced,
    Put,
    RemoveMember,
    SetMember,
    Txn,
    decode_entry,
)
from node.state.deciders import (
    decide_counter,
    decide_member,
    decide_txn,
    key_refusal,
    value_refusal,
)
from node.state.entry_writer import EntryWriter, LeaseEvents
from node.state.lease_apply import decide_lease, fence_refusal
from node.state.lease_commands import LeaseCommand
from node.state.load_apply import decide_load
from node.state.load_command import Load
from node.state.producer_apply import decide_expire, decide_init, decide_produced
from node.state.producers import ProducerState
from node.state.results import CommandResult, ResultCode, results_size
from node.storage.commit_log import CommitLog
from node.storage.config import DEFAULT_RESULTS_CACHE_BYTES
from node.storage.lmdb_store import Change, DetachedView, LmdbStore, ReadView, StoredValue
from node.storage.record import Record, RecordOp
from node.storage.recovery import NodeStorage
from node.storage.replay import replay

logger = logging.getLogger(__name__)

_RECENT_RESULTS = 1024
_KNOWN_PRODUCERS = 100_000
"""Decoded producer states kept between entries (a few hundred bytes each)."""
_ALREADY_APPLIED = (
    CommandResult(ResultCode.ALREADY_APPLIED, message="entry was applied before this call"),
)

AuditHook = Callable[[str, tuple[bytes, ...], DetachedView], None]
"""Called with (audit id, split points, a detached view of the cut); owns the view."""
LeaseHook = Callable[[LeaseEvents], None]
"""Called on the apply thread, after an entry that touched leases or locks is applied."""
_LEASE_COMMANDS = LeaseCommand.__args__


class StateMachine:
    def __init__(
        self,
        commit_log: CommitLog,
        store: LmdbStore,
        max_value_bytes: int,
        results_cache_bytes: int = DEFAULT_RESULTS_CACHE_BYTES,
    ) -> None:
        self._log = commit_log
        self._store = store
        self._max_value_bytes = max_value_bytes
        # Results of the last entries, for raft delivering one again (a retried apply):
        # at most _RECENT_RESULTS entries and results_cache_bytes bytes. The proposer
        # gets an entry's results when it is applied; nothing else reads them here.
        self._recent: OrderedDict[int, tuple[int, tuple[CommandResult, ...]]] = OrderedDict()
        self._recent_bytes = 0
        self._results_cache_bytes = results_cache_bytes
        # Producer states decoded by earlier entries: id -> (record version, state).
        self._producers: dict[int, tuple[int, ProducerState]] = {}
        # How many producers' state records LMDB holds, valid while the store's applied
        # index is _producer_count_index (a state install or a replay outside apply
        # moves it: the count is then taken again from LMDB when next needed).
        self._producer_count: int | None = None
        self._producer_count_index = -1
        self._audits: list[AuditCut] = []
        # The raised alarms as of the store's applied index _alarms_index (a state
        # install or a replay outside apply moves it: they are read again from LMDB).
        self._alarms: tuple[Alarm, ...] = ()
        self._alarms_index = -1
        self.audit_hook: AuditHook | None = None
        """Set by the composition root; see the module docs."""
        self.space_hook: Callable[[str], None] | None = None
        """Set by the composition root: told why, when an entry cannot be applied for
        want of space (the entry is retried; node/service/space.py raises the alarm).
        It must be quick and never raise."""
        self.lease_hook: LeaseHook | None = None
        """Set by the composition root: told what each applied entry did to leases and
        locks (node/service/lease_clock.py). It must be quick and never raise."""

    @classmethod
    def over(cls, storage: NodeStorage) -> StateMachine:
        """The state machine applying to an opened data directory's log and LMDB."""
        config = storage.config
        return cls(
            storage.commit_log, storage.store, config.max_value_bytes, config.results_cache_bytes
        )

    @property
    def applied_index(self) -> int:
        return self._store.applied_index

    @property
    def applied_offset(self) -> int:
        return self._store.applied_offset

    def known_producer_count(self) -> int | None:
        """How many producers' state records the applied state holds, when this
        process knows it without counting (it counts when an entry first needs it);
        for a check before proposing. Any thread."""
        count = self._producer_count
        return count if self._producer_count_index == self._store.applied_index else None

    def alarms(self) -> tuple[Alarm, ...]:
        """The alarms raised in the applied state. Any thread."""
        index = self._store.applied_index
        if self._alarms_index != index:
            # The view is at least as new as ``index``: a change after it makes the
            # indexes differ again, and the next call reads again.
            with self._store.reader() as view:
                alarms = read_alarms(view)
            self._alarms, self._alarms_index = alarms, index
        return self._alarms

    def space_refusal(self, command: Command) -> CommandResult | None:
        """The ``no_space`` result ``command`` would get if applied now, or None: for a
        check before proposing (apply decides, against the state as of its entry)."""
        if not adds_data(command):
            return None
        message = no_space_message(self.alarms())
        return None if message is None else no_space_refusal(message)

    def apply(self, raft_index: int, entry: bytes) -> tuple[CommandResult, ...]:
        """Apply one raft entry; an index at or below the applied one changes nothing.

        For a skipped index the results are the ones computed the first time if
        this process still remembers them, else a single ALREADY_APPLIED result.
        A failure to write (raised; raft retries the entry) that means the disk is
        full is also told to :attr:`space_hook`.
        """
        try:
            return self._apply(raft_index, entry)
        except Exception as exc:
            full = out_of_space(exc)
            if full is not None and self.space_hook is not None:
                self.space_hook(full)
            raise

    def _apply(self, raft_index: int, entry: bytes) -> tuple[CommandResult, ...]:
        if self._log.last_offset > self._store.applied_offset:
            # An earlier apply appended to the log but failed before LMDB
            # committed (and raft is retrying): bring LMDB up to the log first,
            # so the retry is recognised instead of writing the records twice.
            logger.warning("LMDB is behind the commit log; replaying before applying")
            replay(self._log, self._store)
        if raft_index <= self._store.applied_index:
            remembered = self._recent.get(raft_index)
            return _ALREADY_APPLIED if remembered is None else remembered[1]
        # Applying a large batch allocates thousands of short-lived, acyclic
        # objects; letting the cyclic GC scan them all costs a quarter of the
        # apply time, so it waits until the entry is done.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._apply_new(raft_index, entry)
        finally:
            if gc_was_enabled:
                gc.enable()

    def _apply_new(self, raft_index: int, entry: bytes) -> tuple[CommandResult, ...]:
        self._audits.clear()
        previous_index = self._store.applied_index
        try:
            batch = decode_entry(entry)
        except UnsupportedEntryVersion:
            # Written by a newer rkv: applying it as a no-op would make this replica
            # differ from the others. Raising stalls the node on this entry until it
            # is upgraded (it reports itself stalled, raft retries the entry).
            raise
        except EntryDecodeError as exc:
            logger.error("raft entry %d cannot be decoded, applied as a no-op: %s", raft_index, exc)
            results: tuple[CommandResult, ...] = (
                CommandResult(ResultCode.MALFORMED_ENTRY, message=str(exc)),
            )
            records: list[Record] = []
            changes: list[Change] = []
            flushed: dict[int, tuple[int, ProducerState]] = {}
            producer_count = self.known_producer_count()
            events = LeaseEvents()
        else:
            with self._store.reader() as view:
                results, writer = self._decide(raft_index, batch, view)
            records = writer.records
            changes = list(writer.pending.items())
            flushed = writer.flushed_producers
            producer_count = writer.producer_count_after()
            events = writer.lease_events
        self._log.append(records)
        applied_offset = records[-1].offset if records else self._store.applied_offset
        self._store.write(changes, raft_index, applied_offset)
        self._producer_count = producer_count
        self._producer_count_index = raft_index
        if self._alarms_index == previous_index:
            if any(key.startswith(ALARMS_PREFIX) for key, _ in changes):
                self._alarms_index = -1  # read again when next asked
            else:
                self._alarms_index = raft_index
        self._remember(raft_index, results)
        if flushed:
            self._remember_producers(flushed)
        if self._audits:
            self._start_audits(raft_index)
        if events and self.lease_hook is not None:
            try:
                self.lease_hook(events)
            except Exception:  # the entry is applied: a hook's failure must not retry it
                logger.exception("the lease hook failed after raft entry %d", raft_index)
        return results

    def _start_audits(self, raft_index: int) -> None:
        """Hand each audit of the entry just applied a view of exactly this state.
        Never raises: the entry is applied, and an audit is not worth a retry."""
        audits, self._audits = self._audits, []
        hook = self.audit_hook
        if hook is None:
            logger.info("raft entry %d holds an audit snapshot; no exporter is set", raft_index)
            return
        for audit in audits:
            try:
                view = self._store.open_detached()
            except Exception:
                logger.exception("audit %s: cannot open a read view of the cut", audit.audit_id)
                continue
            try:
                hook(audit.audit_id, audit.split_points, view)
            except Exception:
                logger.exception("audit %s: the exporter refused the cut", audit.audit_id)
                view.close()

    def _remember_producers(self, flushed: dict[int, tuple[int, ProducerState]]) -> None:
        """Keep the states written by an applied entry, decoded, for the next ones."""
        if len(self._producers) + len(flushed) > _KNOWN_PRODUCERS:
            self._producers.clear()
        self._producers.update(flushed)

    def _remember(self, raft_index: int, results: tuple[CommandResult, ...]) -> None:
        size = results_size(results)
        if size > self._results_cache_bytes:
            return  # too large to keep: a redelivery answers ALREADY_APPLIED
        self._recent[raft_index] = (size, results)
        self._recent_bytes += size
        while len(self._recent) > _RECENT_RESULTS or self._recent_bytes > self._results_cache_bytes:
            _, (dropped, _) = self._recent.popitem(last=False)
            self._recent_bytes -= dropped

    @property
    def results_cache_bytes(self) -> int:
        """The estimated bytes of results held for redelivered entries (at most the cap)."""
        return self._recent_bytes

    def _decide(
        self, raft_index: int, batch: Batch, view: ReadView
    ) -> tuple[tuple[CommandResult, ...], EntryWriter]:
        """Decide every command of ``batch``: its results, and the writer holding the
        records, changes and producer states."""
        writer = EntryWriter(
            raft_index,
            batch.timestamp_ms,
            self._log.next_offset,
            view,
            self._producers,
            producer_count=self.known_producer_count(),
        )
        writer.no_space = entry_no_space(writer)
        results = tuple(self._decide_commands(writer, batch.commands))
        if writer.dirty_producers:
            writer.flush_producers()
        return results, writer

    def _decide_commands(
        self, writer: EntryWriter, commands: Sequence[Command]
    ) -> list[CommandResult]:
        """Plain puts and deletes are decided inline (the hot path: batches of
        thousands); every other command goes to its decider."""
        raft_index = writer.raft_index
        timestamp_ms = writer.timestamp_ms
        view = writer.view
        pending = writer.pending
        records = writer.records
        offset = writer.offset
        results: list[CommandResult] = []
        no_space = writer.no_space  # a raised nospace alarm's message (node/state/alarms.py)
        for command in commands:
            kind = type(command)  # exact type tests: the cheapest dispatch on the hot path
            if no_space is not None and kind is not Delete and adds_data(command):
                results.append(no_space_refusal(no_space))
                continue
            if kind is not Put and kind is not Delete:
                writer.offset = offset
                results.append(self._decide_other(writer, command))
                offset = writer.offset
                no_space = writer.no_space  # an alarm command may have changed it
                continue
            command = cast(Put | Delete, command)  # `kind` told: mypy cannot see it
            key = command.key
            if (
                not (0 < len(key) <= MAX_KEY_BYTES)
                or key.startswith(RESERVED_PREFIX)
                or (kind is Put and len(cast(Put, command).value) > self._max_value_bytes)
            ):
                results.append(self._refusal(command))
                continue
            current = pending[key] if key in pending else view.get(key)
            current_version = 0 if current is None else current.version
            expected = command.expected_version
            if expected is not None and expected != current_version:
                results.append(
                    CommandResult(
                        ResultCode.VERSION_CONFLICT,
                        current_version=current_version,
                        message=f"expected version {expected}, found {current_version}",
                    )
                )
                continue
            if kind is Put:
                value = cast(Put, command).value
                create = offset if current is None else current.create_version
                pending[key] = StoredValue(offset, create, value)
                records.append(
                    Record(offset, raft_index, timestamp_ms, RecordOp.PUT, key, value, create)
                )
            else:
                if current is None:
                    results.append(CommandResult(ResultCode.NOT_FOUND, message="no such key"))
                    continue
                pending[key] = None
                records.append(Record(offset, raft_index, timestamp_ms, RecordOp.DELETE, key))
            results.append(CommandResult(ResultCode.OK, version=offset))
            offset += 1
        writer.offset = offset
        return results

    def _decide_other(self, writer: EntryWriter, command: Command) -> CommandResult:
        if isinstance(command, Barrier):
            return CommandResult(ResultCode.OK, version=writer.offset - 1)
        if isinstance(command, Load):
            return decide_load(writer, command, self._max_value_bytes)
        if isinstance(command, Txn):
            return decide_txn(writer, command, self._max_value_bytes)
        if isinstance(command, Incr | Append):
            return decide_counter(writer, command, self._max_value_bytes)
        if isinstance(command, Produced):
            return decide_produced(writer, command, self._decide_one)
        if isinstance(command, InitProducer):
            return decide_init(writer, command)
        if isinstance(command, ExpireProducers):
            return decide_expire(writer, command)
        if isinstance(command, SetMember | RemoveMember):
            return decide_member(writer, command)
        if isinstance(command, AuditCut):
            # Exported once the whole entry is applied (_start_audits); the answer
            # carries the entry's raft index, where every replica cuts.
            self._audits.append(command)
            return CommandResult(
                ResultCode.OK, version=writer.offset - 1, value=str(writer.raft_index).encode()
            )
        if isinstance(command, AuthChange):
            return decide_auth(writer, command)
        if isinstance(command, _LEASE_COMMANDS):
            return decide_lease(writer, command, self._max_value_bytes)
        if isinstance(command, RaiseAlarm | DisarmAlarm):
            return decide_alarm(writer, command)
        if isinstance(command, Fenced):
            refusal = fence_refusal(writer, command.name, command.token)
            return refusal or self._decide_one(writer, command.command)
        if isinstance(command, Put | Delete):
            return self._decide_one(writer, command)
        raise AssertionError(f"no decider for {type(command).__name__}")

    def _decide_one(self, writer: EntryWriter, command: Command) -> CommandResult:
        return self._decide_commands(writer, (command,))[0]

    def _refusal(self, command: Put | Delete) -> CommandResult:
        refusal = key_refusal(command.key)
        if refusal is None and isinstance(command, Put):
            refusal = value_refusal(command.value, self._max_value_bytes)
        if refusal is None:
            raise AssertionError(f"no reason to refuse {command!r:.100}")
        return refusal
