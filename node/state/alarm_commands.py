"""The commands of cluster alarms, and their encoding (entry format 6).

::

    [TAG_RAISE_ALARM, member id, kind, reason]
    [TAG_DISARM_ALARM, member id | nil, kind]

An alarm is raised by a member about itself (today the only kind is
``nospace``: its disk is full or its data passed ``--quota-bytes``) and
disarmed by an operator (POST /v1/alarms:disarm, ``rkv alarm disarm``); a
disarm without a member disarms that kind on every member. Both go through the
log like any write, so every replica holds the same alarms
(node/state/alarms.py). Tags are part of the journal: never renumber them.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

from node.errors import EntryDecodeError
from node.keyspace import member_id_problem

TAG_RAISE_ALARM = 25
TAG_DISARM_ALARM = 26

MAX_ALARM_REASON_CHARS = 1024
"""The longest reason an alarm keeps (a raise with a longer one is cut by its proposer)."""


class AlarmKind(enum.Enum):
    """What an alarm says; values are part of the encoding."""

    NOSPACE = "nospace"
    """A member's disk is full, or its data passed --quota-bytes: writes that add
    data are refused cluster-wide (507 ``no_space``) until it is disarmed."""


class RaiseAlarm(NamedTuple):
    """``member`` raises an alarm of ``kind`` about itself; a no-op if it is raised."""

    member: str
    kind: AlarmKind
    reason: str


class DisarmAlarm(NamedTuple):
    """Disarm the alarm of ``kind`` of ``member`` (None: of every member)."""

    member: str | None
    kind: AlarmKind


AlarmCommand = RaiseAlarm | DisarmAlarm


def alarm_kind(value: object) -> AlarmKind | None:
    """The kind named ``value``, or None."""
    return next((kind for kind in AlarmKind if kind.value == value), None)


def _problem(member: object, kind: object, reason: object = "") -> str | None:
    if member is not None and (type(member) is not str or member_id_problem(member)):
        return f"an alarm's member must be a member id, not {member!r:.80}"
    if alarm_kind(kind) is None:
        kinds = ", ".join(k.value for k in AlarmKind)
        return f"an alarm's kind is one of {kinds}, not {kind!r:.80}"
    if type(reason) is not str or len(reason) > MAX_ALARM_REASON_CHARS:
        return f"an alarm's reason is a string of at most {MAX_ALARM_REASON_CHARS} characters"
    return None


def encode_alarm_command(command: AlarmCommand) -> list[Any]:
    """ValueError for a command decoding would refuse."""
    if isinstance(command, RaiseAlarm):
        problem = _problem(command.member, command.kind.value, command.reason)
        if command.member is None or problem is not None:
            raise ValueError(f"cannot encode an alarm: {problem or 'it needs a member'}")
        return [TAG_RAISE_ALARM, command.member, command.kind.value, command.reason]
    problem = _problem(command.member, command.kind.value)
    if problem is not None:
        raise ValueError(f"cannot encode an alarm's disarm: {problem}")
    return [TAG_DISARM_ALARM, command.member, command.kind.value]


def is_alarm_command(raw: list[Any]) -> bool:
    return (raw[0] == TAG_RAISE_ALARM and len(raw) == 4) or (
        raw[0] == TAG_DISARM_ALARM and len(raw) == 3
    )


def decode_alarm_command(raw: list[Any]) -> AlarmCommand:
    if raw[0] == TAG_RAISE_ALARM:
        _, member, kind, reason = raw
        problem = _problem(member, kind, reason) if member is not None else "no member"
        if problem is not None:
            raise EntryDecodeError(f"malformed alarm: {problem}")
        return RaiseAlarm(member, AlarmKind(kind), reason)
    _, member, kind = raw
    problem = _problem(member, kind)
    if problem is not None:
        raise EntryDecodeError(f"malformed alarm disarm: {problem}")
    return DisarmAlarm(member, AlarmKind(kind))
