"""Classifying a key whose replicas disagree, and a state that is not its log's replay.

Both engines call these functions (the Spark engine in its tasks), so a key
is classified identically whichever engine found it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

MISSING = "missing"
EXTRA = "extra"
VALUE_DIFFERS = "value_differs"
VERSION_DIFFERS = "version_differs"
NO_MAJORITY = "no_majority"
CLASSES = (MISSING, EXTRA, VALUE_DIFFERS, VERSION_DIFFERS, NO_MAJORITY)
REPLICA_CLASSES = CLASSES[:-1]
"""The classes that name one odd replica (no_majority names none)."""

NOT_IN_LOG = "not_in_log"
NOT_IN_STATE = "not_in_state"
REPLAY_CLASSES = (NOT_IN_LOG, NOT_IN_STATE, VALUE_DIFFERS, VERSION_DIFFERS)

Observation = tuple[int, str] | None
"""A key on one replica: (version, SHA-256 of the value in hex), or None if absent."""


class DivergenceRow(NamedTuple):
    """One finding about a key: ``replica`` (a position) is odd, or None for no majority."""

    bucket: int
    sort_key: bytes
    seq: int
    key: bytes
    klass: str
    replica: int | None
    observations: tuple[Observation, ...]


class ReplayRow(NamedTuple):
    """A key where a replica's state and the replay of its own log disagree."""

    replica: int
    bucket: int
    sort_key: bytes
    key: bytes
    klass: str
    state: Observation
    log: Observation


def _odd_class(majority: Observation, mine: Observation) -> str:
    if majority is None:
        return EXTRA
    if mine is None:
        return MISSING
    return VALUE_DIFFERS if mine[1] != majority[1] else VERSION_DIFFERS


def classify(observations: Sequence[Observation]) -> list[tuple[str, int | None]]:
    """(class, odd replica position) for each disagreement; [] when all agree.

    The odd replicas are those that differ from what a strict majority of the
    replicas hold (absence counts as a value: a key most replicas lack is extra
    where it is present). Without a strict majority, among two replicas for
    instance, the key is one ``no_majority`` finding.
    """
    first = observations[0]
    if all(o == first for o in observations):
        return []
    value, votes = Counter(observations).most_common(1)[0]
    if votes * 2 <= len(observations):
        return [(NO_MAJORITY, None)]
    return [
        (_odd_class(value, mine), position)
        for position, mine in enumerate(observations)
        if mine != value
    ]


def divergence_rows(
    bucket: int, key: bytes, key_order: bytes, observations: Sequence[Observation]
) -> list[DivergenceRow]:
    frozen = tuple(observations)
    return [
        DivergenceRow(bucket, key_order, seq, key, klass, replica, frozen)
        for seq, (klass, replica) in enumerate(classify(observations))
    ]


def replay_class(state: Observation, log: Observation) -> str | None:
    """How a key's state differs from the replay of the log, or None if it does not."""
    if state == log:
        return None
    if log is None:
        return NOT_IN_LOG
    if state is None:
        return NOT_IN_STATE
    return VALUE_DIFFERS if state[1] != log[1] else VERSION_DIFFERS
