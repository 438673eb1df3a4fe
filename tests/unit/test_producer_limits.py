"""The cluster's producer limit and the expiry sweep in slices, applied by the real
state machine on real storage: the limit carried by the init entry holds the same
on every replica, entries of older journals keep their meaning, and one expiry
entry never looks at more producers than its slice."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from node.errors import EntryDecodeError
from node.state.commands import (
    FORMAT_VERSION,
    TAG_EXPIRE_PRODUCERS,
    TAG_INIT_PRODUCER,
    Batch,
    ExpireProducers,
    InitProducer,
    decode_entry,
    encode_entry,
)
from node.state.producers import PRODUCERS_PREFIX, producer_key
from node.state.results import ResultCode
from node.storage.config import StorageConfig
from tests.support.state import machine_of
from tests.unit.test_producers import DAY_MS, Node, incr


@pytest.fixture
def node(tmp_path: Path, small_config: StorageConfig) -> Iterator[Node]:
    opened = Node(tmp_path / "node", small_config)
    yield opened
    opened.close()


def producer_records(node: Node) -> int:
    with node.storage.store.reader() as view:
        return view.count_prefix(PRODUCERS_PREFIX)


def entry(*raw_commands: list[object], ts: int = 1000, version: int = FORMAT_VERSION) -> bytes:
    packed: bytes = msgpack.packb([ts, list(raw_commands)], use_bin_type=True)
    return bytes((version,)) + packed


# -- codec: old forms keep their meaning ---------------------------------------------


def test_the_forms_of_older_journals_decode_to_no_limit_and_a_whole_sweep() -> None:
    written = entry([TAG_INIT_PRODUCER, "t", 5], [TAG_EXPIRE_PRODUCERS], version=1)
    old = decode_entry(written)
    assert old.commands == (InitProducer("t", 5, None), ExpireProducers(None, None))
    # ... and encode back to the same bytes (format 1, which older nodes read).
    assert encode_entry(old) == written
    new = (InitProducer(None, 5, 100), ExpireProducers(None, 10), ExpireProducers(42, 10))
    assert decode_entry(encode_entry(Batch(new, 3))).commands == new
    assert encode_entry(Batch(new[2:], 3)) == entry([TAG_EXPIRE_PRODUCERS, 42, 10], ts=3, version=2)
    # The longer forms are format 2: in an entry that says format 1 they are malformed.
    with pytest.raises(EntryDecodeError, match="later format"):
        decode_entry(entry([TAG_EXPIRE_PRODUCERS, 42, 10], version=1))


@pytest.mark.parametrize(
    "raw",
    [
        [TAG_INIT_PRODUCER, None, 5, 0],
        [TAG_INIT_PRODUCER, None, 5, -1],
        [TAG_INIT_PRODUCER, None, 5, "9"],
        [TAG_EXPIRE_PRODUCERS, None, 0],
        [TAG_EXPIRE_PRODUCERS, -1, 10],
        [TAG_EXPIRE_PRODUCERS, None],
    ],
)
def test_malformed_limits_do_not_decode(raw: list[object]) -> None:
    with pytest.raises(EntryDecodeError):
        decode_entry(entry(raw))


@pytest.mark.parametrize(
    "command", [InitProducer(None, 5, 0), ExpireProducers(None, 0), ExpireProducers(3, None)]
)
def test_malformed_limits_are_not_encoded(command: InitProducer | ExpireProducers) -> None:
    with pytest.raises(ValueError):
        encode_entry(Batch((command,)))


# -- the limit -------------------------------------------------------------------------


def test_the_limit_refuses_a_new_producer_but_not_an_epoch_bump(node: Node) -> None:
    first = node.one(InitProducer("t", DAY_MS, 2))
    second = node.one(InitProducer(None, DAY_MS, 2))
    assert first.ok and second.ok
    records = node.records()
    refused = node.one(InitProducer(None, DAY_MS, 2))
    assert refused.code is ResultCode.TOO_MANY_PRODUCERS and "--max-producers 2" in refused.message
    assert node.records() == records  # nothing written
    # Two in one entry: the first is refused as well, the count includes this entry's.
    both = node.apply(InitProducer("u", DAY_MS, 2), InitProducer("v", DAY_MS, 3))
    assert both[0].code is ResultCode.TOO_MANY_PRODUCERS and both[1].ok
    bumped = node.one(InitProducer("t", DAY_MS, 2))
    assert bumped.ok and (bumped.producer_id, bumped.epoch) == (first.producer_id, 1)
    # The existing producers keep writing.
    assert node.one(incr(second.producer_id, 0, 0)).ok
    # An entry of an older journal has no limit.
    assert node.one(InitProducer(None, DAY_MS)).ok
    assert producer_records(node) == 4


def test_the_count_survives_a_restart_and_freed_room_is_reused(node: Node) -> None:
    ids = [node.one(InitProducer(None, 1000, 3), ts=0).producer_id for _ in range(3)]
    node.reopen()  # a new process counts from LMDB when an entry first needs it
    assert node.one(InitProducer(None, 1000, 3), ts=0).code is ResultCode.TOO_MANY_PRODUCERS
    assert machine_of(node.storage).known_producer_count() == 3
    swept = node.one(ExpireProducers(None, 2), ts=5000)
    assert swept.value == b"2" and swept.producer_id != 0
    assert machine_of(node.storage).known_producer_count() == 1
    assert node.one(InitProducer(None, 1000, 3), ts=5000).ok
    assert node.one(InitProducer(None, 1000, 3), ts=5000).ok
    assert node.one(InitProducer(None, 1000, 3), ts=5000).code is ResultCode.TOO_MANY_PRODUCERS
    assert producer_records(node) == 3
    assert node.storage.store.get(producer_key(ids[2])) is not None  # not in the first slice


def test_two_replicas_decide_the_same(tmp_path: Path, small_config: StorageConfig) -> None:
    a = Node(tmp_path / "a", small_config)
    b = Node(tmp_path / "b", small_config)
    try:
        entries = [
            Batch((InitProducer(None, 1000, 2),), 0),
            Batch((InitProducer(None, 1000, 2), InitProducer("x", 1000, 2)), 0),
            Batch((ExpireProducers(None, 1),), 5000),
            Batch((InitProducer("y", 1000, 2),), 5000),
        ]
        outcomes = []
        for replica in (a, b):
            results = []
            for i, batch in enumerate(entries, 1):
                if replica is b and i == 3:
                    replica.reopen()  # b counts again from LMDB mid-way
                results.append(machine_of(replica.storage).apply(i, encode_entry(batch)))
            outcomes.append(results)
        assert outcomes[0] == outcomes[1]
        assert [r.code for r in outcomes[0][1]] == [ResultCode.OK, ResultCode.TOO_MANY_PRODUCERS]
        assert outcomes[0][3][0].ok
    finally:
        a.close()
        b.close()


# -- the sweep in slices -----------------------------------------------------------------


def test_a_sweep_goes_slice_by_slice_and_each_looks_at_no_more_than_its_limit(node: Node) -> None:
    expired = [node.one(InitProducer(None, 1000), ts=0).producer_id for _ in range(7)]
    live = node.one(InitProducer(None, DAY_MS), ts=0).producer_id
    slices = []
    after: int | None = None
    while True:
        before = node.records()
        result = node.one(ExpireProducers(after, 3), ts=5000)
        assert result.ok
        slices.append((int(result.value), node.records() - before))
        if result.producer_id == 0:
            break
        after = result.producer_id
    # 8 producers, 3 per slice: 3 + 3 + 2 looked at; the live one stays.
    assert len(slices) == 3
    assert sum(n for n, _ in slices) == 7
    assert all(n <= 3 and written == n for n, written in slices)
    assert all(node.storage.store.get(producer_key(p)) is None for p in expired)
    assert node.storage.store.get(producer_key(live)) is not None
    # The form of older journals still sweeps everything at once.
    for _ in range(5):
        node.one(InitProducer(None, 1000), ts=6000)
    assert node.one(ExpireProducers(), ts=9000).value == b"5"
