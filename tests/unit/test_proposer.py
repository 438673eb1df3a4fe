"""Group commit, barrier coalescing and backpressure of raft/proposer.py.

Raft is replaced by a recorder of submitted entries: what is under test is
how proposals become entries and how outcomes come back.
"""

from __future__ import annotations

import asyncio

import pytest

from node.errors import InvalidRequest, NotApplied, Overloaded, UnknownOutcome
from node.state.commands import Barrier, Put, Txn, TxnGet, TxnPut, decode_entry
from node.state.results import CommandResult, ResultCode
from raft.proposer import GroupCommitProposer


class Raft:
    def __init__(self) -> None:
        self.entries: list[tuple[int, bytes]] = []

    def submit(self, entry_id: int, entry: bytes) -> None:
        self.entries.append((entry_id, entry))

    def commands(self, i: int) -> tuple[object, ...]:
        return decode_entry(self.entries[i][1]).commands


def make(raft: Raft, **overrides: float) -> GroupCommitProposer:
    settings = {
        "max_commands_per_entry": 100,
        "max_entries_in_flight": 2,
        "max_pending_commands": 1000,
        "proposal_timeout": 2.0,
    }
    settings.update(overrides)
    return GroupCommitProposer(raft.submit, **settings)  # type: ignore[arg-type]


def ok_results(n: int, first_version: int = 1) -> tuple[CommandResult, ...]:
    return tuple(CommandResult(ResultCode.OK, version=first_version + i) for i in range(n))


@pytest.mark.asyncio
async def test_concurrent_proposals_share_one_entry_and_get_their_own_results() -> None:
    raft = Raft()
    proposer = make(raft)
    tasks = [asyncio.create_task(proposer.propose(Put(b"k%d" % i, b"v"))) for i in range(50)]
    await asyncio.sleep(0)  # let every task enqueue
    await asyncio.sleep(0)  # and the flush run
    assert len(raft.entries) == 1
    assert len(raft.commands(0)) == 50
    proposer.complete(raft.entries[0][0], ok_results(50, first_version=10))
    results = await asyncio.gather(*tasks)
    assert [r.version for r in results] == list(range(10, 60))
    assert proposer.commands_waiting == 0


@pytest.mark.asyncio
async def test_batches_grow_while_entries_are_in_flight() -> None:
    raft = Raft()
    proposer = make(raft, max_entries_in_flight=1, max_commands_per_entry=1000)
    first = asyncio.create_task(proposer.propose(Put(b"a", b"1")))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(raft.entries) == 1
    later = [asyncio.create_task(proposer.propose(Put(b"b%d" % i, b"2"))) for i in range(30)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(raft.entries) == 1  # waiting for the first entry to complete
    proposer.complete(raft.entries[0][0], ok_results(1))
    await asyncio.sleep(0)
    assert len(raft.entries) == 2 and len(raft.commands(1)) == 30
    proposer.complete(raft.entries[1][0], ok_results(30, 2))
    await asyncio.gather(first, *later)


@pytest.mark.asyncio
async def test_reads_share_barriers_and_only_one_barrier_is_in_raft() -> None:
    raft = Raft()
    proposer = make(raft)
    reads = [asyncio.create_task(proposer.read_barrier()) for _ in range(20)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(raft.entries) == 1 and raft.commands(0) == (Barrier(),)
    # Reads after that flush cannot use the barrier already in raft: they wait
    # together for the next one, proposed once the first is applied.
    late = [asyncio.create_task(proposer.read_barrier()) for _ in range(10)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(raft.entries) == 1
    proposer.complete(raft.entries[0][0], ok_results(1))
    await asyncio.gather(*reads)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not any(t.done() for t in late)
    assert len(raft.entries) == 2 and raft.commands(1) == (Barrier(),)
    proposer.complete(raft.entries[1][0], ok_results(1))
    await asyncio.gather(*late)
    assert proposer.commands_waiting == 0


@pytest.mark.asyncio
async def test_a_barrier_travels_with_writes_of_the_same_flush() -> None:
    raft = Raft()
    proposer = make(raft)
    write = asyncio.create_task(proposer.propose(Put(b"k", b"v")))
    read = asyncio.create_task(proposer.read_barrier())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(raft.entries) == 1 and raft.commands(0) == (Put(b"k", b"v"), Barrier())
    proposer.complete(raft.entries[0][0], ok_results(2))
    await asyncio.gather(write, read)


@pytest.mark.asyncio
async def test_too_many_waiting_commands_is_overloaded() -> None:
    raft = Raft()
    proposer = make(raft, max_pending_commands=3)
    tasks = [asyncio.create_task(proposer.propose(Put(b"k", b"v"))) for _ in range(3)]
    await asyncio.sleep(0)
    with pytest.raises(Overloaded):
        await proposer.propose(Put(b"k", b"v"))
    await asyncio.sleep(0)
    proposer.complete(raft.entries[0][0], ok_results(3))
    await asyncio.gather(*tasks)
    await asyncio.sleep(0)
    task = asyncio.create_task(proposer.propose(Put(b"k", b"v")))  # room again
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    proposer.complete(raft.entries[-1][0], ok_results(1))
    assert (await task).ok


@pytest.mark.asyncio
async def test_no_answer_by_the_deadline_is_an_unknown_outcome() -> None:
    raft = Raft()
    proposer = make(raft, proposal_timeout=5.0)
    task = asyncio.create_task(proposer.propose(Put(b"k", b"v")))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert proposer.expire() == 0  # not yet
    assert proposer.expire(now=10**12) == 1
    with pytest.raises(UnknownOutcome):
        await task
    assert proposer.commands_waiting == 0
    proposer.complete(raft.entries[0][0], ok_results(1))  # a late answer is ignored
    assert proposer.commands_waiting == 0


@pytest.mark.asyncio
async def test_commands_never_handed_to_raft_are_not_applied() -> None:
    raft = Raft()
    proposer = make(raft, max_entries_in_flight=1)
    first = asyncio.create_task(proposer.propose(Put(b"a", b"v")))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    queued = asyncio.create_task(proposer.propose(Put(b"b", b"v")))  # waits: 1 entry in flight
    await asyncio.sleep(0)
    assert len(raft.entries) == 1
    assert proposer.expire(now=10**12) == 2
    with pytest.raises(UnknownOutcome):
        await first
    with pytest.raises(NotApplied):
        await queued
    assert proposer.commands_waiting == 0


@pytest.mark.asyncio
async def test_failures_and_result_mismatches_reach_every_waiter() -> None:
    raft = Raft()
    proposer = make(raft)
    tasks = [asyncio.create_task(proposer.propose(Put(b"k%d" % i, b"v"))) for i in range(3)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    proposer.complete(raft.entries[0][0], NotApplied("leader changed"))
    for task in tasks:
        with pytest.raises(NotApplied):
            await task
    tasks = [asyncio.create_task(proposer.propose(Put(b"k%d" % i, b"v"))) for i in range(3)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    proposer.complete(raft.entries[1][0], ok_results(2))  # one result short
    for task in tasks:
        with pytest.raises(UnknownOutcome):
            await task


@pytest.mark.asyncio
async def test_a_failed_barrier_does_not_block_later_reads() -> None:
    raft = Raft()
    proposer = make(raft)
    read = asyncio.create_task(proposer.read_barrier())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    proposer.complete(raft.entries[0][0], NotApplied("no leader"))
    with pytest.raises(NotApplied):
        await read
    again = asyncio.create_task(proposer.read_barrier())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(raft.entries) == 2
    proposer.complete(raft.entries[1][0], ok_results(1))
    await again


@pytest.mark.asyncio
async def test_an_unencodable_command_fails_alone_and_frees_its_slot() -> None:
    raft = Raft()
    proposer = make(raft)
    good = [asyncio.create_task(proposer.propose(Put(b"k%d" % i, b"v"))) for i in range(5)]
    bad = asyncio.create_task(proposer.propose(Put(b"k", b"v", expected_version=2**64)))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    with pytest.raises(InvalidRequest):
        await bad
    assert len(raft.entries) == 1 and len(raft.commands(0)) == 5
    proposer.complete(raft.entries[0][0], ok_results(5))
    assert all(r.ok for r in await asyncio.gather(*good))
    assert proposer.commands_waiting == 0


@pytest.mark.asyncio
async def test_an_entry_holds_no_more_than_max_entry_bytes_but_at_least_one_command() -> None:
    raft = Raft()
    proposer = make(raft, max_entry_bytes=250_000, max_entries_in_flight=100)
    big = b"v" * 100_000
    tasks = [asyncio.ensure_future(proposer.propose(Put(b"k%d" % i, big))) for i in range(5)]
    huge = asyncio.ensure_future(proposer.propose(Put(b"huge", b"h" * 1_000_000)))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    sizes = [len(raft.commands(i)) for i in range(len(raft.entries))]
    # 100 KB values, 250 KB an entry: two a time; the 1 MB one goes alone.
    assert sizes == [2, 2, 1, 1], sizes
    for (entry_id, _), size in zip(raft.entries, sizes, strict=True):
        proposer.complete(entry_id, ok_results(size))
    results = await asyncio.gather(*tasks, huge)
    assert all(result.code is ResultCode.OK for result in results)


@pytest.mark.asyncio
async def test_a_txn_that_reads_counts_its_result_bound_against_the_entry() -> None:
    """Every replica holds an entry's results while applying it: two reading txns whose
    bounds together pass max_entry_bytes go in different entries, small as they are."""
    raft = Raft()
    proposer = make(raft, max_entry_bytes=250_000, max_entries_in_flight=100)
    reading = Txn((), (TxnGet(b"k"),), (), max_result_bytes=200_000)
    writing = Txn((), (TxnPut(b"k", b"v"),), (), max_result_bytes=200_000)
    tasks = [asyncio.ensure_future(proposer.propose(t)) for t in (reading, reading, writing)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    sizes = [len(raft.commands(i)) for i in range(len(raft.entries))]
    assert sizes == [1, 2], sizes  # the write returns nothing: it joins the second read
    for (entry_id, _), size in zip(raft.entries, sizes, strict=True):
        proposer.complete(entry_id, ok_results(size))
    await asyncio.gather(*tasks)
