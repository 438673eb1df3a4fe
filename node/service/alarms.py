"""The cluster's alarms as the HTTP layer and the space monitor use them: read from
this node's applied state, raised and disarmed through the log
(node/state/alarms.py holds the records and what a raised alarm refuses)."""

from __future__ import annotations

from typing import Protocol

from node.errors import InvalidRequest
from node.keyspace import member_id_problem
from node.service.kv_writes import result_error
from node.state.alarm_commands import (
    MAX_ALARM_REASON_CHARS,
    AlarmKind,
    DisarmAlarm,
    RaiseAlarm,
    alarm_kind,
)
from node.state.alarms import Alarm, read_alarms
from node.state.commands import Command
from node.state.results import CommandResult, ResultCode
from node.storage.lmdb_store import LmdbStore


class Proposer(Protocol):
    async def propose(self, command: Command) -> CommandResult: ...


def current_alarms(store: LmdbStore) -> tuple[Alarm, ...]:
    """The alarms raised in this node's applied state."""
    with store.reader() as view:
        return read_alarms(view)


def checked_kind(kind: object) -> AlarmKind:
    found = alarm_kind(kind)
    if found is None:
        kinds = ", ".join(k.value for k in AlarmKind)
        raise InvalidRequest(f"an alarm kind is one of {kinds}, not {kind!r:.80}", "invalid_alarm")
    return found


async def disarm_alarms(
    consensus: Proposer, store: LmdbStore, member: str | None, kind: AlarmKind
) -> tuple[Alarm, ...]:
    """Disarm ``kind`` on ``member`` (None: every member); the alarms left after it.
    Disarming an alarm that is not raised is not an error (nothing changes)."""
    if member is not None and (problem := member_id_problem(member)):
        raise InvalidRequest(problem, "invalid_alarm")
    result = await consensus.propose(DisarmAlarm(member, kind))
    if result.code is not ResultCode.OK:
        raise result_error(result)
    return current_alarms(store)


async def raise_for(
    consensus: Proposer, store: LmdbStore, member: str, kind: AlarmKind, reason: str
) -> tuple[Alarm, ...]:
    """Raise ``kind`` for ``member`` (a member asking for itself, POST /v1/alarms)
    unless this node's state holds it already (then no entry); the alarms after."""
    if problem := member_id_problem(member):
        raise InvalidRequest(problem, "invalid_alarm")
    if not any(a.member == member and a.kind is kind for a in current_alarms(store)):
        await raise_alarm(consensus, member, kind, reason)
    return current_alarms(store)


async def raise_alarm(consensus: Proposer, member: str, kind: AlarmKind, reason: str) -> None:
    """Propose ``kind`` raised by ``member``; a no-op if it is raised already."""
    result = await consensus.propose(RaiseAlarm(member, kind, reason[:MAX_ALARM_REASON_CHARS]))
    if result.code is not ResultCode.OK:
        raise result_error(result)
