"""Applying producer commands: init, expiry, and writes sent by a producer.

The rules are in :mod:`node.state.producers`; this module wires them to an
:class:`node.state.entry_writer.EntryWriter`.
"""

from __future__ import annotations

from collections.abc import Callable

from node.state.commands import ExpireProducers, InitProducer, Produced, ProducibleCommand
from node.state.entry_writer import EntryWriter
from node.state.producers import (
    PRODUCERS_PREFIX,
    ProducerState,
    admit,
    producer_key,
    transactional_key,
)
from node.state.results import CommandResult, ResultCode

_SCAN_PAGE = 1000


def decide_init(writer: EntryWriter, command: InitProducer) -> CommandResult:
    """A new producer (its id is the offset of its first state record), or, for a
    known transactional id, the same id with the next epoch: every older epoch is
    fenced from this entry on, writes already in flight included. A transactional
    id whose producer expired starts over with a new producer, as if it were gone.

    A new producer is refused (``too_many_producers``, nothing written) when the
    state already holds ``command.max_producers`` producers' records, expired ones
    not yet swept included; an epoch bump of a live producer never is."""
    now = writer.timestamp_ms
    tid = command.transactional_id
    if tid is not None:
        mapped = writer.current(transactional_key(tid))
        if mapped is not None:
            producer_id = int(mapped.value)
            state = writer.producer(producer_id)
            if state is not None and not state.expired(now):
                bumped = ProducerState(state.epoch + 1, tid, command.expiry_ms, now)
                writer.set_producer(producer_id, bumped)
                return CommandResult(
                    ResultCode.OK,
                    version=writer.offset - 1,
                    producer_id=producer_id,
                    epoch=bumped.epoch,
                )
    limit = command.max_producers
    if limit is not None and writer.producer_count() >= limit:
        return CommandResult(
            ResultCode.TOO_MANY_PRODUCERS,
            message=f"the cluster holds {writer.producer_count()} producers, its limit "
            f"(--max-producers {limit}); idle ones are dropped after their expiry",
        )
    producer_id = writer.offset
    writer.set_producer(producer_id, ProducerState(0, tid, command.expiry_ms, now))
    if tid is not None:
        key = transactional_key(tid)
        writer.put(key, str(producer_id).encode(), writer.current(key))
    return CommandResult(ResultCode.OK, version=writer.offset - 1, producer_id=producer_id, epoch=0)


def decide_expire(writer: EntryWriter, command: ExpireProducers) -> CommandResult:
    """Delete the producers idle past their own expiry, as of the entry's timestamp:
    every one (the form without a limit, in older journals), or one slice of the
    sweep: the next ``command.limit`` producers' records in key order after
    ``command.after``'s (the state before this entry's commands, like the full
    sweep). A slice that looked at ``limit`` records answers the last one's id in
    ``producer_id`` (where the next slice starts), otherwise 0: the sweep is done."""
    now = writer.timestamp_ms
    expired: list[int] = []
    after = None if command.after is None else producer_key(command.after)
    remaining = command.limit
    last_seen = 0
    while True:
        page_size = _SCAN_PAGE if remaining is None else min(_SCAN_PAGE, remaining)
        page = writer.view.scan(PRODUCERS_PREFIX, after, page_size, include_internal=True)
        for key, _ in page:
            producer_id = int(key[len(PRODUCERS_PREFIX) :])
            last_seen = producer_id
            state = writer.producer(producer_id)
            if state is not None and state.expired(now):
                expired.append(producer_id)
        if remaining is not None:
            remaining -= len(page)
        if len(page) < page_size:
            last_seen = 0  # the end of the producers: nothing follows
            break
        if remaining == 0:
            break
        after = page[-1][0]
    for producer_id in expired:
        state = writer.producer(producer_id)
        assert state is not None
        writer.set_producer(producer_id, None)
        if state.transactional_id is not None:
            key = transactional_key(state.transactional_id)
            mapped = writer.current(key)
            if mapped is not None and mapped.value == str(producer_id).encode():
                writer.delete(key)
    return CommandResult(
        ResultCode.OK,
        version=writer.offset - 1,
        value=b"%d" % len(expired),
        producer_id=0 if command.limit is None else last_seen,
    )


def decide_produced(
    writer: EntryWriter,
    command: Produced,
    decide: Callable[[EntryWriter, ProducibleCommand], CommandResult],
) -> CommandResult:
    """Admit the write by the producer rules, then apply it with ``decide`` and
    remember its result under its sequence."""
    producer_id = command.producer_id
    state = writer.producer(producer_id)
    answer = admit(state, producer_id, command.epoch, command.sequence, writer.timestamp_ms)
    if answer is not None:
        return answer
    assert state is not None
    result = decide(writer, command.command)
    state.remember(command.sequence, result, writer.timestamp_ms)
    writer.dirty_producers.add(producer_id)
    return result
