"""Idempotent producers and read-modify-write commands, applied by the real state
machine on real storage: the sequence rules, fencing, expiry, and that the state
survives a restart, a compaction and an LMDB rebuilt from the log."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from node.errors import EntryDecodeError
from node.state.commands import (
    FORMAT_VERSION,
    TAG_PRODUCED,
    Append,
    Batch,
    Command,
    Compare,
    CompareTarget,
    ExpireProducers,
    Incr,
    InitProducer,
    Produced,
    Put,
    Txn,
    TxnAppend,
    TxnGet,
    TxnIncr,
    TxnPut,
    decode_entry,
    encode_entry,
)
from node.state.counters import parse_counter
from node.state.producers import (
    PRODUCER_IDS_PREFIX,
    PRODUCERS_PREFIX,
    WINDOW,
    decode_state,
    producer_key,
)
from node.state.results import CommandResult, ResultCode
from node.storage.compaction import CompactionPolicy, compact
from node.storage.config import StorageConfig
from node.storage.datadir import STATE_DIR
from node.storage.recovery import open_storage
from tests.support.state import machine_of

DAY_MS = 24 * 3600 * 1000


class Node:
    """One node's storage and a raft index counter: apply(...) is one raft entry."""

    def __init__(self, path: Path, config: StorageConfig) -> None:
        self.path = path
        self.config = config
        self.storage = open_storage(path, config)
        self.index = machine_of(self.storage).applied_index

    def apply(self, *commands: Command, ts: int = 1000) -> tuple[CommandResult, ...]:
        self.index += 1
        return machine_of(self.storage).apply(self.index, encode_entry(Batch(commands, ts)))

    def one(self, command: Command, ts: int = 1000) -> CommandResult:
        return self.apply(command, ts=ts)[0]

    def init(
        self, tid: str | None = None, expiry_ms: int = DAY_MS, ts: int = 1000
    ) -> tuple[int, int]:
        result = self.one(InitProducer(tid, expiry_ms), ts)
        assert result.ok, result
        return result.producer_id, result.epoch

    def value(self, key: bytes) -> bytes | None:
        found = self.storage.store.get(key)
        return None if found is None else found.value

    def records(self) -> int:
        return sum(1 for _ in self.storage.commit_log.read(1))

    def reopen(self) -> None:
        self.storage.close()
        self.storage = open_storage(self.path, self.config)

    def close(self) -> None:
        self.storage.close()


@pytest.fixture
def node(tmp_path: Path, small_config: StorageConfig) -> Iterator[Node]:
    opened = Node(tmp_path / "node", small_config)
    yield opened
    opened.close()


def incr(pid: int, epoch: int, seq: int, key: bytes = b"c", by: int = 1) -> Produced:
    return Produced(pid, epoch, seq, Incr(key, by))


# -- allocation and fencing -------------------------------------------------------


def test_producers_get_distinct_ids_and_a_transactional_id_keeps_its_id(node: Node) -> None:
    a, b = node.init(), node.init()
    assert a[0] != b[0] and a[1] == b[1] == 0
    first = node.init("orders")
    again = node.init("orders")
    assert again == (first[0], first[1] + 1)
    assert node.init("other")[0] not in (a[0], b[0], first[0])
    # Two inits in one entry are still distinct producers.
    one, two = node.apply(InitProducer(None, DAY_MS), InitProducer(None, DAY_MS))
    assert one.producer_id != two.producer_id


def test_an_older_epoch_is_fenced_from_the_reinit_entry_on(node: Node) -> None:
    pid, epoch = node.init("t")
    assert node.one(incr(pid, epoch, 0)).ok
    # The re-init and an in-flight write of the old epoch land in the same entry,
    # the write after the init: it is fenced, it does not apply.
    reinit, late = node.apply(InitProducer("t", DAY_MS), incr(pid, epoch, 1))
    assert reinit.epoch == epoch + 1
    assert late.code is ResultCode.PRODUCER_FENCED
    assert node.value(b"c") == b"1"
    # The new epoch starts at sequence 0.
    assert node.one(incr(pid, reinit.epoch, 0)).value == b"2"
    assert node.one(incr(pid, epoch, 2)).code is ResultCode.PRODUCER_FENCED
    # An epoch from the future is no better.
    assert node.one(incr(pid, reinit.epoch + 1, 1)).code is ResultCode.PRODUCER_FENCED


def test_an_unknown_producer_is_refused(node: Node) -> None:
    assert node.one(incr(999, 0, 0)).code is ResultCode.UNKNOWN_PRODUCER
    assert node.value(b"c") is None


# -- sequences --------------------------------------------------------------------


def test_a_retried_sequence_gets_its_original_result_and_applies_nothing(node: Node) -> None:
    pid, epoch = node.init()
    first = node.one(incr(pid, epoch, 0, by=5))
    assert first.ok and first.value == b"5" and not first.duplicate
    records = node.records()
    retry = node.one(incr(pid, epoch, 0, by=5))
    assert retry.duplicate and retry._replace(duplicate=False) == first
    assert node.value(b"c") == b"5" and node.records() == records


def test_gaps_are_refused_and_only_the_last_window_is_remembered(node: Node) -> None:
    pid, epoch = node.init()
    assert node.one(incr(pid, epoch, 1)).code is ResultCode.OUT_OF_ORDER_SEQUENCE
    results = [node.one(incr(pid, epoch, seq)) for seq in range(WINDOW + 3)]
    assert [r.value for r in results] == [str(n).encode() for n in range(1, WINDOW + 4)]
    last = WINDOW + 2
    for seq in range(last - WINDOW + 1, last + 1):
        again = node.one(incr(pid, epoch, seq))
        assert again.duplicate and again.value == results[seq].value
    too_old = node.one(incr(pid, epoch, last - WINDOW))
    assert too_old.code is ResultCode.DUPLICATE_SEQUENCE_TOO_OLD
    assert node.one(incr(pid, epoch, last + 2)).code is ResultCode.OUT_OF_ORDER_SEQUENCE
    assert node.value(b"c") == str(WINDOW + 3).encode()


def test_a_failed_write_is_its_sequences_result_too(node: Node) -> None:
    pid, epoch = node.init()
    cas = Produced(pid, epoch, 0, Put(b"k", b"v", expected_version=99))
    refused = node.one(cas)
    assert refused.code is ResultCode.VERSION_CONFLICT
    # Even once the condition would hold, the retry answers what happened.
    version = node.one(Put(b"k", b"x")).version
    retry = node.one(Produced(pid, epoch, 0, Put(b"k", b"v", expected_version=version)))
    assert retry.code is ResultCode.VERSION_CONFLICT and retry.duplicate
    assert node.value(b"k") == b"x"


def test_many_writes_of_one_producer_in_one_entry_write_its_state_once(node: Node) -> None:
    pid, epoch = node.init()
    before = node.records()
    results = node.apply(*(incr(pid, epoch, seq) for seq in range(10)), incr(pid, epoch, 7))
    assert [r.value for r in results[:10]] == [str(n).encode() for n in range(1, 11)]
    assert results[10].duplicate and results[10].value == b"8"
    assert node.records() == before + 10 + 1  # ten counter records, one state record
    stored = node.storage.store.get(producer_key(pid))
    assert stored is not None and decode_state(stored.value).last_sequence == 9


def test_a_producer_txn_is_deduplicated_whole(node: Node) -> None:
    pid, epoch = node.init()
    txn = Txn(
        (Compare(b"c", CompareTarget.EXISTS, False),),
        (TxnIncr(b"c", 2), TxnAppend(b"log", b"+2"), TxnGet(b"log")),
        (TxnIncr(b"c", 100),),
    )
    first = node.one(Produced(pid, epoch, 0, txn))
    assert first.succeeded and [op.op for op in first.op_results] == ["incr", "append", "get"]
    retry = node.one(Produced(pid, epoch, 0, txn))
    assert retry.duplicate and retry.op_results == first.op_results
    assert (node.value(b"c"), node.value(b"log")) == (b"2", b"+2")


# -- expiry -------------------------------------------------------------------------


def test_an_idle_producer_expires_and_the_sweep_drops_its_state(node: Node) -> None:
    pid, epoch = node.init("t", expiry_ms=1000, ts=0)
    assert node.one(incr(pid, epoch, 0), ts=900).ok
    # Activity moved its clock: 1500 is only 600 ms after its last write.
    assert node.one(incr(pid, epoch, 1), ts=1500).ok
    assert node.one(incr(pid, epoch, 2), ts=2600).code is ResultCode.UNKNOWN_PRODUCER
    busy, _ = node.init(expiry_ms=1000, ts=2500)
    swept = node.one(ExpireProducers(), ts=2600)
    assert swept.ok and swept.value == b"1"
    assert node.storage.store.get(producer_key(pid)) is None
    assert node.storage.store.get(PRODUCER_IDS_PREFIX + b"t") is None
    assert node.storage.store.get(producer_key(busy)) is not None
    # The transactional id starts over with a new producer.
    renewed, renewed_epoch = node.init("t", expiry_ms=1000, ts=2700)
    assert renewed != pid and renewed_epoch == 0
    assert node.init("t", expiry_ms=1000, ts=2800) == (renewed, 1)
    # Expired but not yet swept: a re-init starts over too, and a later sweep
    # drops the old state without touching the id's new producer.
    newest, newest_epoch = node.init("t", expiry_ms=1000, ts=4000)
    assert newest not in (pid, renewed) and newest_epoch == 0
    assert node.one(ExpireProducers(), ts=4000).value == b"2"  # busy and renewed
    mapped = node.storage.store.get(PRODUCER_IDS_PREFIX + b"t")
    assert mapped is not None and mapped.value == str(newest).encode()
    assert node.value(b"c") == b"2"


# -- durability of the state ----------------------------------------------------------


def test_the_state_survives_a_restart_a_compaction_and_a_rebuilt_lmdb(node: Node) -> None:
    pid, epoch = node.init("t")
    for seq in range(40):  # enough records to fill several 4 KiB segments
        assert node.one(Produced(pid, epoch, seq, Put(b"k%d" % (seq % 3), b"v" * 60))).ok
    last = node.one(incr(pid, epoch, 40))
    node.reopen()
    assert node.one(incr(pid, epoch, 40)).duplicate

    node.storage.commit_log.roll()
    result = compact(
        node.storage.commit_log,
        node.storage.store,
        CompactionPolicy(tombstone_retention_ms=0),
        node.config.segment_bytes,
    )
    assert result.records_dropped > 0
    node.storage.close()
    shutil.rmtree(node.path / STATE_DIR)  # LMDB gone: rebuilt from the compacted log
    node.storage = open_storage(node.path, node.config)
    again = node.one(incr(pid, epoch, 40))
    assert again.duplicate and again.value == last.value
    assert node.one(incr(pid, epoch + 1, 41)).code is ResultCode.PRODUCER_FENCED
    assert node.init("t") == (pid, epoch + 1)
    with node.storage.store.reader() as view:
        keys = [k for k, _ in view.scan(PRODUCERS_PREFIX, limit=10, include_internal=True)]
    assert keys == [producer_key(pid)]


# -- counters --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "number"),
    [
        (b"0", 0),
        (b"42", 42),
        (b"-7", -7),
        (b"9223372036854775807", 2**63 - 1),
        (b"-9223372036854775808", -(2**63)),
        (b"9223372036854775808", None),
        (b"007", None),
        (b"-0", None),
        (b"+1", None),
        (b" 1", None),
        (b"1\n", None),
        (b"", None),
        (b"1.0", None),
        ("٣".encode(), None),
    ],
)
def test_counter_values_are_strict_decimal_int64(text: bytes, number: int | None) -> None:
    assert parse_counter(text) == number


def test_incr_and_append(node: Node) -> None:
    assert node.one(Incr(b"n", 5)).value == b"5"
    assert node.one(Incr(b"n", -8)).value == b"-3"
    node.one(Put(b"text", b"abc"))
    refused = node.one(Incr(b"text", 1))
    assert refused.code is ResultCode.NOT_AN_INTEGER and "abc" in refused.message
    node.one(Put(b"big", b"9223372036854775806"))
    assert node.one(Incr(b"big", 2)).code is ResultCode.INTEGER_OVERFLOW
    assert node.value(b"big") == b"9223372036854775806"
    appended = node.one(Append(b"text", b"def"))
    assert appended.ok and appended.value == b"6" and node.value(b"text") == b"abcdef"
    assert node.one(Append(b"new", b"x")).value == b"1"
    too_big = node.one(Append(b"text", b"x" * node.config.max_value_bytes))
    assert too_big.code is ResultCode.VALUE_TOO_LARGE
    assert node.one(Incr(b"\x00rkv/producers/1", 1)).code is ResultCode.RESERVED_KEY


def test_a_txn_whose_incr_fails_takes_back_its_earlier_writes(node: Node) -> None:
    node.one(Put(b"text", b"abc"))
    records = node.records()
    txn = Txn((), (TxnPut(b"a", b"1"), TxnIncr(b"n", 1), TxnIncr(b"text", 1)), ())
    result = node.one(txn)
    assert result.code is ResultCode.NOT_AN_INTEGER and result.message.startswith("success[2]")
    assert (node.value(b"a"), node.value(b"n")) == (None, None)
    assert node.records() == records
    # The entry's next command is decided against the untouched state.
    after = node.apply(txn, Incr(b"n", 1))
    assert after[1].ok and after[1].value == b"1" and after[1].version == records + 1


# -- codec -----------------------------------------------------------------------------


def test_new_commands_round_trip() -> None:
    commands: tuple[Command, ...] = (
        Incr(b"k", -(2**63)),
        Append(b"k", b"tail"),
        InitProducer("tid", 5),
        InitProducer(None, 5),
        Produced(7, 1, 9, Txn((), (TxnIncr(b"a", 1), TxnAppend(b"b", b"x")), ())),
        ExpireProducers(),
    )
    assert decode_entry(encode_entry(Batch(commands, 3))).commands == commands


@pytest.mark.parametrize(
    "raw",
    [
        [TAG_PRODUCED, 1, 0, -1, [7, b"k", 1]],
        [TAG_PRODUCED, 1, 0, 0, [10, 1, 0, 0, [7, b"k", 1]]],
        [TAG_PRODUCED, 1, 0, 0, [3]],
        [TAG_PRODUCED, "1", 0, 0, [7, b"k", 1]],
        [7, b"k", 2**63],
        [7, b"k", True],
    ],
)
def test_malformed_producer_and_counter_commands_do_not_decode(raw: list[object]) -> None:
    data = bytes((FORMAT_VERSION,)) + msgpack.packb([0, [raw]], use_bin_type=True)
    with pytest.raises(EntryDecodeError):
        decode_entry(data)


def test_encoding_refuses_what_decoding_would() -> None:
    with pytest.raises(ValueError, match="64-bit"):
        encode_entry(Batch((Incr(b"k", 2**63),)))
    with pytest.raises(ValueError):
        encode_entry(Batch((Produced(1, 0, -1, Incr(b"k", 1)),)))
