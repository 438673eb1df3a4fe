"""The cluster's alarms in the replicated state, and what a raised one refuses.

An alarm is an ordinary record under ``\\x00rkv/alarms/<kind>/<member id>``
(JSON: member, kind, reason, the entry's timestamp), so replay, compaction,
snapshots and pull replication carry it like the member directory, and every
replica holds the same alarms at the same raft index.

While a ``nospace`` alarm is raised, the state machine refuses every command
that adds data with ``no_space`` (:func:`adds_data`): puts, txns with a put,
incr or append op, incr and append, bulk loads, lease grants and leased or TTL
puts, locks and proclaims, a producer's init and its writes of those kinds.
Deletes, txns of deletes and gets, lease keep-alives, revokes and expiries,
unlocks, membership, audits, authentication changes and the alarms themselves
go on. The check is made at apply, against the state as of the entry, so a
write proposed before the alarm and committed after it is refused the same way
on every replica; the proposer checks first (raft/consensus.py) only to spare
the log an entry that would be refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from node.keyspace import ALARMS_PREFIX
from node.state.alarm_commands import AlarmCommand, AlarmKind, RaiseAlarm
from node.state.commands import (
    Append,
    Command,
    Fenced,
    Incr,
    InitProducer,
    Produced,
    Put,
    Txn,
    TxnAppend,
    TxnIncr,
    TxnPut,
)
from node.state.entry_writer import EntryWriter
from node.state.lease_commands import LeasedPut, LeaseGrant, Lock, Proclaim, TtlPut
from node.state.load_command import Load
from node.state.results import CommandResult, ResultCode
from node.storage.lmdb_store import ReadView

MAX_ALARMS = 10_000
"""More alarm records than one read returns (one per member and kind: never reached)."""


@dataclass(frozen=True, slots=True)
class Alarm:
    member: str
    kind: AlarmKind
    reason: str
    raised_ms: int
    """The timestamp of the entry that raised it (the proposing leader's clock)."""

    def as_json(self) -> dict[str, object]:
        return {
            "member": self.member,
            "kind": self.kind.value,
            "reason": self.reason,
            "raised_ms": self.raised_ms,
        }


def alarm_key(kind: AlarmKind, member: str) -> bytes:
    return ALARMS_PREFIX + kind.value.encode() + b"/" + member.encode()


def _decode(value: bytes) -> Alarm:
    body = json.loads(value)
    return Alarm(body["member"], AlarmKind(body["kind"]), body["reason"], body["raised_ms"])


def read_alarms(view: ReadView) -> tuple[Alarm, ...]:
    """Every alarm raised in ``view``'s state, in key order (kind, then member)."""
    items = view.scan(ALARMS_PREFIX, limit=MAX_ALARMS, include_internal=True)
    return tuple(_decode(stored.value) for _, stored in items)


def _alarms_of(writer: EntryWriter) -> tuple[Alarm, ...]:
    """The alarms as the entry being decided sees them (its earlier commands too)."""
    found = {alarm_key(a.kind, a.member): a for a in read_alarms(writer.view)}
    for key, stored in writer.pending.items():
        if key.startswith(ALARMS_PREFIX):
            if stored is None:
                found.pop(key, None)
            else:
                found[key] = _decode(stored.value)
    return tuple(found[key] for key in sorted(found))


def no_space_message(alarms: tuple[Alarm, ...]) -> str | None:
    """What a refused write says while a nospace alarm is raised, or None."""
    raised = [a for a in alarms if a.kind is AlarmKind.NOSPACE]
    if not raised:
        return None
    first = raised[0]
    others = f" (and {len(raised) - 1} more member(s))" if len(raised) > 1 else ""
    return (
        f"no space: member {first.member} raised a NOSPACE alarm{others}: {first.reason}; "
        "writes that add data are refused (deletes and reads go on) until an operator "
        "frees space and disarms it: rkv alarm disarm, or POST /v1/alarms:disarm"
    )


def no_space_refusal(message: str) -> CommandResult:
    return CommandResult(ResultCode.NO_SPACE, message=message)


_ADDING = (Put, Incr, Append, Load, InitProducer, LeaseGrant, LeasedPut, TtlPut, Lock, Proclaim)


def adds_data(command: Command) -> bool:
    """Whether a nospace alarm refuses ``command`` (see the module docs)."""
    if isinstance(command, Produced | Fenced):
        return adds_data(command.command)
    if isinstance(command, Txn):
        ops = (*command.success, *command.failure)
        return any(isinstance(op, TxnPut | TxnIncr | TxnAppend) for op in ops)
    return isinstance(command, _ADDING)


def decide_alarm(writer: EntryWriter, command: AlarmCommand) -> CommandResult:
    """Raise (a no-op when raised already: a member that keeps seeing a full disk
    adds no records) or disarm; then the entry's later commands see the change."""
    if isinstance(command, RaiseAlarm):
        key = alarm_key(command.kind, command.member)
        current = writer.current(key)
        if current is None:
            value = json.dumps(
                Alarm(command.member, command.kind, command.reason, writer.timestamp_ms).as_json(),
                sort_keys=True,
            ).encode()
            writer.put(key, value, current)
    else:
        for alarm in _alarms_of(writer):
            if alarm.kind is command.kind and command.member in (None, alarm.member):
                writer.delete(alarm_key(alarm.kind, alarm.member))
    writer.no_space = no_space_message(_alarms_of(writer))
    return CommandResult(ResultCode.OK, version=writer.offset - 1)


def entry_no_space(writer: EntryWriter) -> str | None:
    """The refusal an entry starts with: the message of the raised nospace alarms."""
    return no_space_message(read_alarms(writer.view))
