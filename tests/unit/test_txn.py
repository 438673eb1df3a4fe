"""Transactions (compare / success / failure): the codec's edges and all-or-nothing apply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import pytest

from node.errors import EntryDecodeError
from node.keyspace import MAX_KEY_BYTES, RESERVED_PREFIX, checkpoint_key
from node.state.commands import (
    FORMAT_VERSION,
    MAX_TXN_OPS,
    TAG_TXN,
    Batch,
    Command,
    Compare,
    CompareTarget,
    Delete,
    Put,
    Txn,
    TxnDelete,
    TxnGet,
    TxnIncr,
    TxnOp,
    TxnPut,
    decode_entry,
    encode_entry,
)
from node.state.results import CommandResult, OpResult, ResultCode
from node.storage.config import StorageConfig
from node.storage.datadir import STATE_DIR
from node.storage.lmdb_store import LmdbStore
from node.storage.record import Record, RecordOp
from node.storage.recovery import NodeStorage, open_storage
from tests.support.state import machine_of

VERSION, VALUE, EXISTS = CompareTarget.VERSION, CompareTarget.VALUE, CompareTarget.EXISTS


def entry(*commands: Command, timestamp_ms: int = 7) -> bytes:
    return encode_entry(Batch(commands, timestamp_ms))


def state_of(storage: NodeStorage) -> dict[bytes, tuple[int, int, bytes]]:
    with storage.store.reader() as view:
        items = view.scan(b"", limit=1_000_000, include_internal=True)
    return {k: (v.version, v.create_version, v.value) for k, v in items}


def log_of(storage: NodeStorage) -> list[Record]:
    return list(storage.commit_log.read(1))


# -- codec ------------------------------------------------------------------------


def raw_entry(*raw_commands: Any, timestamp_ms: int = 7, version: int = 1) -> bytes:
    packed: bytes = msgpack.packb([timestamp_ms, list(raw_commands)], use_bin_type=True)
    return bytes((version,)) + packed


def test_txn_encoding_is_the_documented_layout() -> None:
    txn = Txn(
        (Compare(b"a", VERSION, 3), Compare(b"b", VALUE, b"v"), Compare(b"c", EXISTS, False)),
        (TxnPut(b"a", b"1"), TxnDelete(b"b"), TxnGet(b"c")),
        (TxnGet(b"a"),),
    )
    assert entry(txn) == raw_entry(
        [
            TAG_TXN,
            [[b"a", 1, 3], [b"b", 2, b"v"], [b"c", 3, False]],
            [[1, b"a", b"1"], [2, b"b"], [3, b"c"]],
            [[3, b"a"]],
        ]
    )
    decoded = decode_entry(entry(txn)).commands[0]
    assert isinstance(decoded, Txn)
    assert [type(op) for op in decoded.success] == [TxnPut, TxnDelete, TxnGet]
    assert [c.target for c in decoded.compares] == [VERSION, VALUE, EXISTS]
    assert all(type(c.target) is CompareTarget for c in decoded.compares)


@pytest.mark.parametrize(
    "raw",
    [
        [TAG_TXN, [], []],  # no failure branch
        [TAG_TXN, [], [], [], []],
        [TAG_TXN, b"compares", [], []],
        [TAG_TXN, [], {b"op": 1}, []],
        [TAG_TXN, [], [], None],
        [TAG_TXN, [[b"k", 1]], [], []],  # compare missing its expected value
        [TAG_TXN, [[b"k", 1, 0, 0]], [], []],
        [TAG_TXN, [b"k"], [], []],
        [TAG_TXN, [[b"k", 9, 0]], [], []],  # unknown target
        [TAG_TXN, [[b"k", 0, 0]], [], []],
        [TAG_TXN, [[b"k", True, 0]], [], []],  # a bool is not a target
        [TAG_TXN, [[b"k", "version", 0]], [], []],
        [TAG_TXN, [["k", 1, 0]], [], []],  # text key
        [TAG_TXN, [[None, 3, True]], [], []],
        [TAG_TXN, [[b"k", 1, -1]], [], []],  # negative version
        [TAG_TXN, [[b"k", 1, True]], [], []],  # bool where a version belongs
        [TAG_TXN, [[b"k", 1, b"1"]], [], []],
        [TAG_TXN, [[b"k", 1, None]], [], []],
        [TAG_TXN, [[b"k", 2, "v"]], [], []],  # text where a value belongs
        [TAG_TXN, [[b"k", 2, None]], [], []],
        [TAG_TXN, [[b"k", 2, 5]], [], []],
        [TAG_TXN, [[b"k", 3, 1]], [], []],  # int where a bool belongs
        [TAG_TXN, [[b"k", 3, None]], [], []],
        [TAG_TXN, [[b"k", 3, b""]], [], []],
        [TAG_TXN, [], [[1, b"k"]], []],  # put missing its value
        [TAG_TXN, [], [[1, b"k", b"v", None]], []],
        [TAG_TXN, [], [[1, b"k", "text"]], []],
        [TAG_TXN, [], [[2, b"k", b"v"]], []],  # delete with a value
        [TAG_TXN, [], [[2, 7]], []],
        [TAG_TXN, [], [[3]], []],  # get missing its key
        [TAG_TXN, [], [[3, "k"]], []],
        [TAG_TXN, [], [], [[4, b"k"]]],  # unknown op tag
        [TAG_TXN, [], [], [[]]],
        [TAG_TXN, [], [], [b"k"]],
        [TAG_TXN, [], [], [[TAG_TXN, [], [], []]]],  # txns do not nest
    ],
)
def test_malformed_txns_are_decode_errors(raw: list[Any]) -> None:
    with pytest.raises(EntryDecodeError):
        decode_entry(raw_entry(raw))


@pytest.mark.parametrize(
    "txn",
    [
        Txn((Compare(b"k", EXISTS, 1),)),  # 1 == True, yet refused
        Txn((Compare(b"k", EXISTS, None),)),  # type: ignore[arg-type]
        Txn((Compare(b"k", VERSION, True),)),
        Txn((Compare(b"k", VERSION, -1),)),
        Txn((Compare(b"k", VALUE, "text"),)),  # type: ignore[arg-type]
        Txn((Compare(b"k", 9, 0),)),  # type: ignore[arg-type]
        Txn((), (Put(b"k", b"v"),)),  # type: ignore[arg-type]  # a command is not a txn op
    ],
)
def test_encoding_refuses_what_decoding_would_refuse(txn: Txn) -> None:
    """A proposer's bad txn fails its own request, not the raft entry of its whole group."""
    with pytest.raises(ValueError):
        entry(txn)


def test_an_oversized_txn_still_decodes() -> None:
    """The limit is the state machine's answer, so one txn cannot poison a batch."""
    txn = Txn(success=tuple(TxnGet(b"k") for _ in range(MAX_TXN_OPS + 1)))
    (decoded,) = decode_entry(entry(txn)).commands
    assert isinstance(decoded, Txn)
    assert decoded.size == MAX_TXN_OPS + 1


# -- apply ------------------------------------------------------------------------


def test_a_successful_txn_lands_whole_in_one_entry(
    tmp_path: Path, small_config: StorageConfig
) -> None:
    storage = open_storage(tmp_path, small_config)
    machine = machine_of(storage)
    assert machine.apply(1, entry(Put(b"a", b"0")))[0].version == 1
    txn = Txn(
        compares=(Compare(b"a", VERSION, 1), Compare(b"b", EXISTS, False)),
        success=(TxnPut(b"a", b"1"), TxnPut(b"b", b"2"), TxnPut(b"c", b"3")),
        failure=(TxnPut(b"failed", b"yes"),),
    )
    results = machine.apply(
        2, entry(Put(b"x", b"before"), txn, Put(b"y", b"after"), timestamp_ms=99)
    )
    assert results == (
        CommandResult(ResultCode.OK, version=2),
        CommandResult(
            ResultCode.OK,
            version=5,
            succeeded=True,
            op_results=(
                OpResult("put", b"a", True, 3, 1),  # a existed: its create version stays
                OpResult("put", b"b", True, 4, 4),
                OpResult("put", b"c", True, 5, 5),
            ),
        ),
        CommandResult(ResultCode.OK, version=6),
    )
    assert [(r.offset, r.raft_index, r.timestamp_ms, r.op, r.key) for r in log_of(storage)] == [
        (1, 1, 7, RecordOp.PUT, b"a"),
        (2, 2, 99, RecordOp.PUT, b"x"),
        (3, 2, 99, RecordOp.PUT, b"a"),
        (4, 2, 99, RecordOp.PUT, b"b"),
        (5, 2, 99, RecordOp.PUT, b"c"),
        (6, 2, 99, RecordOp.PUT, b"y"),
    ]
    expected_state = {
        b"a": (3, 1, b"1"),
        b"b": (4, 4, b"2"),
        b"c": (5, 5, b"3"),
        b"x": (2, 2, b"before"),
        b"y": (6, 6, b"after"),
    }
    assert state_of(storage) == expected_state
    assert (machine.applied_index, machine.applied_offset) == (2, 6)
    # the same entry again changes nothing and answers what it answered
    assert machine.apply(2, entry(Put(b"x", b"before"), txn, Put(b"y", b"after"))) == results
    storage.close()
    LmdbStore.destroy(tmp_path / STATE_DIR)
    reopened = open_storage(tmp_path, small_config)
    assert state_of(reopened) == expected_state
    assert (reopened.store.applied_index, reopened.store.applied_offset) == (2, 6)
    reopened.close()


def test_a_failed_compare_runs_the_failure_branch(storage: NodeStorage) -> None:
    machine = machine_of(storage)
    machine.apply(1, entry(Put(b"a", b"v")))
    txn = Txn(
        compares=(Compare(b"a", EXISTS, True), Compare(b"a", VERSION, 99)),  # the second fails
        success=(TxnPut(b"won", b"1"), TxnDelete(b"a")),
        failure=(TxnPut(b"lost", b"1"), TxnGet(b"a")),
    )
    (result,) = machine.apply(2, entry(txn))
    assert result == CommandResult(
        ResultCode.OK,
        version=2,
        succeeded=False,
        op_results=(OpResult("put", b"lost", True, 2, 2), OpResult("get", b"a", True, 1, 1, b"v")),
    )
    assert result.ok  # a failure branch is an outcome, not an error
    assert state_of(storage) == {b"a": (1, 1, b"v"), b"lost": (2, 2, b"1")}


@pytest.mark.parametrize(
    ("compare", "holds"),
    [
        (Compare(b"a", VERSION, 1), True),
        (Compare(b"a", VERSION, 0), False),
        (Compare(b"a", VERSION, 2), False),
        (Compare(b"missing", VERSION, 0), True),  # 0 means "does not exist"
        (Compare(b"missing", VERSION, 1), False),
        (Compare(b"a", VALUE, b"v"), True),
        (Compare(b"a", VALUE, b"w"), False),
        (Compare(b"a", VALUE, b""), False),
        (Compare(b"missing", VALUE, b""), False),  # an absent key has no value, not b""
        (Compare(b"empty", VALUE, b""), True),
        (Compare(b"a", EXISTS, True), True),
        (Compare(b"a", EXISTS, False), False),
        (Compare(b"missing", EXISTS, False), True),
        (Compare(b"missing", EXISTS, True), False),
        (Compare(b"gone", EXISTS, False), True),  # deleted: a tombstone is not a value
        (Compare(b"gone", VERSION, 0), True),
    ],
)
def test_compare_targets(storage: NodeStorage, compare: Compare, holds: bool) -> None:
    machine = machine_of(storage)
    machine.apply(
        1, entry(Put(b"a", b"v"), Put(b"empty", b""), Put(b"gone", b"x"), Delete(b"gone"))
    )
    (result,) = machine.apply(2, entry(Txn((compare,), (TxnGet(b"a"),), (TxnGet(b"empty"),))))
    assert result.code is ResultCode.OK
    assert result.succeeded is holds
    assert result.op_results[0].key == (b"a" if holds else b"empty")


def test_every_compare_must_hold(storage: NodeStorage) -> None:
    machine_of(storage).apply(1, entry(Put(b"a", b"v")))
    holding, failing = Compare(b"a", EXISTS, True), Compare(b"b", EXISTS, True)
    results = machine_of(storage).apply(
        2,
        entry(Txn((holding, holding)), Txn((holding, failing)), Txn((failing, holding)), Txn()),
    )
    assert [r.succeeded for r in results] == [True, False, False, True]  # no compares: success


def test_ops_see_the_earlier_ops_of_their_branch(storage: NodeStorage) -> None:
    machine_of(storage).apply(1, entry(Put(b"other", b"o")))
    txn = Txn(
        success=(
            TxnGet(b"k"),
            TxnPut(b"k", b"1"),
            TxnGet(b"k"),
            TxnPut(b"k", b"2"),
            TxnGet(b"k"),
            TxnDelete(b"k"),
            TxnGet(b"k"),
            TxnDelete(b"k"),  # already gone: found=False, no record
            TxnDelete(b"never"),
            TxnPut(b"k", b"3"),  # a new life: a new create version
            TxnGet(b"k"),
        )
    )
    (result,) = machine_of(storage).apply(2, entry(txn))
    assert result.op_results == (
        OpResult("get", b"k", False, 0),
        OpResult("put", b"k", True, 2, 2),
        OpResult("get", b"k", True, 2, 2, b"1"),
        OpResult("put", b"k", True, 3, 2),
        OpResult("get", b"k", True, 3, 2, b"2"),
        OpResult("delete", b"k", True, 4),
        OpResult("get", b"k", False, 0),
        OpResult("delete", b"k", False, 0),
        OpResult("delete", b"never", False, 0),
        OpResult("put", b"k", True, 5, 5),
        OpResult("get", b"k", True, 5, 5, b"3"),
    )
    assert result.version == 5
    assert [(r.offset, r.op, r.key, r.value) for r in log_of(storage)[1:]] == [
        (2, RecordOp.PUT, b"k", b"1"),
        (3, RecordOp.PUT, b"k", b"2"),
        (4, RecordOp.DELETE, b"k", b""),
        (5, RecordOp.PUT, b"k", b"3"),
    ]
    assert state_of(storage) == {b"other": (1, 1, b"o"), b"k": (5, 5, b"3")}


def test_txns_see_and_are_seen_by_their_batch_neighbours(storage: NodeStorage) -> None:
    results = machine_of(storage).apply(
        1,
        entry(
            Put(b"k", b"v"),
            Txn((Compare(b"k", VALUE, b"v"),), (TxnPut(b"k", b"w"), TxnPut(b"j", b"1"))),
            Put(b"k", b"x", expected_version=3),  # stale: the txn moved k to 2
            Put(b"k", b"x", expected_version=2),
            Txn((Compare(b"k", VERSION, 4), Compare(b"j", VALUE, b"1")), (TxnDelete(b"j"),)),
            Delete(b"j"),
        ),
    )
    assert [(r.code, r.version, r.succeeded) for r in results] == [
        (ResultCode.OK, 1, True),
        (ResultCode.OK, 3, True),
        (ResultCode.VERSION_CONFLICT, 0, True),
        (ResultCode.OK, 4, True),
        (ResultCode.OK, 5, True),
        (ResultCode.NOT_FOUND, 0, True),
    ]
    assert state_of(storage) == {b"k": (4, 1, b"x")}


def test_a_txn_that_writes_nothing_reports_the_applied_offset(storage: NodeStorage) -> None:
    machine = machine_of(storage)
    machine.apply(1, entry(Put(b"a", b"1"), Put(b"b", b"2")))
    results = machine.apply(
        2,
        entry(
            Txn(),
            Txn(success=(TxnGet(b"a"), TxnDelete(b"missing"))),
            Txn((Compare(b"a", EXISTS, False),), (TxnPut(b"a", b"no"),)),  # empty failure branch
            Put(b"c", b"3"),
            Txn(),
        ),
    )
    assert [(r.code, r.version, r.succeeded, len(r.op_results)) for r in results] == [
        (ResultCode.OK, 2, True, 0),
        (ResultCode.OK, 2, True, 2),
        (ResultCode.OK, 2, False, 0),
        (ResultCode.OK, 3, True, 0),
        (ResultCode.OK, 3, True, 0),
    ]
    assert (machine.applied_index, machine.applied_offset) == (2, 3)
    assert len(log_of(storage)) == 3


def test_the_limit_counts_compares_and_both_branches(storage: NodeStorage) -> None:
    machine = machine_of(storage)
    at_limit = Txn(
        (Compare(b"k", VERSION, 0),),
        (TxnPut(b"k", b"v"),),
        tuple(TxnGet(b"k") for _ in range(MAX_TXN_OPS - 2)),
    )
    over = Txn(at_limit.compares, (*at_limit.success, TxnPut(b"j", b"v")), at_limit.failure)
    assert (at_limit.size, over.size) == (MAX_TXN_OPS, MAX_TXN_OPS + 1)
    (refused,) = machine.apply(1, entry(over))
    assert refused.code is ResultCode.TXN_TOO_LARGE
    assert str(MAX_TXN_OPS) in refused.message
    assert (refused.op_results, machine.applied_index, machine.applied_offset) == ((), 1, 0)
    assert state_of(storage) == {}
    (applied,) = machine.apply(2, entry(at_limit))
    assert (applied.code, applied.version, applied.succeeded) == (ResultCode.OK, 1, True)
    assert state_of(storage) == {b"k": (1, 1, b"v")}


def test_gets_returning_more_than_max_result_bytes_refuse_the_whole_txn(
    storage: NodeStorage,
) -> None:
    machine = machine_of(storage)
    machine.apply(1, entry(Put(b"big", b"B" * 40)))  # key + value: 43 bytes a get
    reads = (TxnPut(b"w", b"x"), TxnGet(b"big"), TxnGet(b"absent"), TxnGet(b"big"))
    (refused,) = machine.apply(2, entry(Txn((), reads, (), max_result_bytes=85)))
    assert refused.code is ResultCode.TXN_RESULT_TOO_LARGE
    assert refused.message.startswith("success[3]: ")
    assert "--max-txn-result-bytes" in refused.message
    assert b"w" not in state_of(storage)  # the put before the gets was taken back
    (fits,) = machine.apply(3, entry(Txn((), reads, (), max_result_bytes=86)))
    assert fits.code is ResultCode.OK
    assert [op.value for op in fits.op_results] == [b"", b"B" * 40, b"", b"B" * 40]
    assert state_of(storage)[b"w"][2] == b"x"
    # A txn of format 1 (no bound) returns whatever its gets read, as it did.
    (unbounded,) = machine.apply(4, entry(Txn((), reads * 10)))
    assert unbounded.code is ResultCode.OK


def test_the_result_bound_travels_in_a_format_2_entry_only() -> None:
    bounded = Txn((), (TxnGet(b"k"),), (), max_result_bytes=1000)
    plain = bounded._replace(max_result_bytes=None)
    assert entry(plain)[0] == 1  # what an older node reads
    assert entry(bounded)[0] == 2 < FORMAT_VERSION  # format 3 is for auth changes only
    assert decode_entry(entry(bounded)).commands == (bounded,)
    assert decode_entry(entry(plain)).commands == (plain,)
    # The same five fields in an entry that says format 1 are malformed.
    with pytest.raises(EntryDecodeError, match="later format"):
        decode_entry(bytes((1,)) + entry(bounded)[1:])
    with pytest.raises(EntryDecodeError, match="max_result_bytes"):
        decode_entry(raw_entry([TAG_TXN, [], [[3, b"k"]], [], -1], version=2))


TOO_LONG = b"k" * (MAX_KEY_BYTES + 1)
RESERVED = RESERVED_PREFIX + b"session"


def bad_parts() -> list[tuple[str, TxnOp | Compare, ResultCode]]:
    """Every kind of part, in every place it can be, with every kind of bad key."""
    cases: list[tuple[str, TxnOp | Compare, ResultCode]] = []
    for key, code in [
        (RESERVED, ResultCode.RESERVED_KEY),
        (b"", ResultCode.INVALID_KEY),
        (TOO_LONG, ResultCode.INVALID_KEY),
    ]:
        cases += [("compares", Compare(key, EXISTS, True), code)]
        cases += [("compares", Compare(key, VERSION, 0), code)]
        for where in ("success", "failure"):
            cases += [(where, op, code) for op in (TxnPut(key, b"v"), TxnDelete(key), TxnGet(key))]
    for where in ("success", "failure"):
        cases += [(where, TxnPut(b"fine", b"v" * 65), ResultCode.VALUE_TOO_LARGE)]
    return cases


@pytest.mark.parametrize(("where", "bad", "code"), bad_parts())
def test_an_invalid_key_or_value_anywhere_refuses_the_whole_txn(
    tmp_path: Path, where: str, bad: TxnOp | Compare, code: ResultCode
) -> None:
    """Even in the branch that would not run: the answer must not depend on the state."""
    compares: list[Compare] = [Compare(b"a", EXISTS, True)]  # holds: success would run
    success: list[TxnOp] = [TxnPut(b"s1", b"1"), TxnDelete(b"a"), TxnPut(b"s2", b"2")]
    failure: list[TxnOp] = [TxnPut(b"f1", b"1")]
    if isinstance(bad, Compare):
        compares.insert(1, bad)
    else:
        (success if where == "success" else failure).insert(1, bad)
    txn = Txn(tuple(compares), tuple(success), tuple(failure))
    storage = open_storage(tmp_path, StorageConfig(max_value_bytes=64))
    machine = machine_of(storage)
    machine.apply(1, entry(Put(b"a", b"v")))
    before = state_of(storage)
    results = machine.apply(2, entry(Put(b"x", b"1"), txn, Put(b"y", b"2")))
    assert [r.code for r in results] == [ResultCode.OK, code, ResultCode.OK]
    assert results[1].message.startswith(f"{where}[1]: ")
    assert (results[1].op_results, results[2].version) == ((), 3)  # no offset was used
    assert state_of(storage) == {**before, b"x": (2, 2, b"1"), b"y": (3, 3, b"2")}
    storage.close()


def test_the_first_invalid_part_names_the_refusal(storage: NodeStorage) -> None:
    txn = Txn(
        (Compare(b"ok", EXISTS, True),),
        (TxnPut(b"fine", b"v" * (2 * 1024 * 1024)),),
        (TxnGet(b""),),
    )
    (result,) = machine_of(storage).apply(1, entry(txn))
    assert (result.code, result.message[:11]) == (ResultCode.VALUE_TOO_LARGE, "success[0]:")
    assert storage.commit_log.last_offset == 0


def test_replicas_apply_txns_identically(tmp_path: Path, small_config: StorageConfig) -> None:
    """Same entries, same records, state and results: nothing depends on the replica."""
    entries = [
        entry(
            Put(b"n", b"%d" % i),
            Txn(
                (Compare(b"n", VALUE, b"%d" % i), Compare(b"m/%d" % (i - 1), EXISTS, i % 3 != 0)),
                (TxnPut(b"m/%d" % i, b"s"), TxnDelete(b"m/%d" % (i - 2)), TxnGet(b"n")),
                (TxnPut(b"f/%d" % i, b"f"), TxnGet(b"m/%d" % (i - 1))),
            ),
            timestamp_ms=1000 + i,
        )
        for i in range(1, 60)
    ]
    replicas = [open_storage(tmp_path / name, small_config) for name in ("r1", "r2")]
    answers = [[machine_of(r).apply(i, e) for i, e in enumerate(entries, 1)] for r in replicas]
    assert answers[0] == answers[1]
    assert {r.succeeded for results in answers[0] for r in results} == {True, False}
    assert log_of(replicas[0]) == log_of(replicas[1])
    assert state_of(replicas[0]) == state_of(replicas[1])
    for replica in replicas:
        replica.close()


def test_a_retried_txn_entry_after_a_failed_lmdb_write_stays_whole(
    tmp_path: Path, small_config: StorageConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = open_storage(tmp_path, small_config)
    machine = machine_of(storage)
    machine.apply(1, entry(Put(b"a", b"0")))
    txn_entry = entry(
        Txn((Compare(b"a", VERSION, 1),), (TxnPut(b"a", b"1"), TxnPut(b"b", b"1"), TxnDelete(b"a")))
    )
    real_write = storage.store.write

    def failing_write(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(storage.store, "write", failing_write)
    with pytest.raises(OSError):
        machine.apply(2, txn_entry)
    monkeypatch.setattr(storage.store, "write", real_write)
    (retried,) = machine.apply(2, txn_entry)  # the log had it: replayed, not decided again
    assert retried.code is ResultCode.ALREADY_APPLIED
    assert state_of(storage) == {b"b": (3, 3, b"1")}
    assert [(r.offset, r.raft_index) for r in log_of(storage)] == [(1, 1), (2, 2), (3, 2), (4, 2)]
    storage.close()


# -- replicator checkpoints ---------------------------------------------------------


def test_a_txn_commits_a_checkpoint_with_its_writes_and_guards_on_its_version(
    tmp_path: Path, small_config: StorageConfig
) -> None:
    storage = open_storage(tmp_path, small_config)
    machine = machine_of(storage)
    cp = checkpoint_key("redis/main")
    first = Txn(
        compares=(Compare(cp, VERSION, 0),),
        success=(TxnPut(b"r/k", b"v"), TxnPut(cp, b'{"offset": 10}')),
    )
    (result,) = machine.apply(1, entry(first))
    assert result.code is ResultCode.OK and result.succeeded
    assert state_of(storage)[cp] == (2, 2, b'{"offset": 10}')
    # A second replicator that read the checkpoint before (version 0) is fenced whole.
    (stale,) = machine.apply(2, entry(first._replace(failure=(TxnGet(cp),))))
    assert not stale.succeeded
    assert stale.op_results == (OpResult("get", cp, True, 2, 2, b'{"offset": 10}'),)
    assert state_of(storage)[b"r/k"] == (1, 1, b"v")
    # Checkpoints are internal: deleting or incrementing one, or a plain put, is refused.
    for op in (TxnDelete(cp), TxnIncr(cp, 1)):
        (refused,) = machine.apply(3, entry(Txn(success=(op,))))
        assert refused.code is ResultCode.RESERVED_KEY
    (refused,) = machine.apply(4, entry(Put(cp, b"x")))
    assert refused.code is ResultCode.RESERVED_KEY
