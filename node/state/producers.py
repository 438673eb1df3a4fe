"""Idempotent producers (Kafka's KIP-98, RocketMQ's RIP-47): the rules and the state.

A producer is allocated through the log (:class:`node.state.commands.InitProducer`)
and gets an id and an epoch; re-initialising under the same transactional id
keeps the id, bumps the epoch and so fences every older epoch. Each write it
sends carries (id, epoch, sequence), sequences counting from 0 per epoch.
Applying such a write (:func:`admit`):

- no such producer, or idle past its expiry -> ``unknown_producer``;
- an epoch other than the current one -> ``producer_fenced``;
- a sequence applied before and still among the last :data:`WINDOW` -> that
  write's original result again, marked duplicate (nothing is applied);
- older than that -> ``duplicate_sequence_too_old``;
- more than one past the last applied -> ``out_of_order_sequence``;
- the next one -> applied, and its result remembered.

Whatever the outcome of an applied write (a failed compare-and-set too), it is
its sequence's result: a retry gets the same answer. The state of a producer
is an ordinary record under the reserved prefix (:func:`producer_key` ->
:func:`encode_state`), so restarts, compaction, snapshots and replica rebuilds
carry it like any key; everything here is decided from the log alone (the
entry's timestamp is the clock), so every replica decides the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgpack

from node.errors import EntryDecodeError
from node.keyspace import RESERVED_PREFIX
from node.state.results import CommandResult, OpResult, ResultCode

PRODUCERS_PREFIX = RESERVED_PREFIX + b"producers/"
"""PRODUCERS_PREFIX + decimal producer id -> :func:`encode_state`."""
PRODUCER_IDS_PREFIX = RESERVED_PREFIX + b"producer-ids/"
"""PRODUCER_IDS_PREFIX + transactional id (UTF-8) -> decimal producer id."""
WINDOW = 5  # at most 15: encode_state relies on msgpack fixarrays
"""How many recent results a producer keeps (Kafka keeps 5 in-flight batches)."""
DEFAULT_EXPIRY_MS = 7 * 24 * 3600 * 1000
DEFAULT_MAX_PRODUCERS = 100_000
"""The most producers a cluster holds (``--max-producers``); carried in each init entry."""
DEFAULT_SWEEP_SLICE = 1000
"""The most producers one expiry entry looks at (``--producer-sweep-slice``)."""
MAX_CACHED_VALUE_BYTES = 64 * 1024
"""A remembered txn result whose ``get`` values exceed this keeps them out (see
:func:`_cacheable`): the state record is rewritten on every write."""
_STATE_FORMAT = 1
_CODES = {code.value: code for code in ResultCode}


class ProducerTag(NamedTuple):
    """What an idempotent producer's write carries."""

    producer_id: int
    epoch: int
    sequence: int


def producer_key(producer_id: int) -> bytes:
    return PRODUCERS_PREFIX + str(producer_id).encode()


def transactional_key(transactional_id: str) -> bytes:
    return PRODUCER_IDS_PREFIX + transactional_id.encode()


class Remembered(NamedTuple):
    """One applied sequence's result, with its encoding (kept: the state is
    re-encoded after every write, and its results rarely change)."""

    sequence: int
    result: CommandResult
    packed: bytes


def _remembered(sequence: int, result: CommandResult) -> Remembered:
    packed: bytes = msgpack.packb([sequence, _encode_result(result)], use_bin_type=True)
    return Remembered(sequence, result, packed)


@dataclass(slots=True)
class ProducerState:
    epoch: int
    transactional_id: str | None
    expiry_ms: int
    last_seen_ms: int
    last_sequence: int = -1
    recent: list[Remembered] = field(default_factory=list)

    def expired(self, now_ms: int) -> bool:
        return now_ms - self.last_seen_ms > self.expiry_ms

    def remember(self, sequence: int, result: CommandResult, now_ms: int) -> None:
        self.last_sequence = sequence
        self.last_seen_ms = max(self.last_seen_ms, now_ms)
        self.recent.append(_remembered(sequence, _cacheable(result)))
        del self.recent[:-WINDOW]

    def copy(self) -> ProducerState:
        return ProducerState(
            self.epoch,
            self.transactional_id,
            self.expiry_ms,
            self.last_seen_ms,
            self.last_sequence,
            list(self.recent),
        )


def admit(
    state: ProducerState | None, producer_id: int, epoch: int, sequence: int, now_ms: int
) -> CommandResult | None:
    """None when the write is to be applied now; otherwise the answer to give."""
    if state is None or state.expired(now_ms):
        why = "does not exist" if state is None else "expired after being idle"
        return CommandResult(
            ResultCode.UNKNOWN_PRODUCER,
            message=f"producer {producer_id} {why}; initialise a new one",
        )
    if epoch != state.epoch:
        return CommandResult(
            ResultCode.PRODUCER_FENCED,
            message=f"producer {producer_id} epoch {epoch} is fenced; the current one is "
            f"{state.epoch}",
        )
    if sequence == state.last_sequence + 1:
        return None
    if sequence > state.last_sequence:
        return CommandResult(
            ResultCode.OUT_OF_ORDER_SEQUENCE,
            message=f"sequence {sequence} skips ahead: the next expected is "
            f"{state.last_sequence + 1}",
        )
    for seen, result, _ in state.recent:
        if seen == sequence:
            return result._replace(duplicate=True)
    return CommandResult(
        ResultCode.DUPLICATE_SEQUENCE_TOO_OLD,
        message=f"sequence {sequence} was applied, but only the last {WINDOW} results are "
        f"kept (the last is {state.last_sequence})",
    )


def _cacheable(result: CommandResult) -> CommandResult:
    size = sum(len(op.value) for op in result.op_results)
    if size <= MAX_CACHED_VALUE_BYTES:
        return result
    return result._replace(
        op_results=tuple(op._replace(value=b"") for op in result.op_results),
        message="the values read by this transaction are too large to keep for retries",
    )


def _encode_result(result: CommandResult) -> list[Any]:
    return [
        result.code.value,
        result.version,
        result.current_version,
        result.message,
        result.succeeded,
        [list(op) for op in result.op_results],
        result.value,
    ]


def _decode_result(raw: list[Any]) -> CommandResult:
    code, version, current_version, message, succeeded, ops, value = raw
    return CommandResult(
        _CODES[code],
        version,
        current_version,
        message,
        succeeded,
        tuple(OpResult(*op) for op in ops),
        value,
    )


def encode_state(state: ProducerState) -> bytes:
    """msgpack ``[format, epoch, transactional id, expiry_ms, last_seen_ms,
    last_sequence, [[sequence, result], ...]]``, reusing each result's encoding."""
    fields: bytes = msgpack.packb(
        [
            _STATE_FORMAT,
            state.epoch,
            state.transactional_id,
            state.expiry_ms,
            state.last_seen_ms,
            state.last_sequence,
        ],
        use_bin_type=True,
    )
    # Both arrays are msgpack fixarrays (at most 15 items): a one-byte header each,
    # so the six fields' array becomes the seven-item one by swapping that byte.
    return b"".join(
        (
            bytes((0x97,)),
            fields[1:],
            bytes((0x90 | len(state.recent),)),
            *(item.packed for item in state.recent),
        )
    )


def decode_state(data: bytes) -> ProducerState:
    try:
        raw = msgpack.unpackb(data, raw=False, use_list=True)
        fmt, epoch, tid, expiry_ms, last_seen_ms, last_sequence, recent = raw
        if fmt != _STATE_FORMAT:
            raise EntryDecodeError(f"unknown producer state format {fmt!r}")
        return ProducerState(
            epoch,
            tid,
            expiry_ms,
            last_seen_ms,
            last_sequence,
            [_remembered(seq, _decode_result(result)) for seq, result in recent],
        )
    except (ValueError, TypeError, KeyError, msgpack.ExtraData) as exc:
        raise EntryDecodeError(f"producer state cannot be decoded: {exc}") from exc
