"""The state machine against a plain dict model (txns included), plus idempotence and replay."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.errors import UnsupportedEntryVersion
from node.keyspace import MAX_KEY_BYTES, RESERVED_PREFIX
from node.state.commands import (
    MAX_TXN_OPS,
    Barrier,
    Batch,
    Command,
    Compare,
    CompareTarget,
    Delete,
    Put,
    Txn,
    TxnDelete,
    TxnGet,
    TxnOp,
    TxnPut,
    encode_entry,
)
from node.state.results import CommandResult, OpResult, ResultCode
from node.storage.config import FsyncPolicy, StorageConfig
from node.storage.datadir import STATE_DIR
from node.storage.lmdb_store import LmdbStore
from node.storage.record import RecordOp
from node.storage.recovery import NodeStorage, open_storage
from tests.support.state import machine_of

MAX_VALUE = 64
CONFIG = StorageConfig(
    segment_bytes=4096,
    index_interval_bytes=128,
    fsync=FsyncPolicy.ON_SYNC,
    max_value_bytes=MAX_VALUE,
    lmdb_map_size=1024 * 1024,
)

# -- the model ------------------------------------------------------------------

LogLine = tuple[int, int, int, RecordOp, bytes, bytes]
"""offset, raft index, timestamp, op, key, value: what the commit log must hold."""


@dataclass
class Model:
    """What a KV store with versions-as-offsets must do, in the plainest terms."""

    data: dict[bytes, tuple[int, int, bytes]] = field(default_factory=dict)
    last_offset: int = 0
    log: list[LogLine] = field(default_factory=list)

    def apply(
        self, commands: list[Command], raft_index: int, timestamp_ms: int
    ) -> list[CommandResult]:
        self.raft_index, self.timestamp_ms = raft_index, timestamp_ms
        out: list[CommandResult] = []
        for c in commands:
            if isinstance(c, Barrier):
                out.append(CommandResult(ResultCode.OK, self.last_offset))
                continue
            if isinstance(c, Txn):
                out.append(self.txn(c))
                continue
            assert isinstance(c, Put | Delete), "the model knows no member commands"
            refused = self.refusal(c.key, c.value if isinstance(c, Put) else b"")
            if refused is not None:
                out.append(CommandResult(refused))
                continue
            current = self.data.get(c.key)
            version = current[0] if current else 0
            if c.expected_version is not None and c.expected_version != version:
                out.append(CommandResult(ResultCode.VERSION_CONFLICT, 0, version))
                continue
            if isinstance(c, Delete) and current is None:
                out.append(CommandResult(ResultCode.NOT_FOUND))
                continue
            if isinstance(c, Put):
                self.put(c.key, c.value)
            else:
                self.delete(c.key)
            out.append(CommandResult(ResultCode.OK, self.last_offset))
        return out

    def refusal(self, key: bytes, value: bytes) -> ResultCode | None:
        if key.startswith(RESERVED_PREFIX):
            return ResultCode.RESERVED_KEY
        if not 1 <= len(key) <= MAX_KEY_BYTES:
            return ResultCode.INVALID_KEY
        if len(value) > MAX_VALUE:
            return ResultCode.VALUE_TOO_LARGE
        return None

    def put(self, key: bytes, value: bytes) -> None:
        self.last_offset += 1
        current = self.data.get(key)
        create = current[1] if current else self.last_offset
        self.data[key] = (self.last_offset, create, value)
        self.log.append(
            (self.last_offset, self.raft_index, self.timestamp_ms, RecordOp.PUT, key, value)
        )

    def delete(self, key: bytes) -> None:
        self.last_offset += 1
        del self.data[key]
        self.log.append(
            (self.last_offset, self.raft_index, self.timestamp_ms, RecordOp.DELETE, key, b"")
        )

    def txn(self, c: Txn) -> CommandResult:
        if len(c.compares) + len(c.success) + len(c.failure) > MAX_TXN_OPS:
            return CommandResult(ResultCode.TXN_TOO_LARGE)
        for part in (*c.compares, *c.success, *c.failure):
            refused = self.refusal(part.key, part.value if isinstance(part, TxnPut) else b"")
            if refused is not None:
                return CommandResult(refused)
        succeeded = all(self.holds(compare) for compare in c.compares)
        done: list[OpResult] = []
        for op in c.success if succeeded else c.failure:
            if isinstance(op, TxnPut):
                self.put(op.key, op.value)
                done.append(OpResult("put", op.key, True, *self.data[op.key][:2]))
            elif isinstance(op, TxnDelete):
                if op.key in self.data:
                    self.delete(op.key)
                    done.append(OpResult("delete", op.key, True, self.last_offset))
                else:
                    done.append(OpResult("delete", op.key, False, 0))
            elif op.key in self.data:
                done.append(OpResult("get", op.key, True, *self.data[op.key]))
            else:
                done.append(OpResult("get", op.key, False, 0))
        return CommandResult(
            ResultCode.OK, self.last_offset, succeeded=succeeded, op_results=tuple(done)
        )

    def holds(self, compare: Compare) -> bool:
        current = self.data.get(compare.key)
        if compare.target is CompareTarget.VERSION:
            return (current[0] if current else 0) == compare.expected
        if compare.target is CompareTarget.VALUE:
            return current is not None and current[2] == compare.expected
        return (current is not None) == compare.expected


def observed(results: tuple[CommandResult, ...]) -> list[tuple[ResultCode, int, int]]:
    return [(r.code, r.version, r.current_version) for r in results]


def without_messages(results: tuple[CommandResult, ...]) -> list[CommandResult]:
    return [r._replace(message="") for r in results]


def state_of(storage: NodeStorage) -> dict[bytes, tuple[int, int, bytes]]:
    with storage.store.reader() as view:
        items = view.scan(b"", limit=1_000_000, include_internal=True)
    return {k: (v.version, v.create_version, v.value) for k, v in items}


def log_of(storage: NodeStorage) -> list[LogLine]:
    return [
        (r.offset, r.raft_index, r.timestamp_ms, r.op, r.key, r.value)
        for r in storage.commit_log.read(1)
    ]


# -- generated workloads ----------------------------------------------------------

KEYS = [
    b"a",
    b"b",
    b"c",
    b"dir/x",
    b"dir/y",
    b"\x00raw",
    b"L" * 600 + b"1",
    b"L" * 600 + b"2",
    b"k" * MAX_KEY_BYTES,
]
BAD_KEYS = [b"", b"k" * (MAX_KEY_BYTES + 1), RESERVED_PREFIX + b"p"]
EXPECTED_KINDS = ["current", "current", "current", "zero", "wrong"]

SimpleTemplate = tuple[str, bytes, bytes, str]
CompareTemplate = tuple[bytes, CompareTarget, str, bytes]
OpTemplate = tuple[str, bytes, bytes]


class TxnTemplate(NamedTuple):
    compares: list[CompareTemplate]
    success: list[OpTemplate]
    failure: list[OpTemplate]


Template = SimpleTemplate | TxnTemplate

# A command template; "expected" is resolved against the model when the batch
# is built, so compare-and-set hits the current version often enough to matter.
simple_templates: st.SearchStrategy[SimpleTemplate] = st.tuples(
    st.sampled_from(["put", "put", "put", "delete", "barrier"]),
    st.sampled_from(KEYS) | st.sampled_from(BAD_KEYS),
    st.binary(max_size=MAX_VALUE + 8),
    st.sampled_from(["none", "none", "current", "zero", "wrong"]),
)
# Txns name mostly good keys: one bad part refuses the whole txn.
txn_keys = st.sampled_from(KEYS * 6 + BAD_KEYS)
txn_values = st.sampled_from([b"", b"v", b"w"]) | st.binary(max_size=MAX_VALUE + 1)
compare_templates: st.SearchStrategy[CompareTemplate] = st.tuples(
    txn_keys, st.sampled_from(list(CompareTarget)), st.sampled_from(EXPECTED_KINDS), txn_values
)
op_templates: st.SearchStrategy[OpTemplate] = st.tuples(
    st.sampled_from(["put", "put", "delete", "get"]), txn_keys, txn_values
)
txn_templates: st.SearchStrategy[TxnTemplate] = st.builds(
    TxnTemplate,
    st.lists(compare_templates, max_size=3),
    st.lists(op_templates, max_size=5),
    st.lists(op_templates, max_size=5),
)  # (the size limit is test_txn's: 10,001 ops per example would dominate the run time)
templates: st.SearchStrategy[Template] = st.one_of(simple_templates, txn_templates)
workloads = st.lists(st.lists(templates, min_size=1, max_size=12), min_size=1, max_size=25)


def build(template: Template, model: Model) -> Command:
    """The command for ``template``, its expectations resolved against the model
    as it was before the batch (so later commands of a batch may miss)."""
    if isinstance(template, TxnTemplate):
        return Txn(
            tuple(build_compare(c, model) for c in template.compares),
            tuple(build_op(op) for op in template.success),
            tuple(build_op(op) for op in template.failure),
        )
    kind, key, value, expected_kind = template
    if kind == "barrier":
        return Barrier()
    current = model.data[key][0] if key in model.data else 0
    expected = {"none": None, "current": current, "zero": 0, "wrong": current + 1000}[expected_kind]
    return Put(key, value, expected) if kind == "put" else Delete(key, expected)


def build_compare(template: CompareTemplate, model: Model) -> Compare:
    key, target, kind, value = template
    current = model.data.get(key)
    expected: int | bytes | bool
    if target is CompareTarget.VERSION:
        version = current[0] if current else 0
        expected = {"current": version, "zero": 0, "wrong": version + 1000}[kind]
    elif target is CompareTarget.VALUE:
        expected = {"current": current[2] if current else value, "zero": b"", "wrong": value}[kind]
    else:
        expected = {"current": current is not None, "zero": False, "wrong": current is None}[kind]
    return Compare(key, target, expected)


def build_op(template: OpTemplate) -> TxnOp:
    kind, key, value = template
    if kind == "put":
        return TxnPut(key, value)
    return TxnDelete(key) if kind == "delete" else TxnGet(key)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads)
def test_state_machine_matches_the_dict_model(workload: list[list[Template]]) -> None:
    model = Model()
    with tempfile.TemporaryDirectory() as tmp:
        storage = open_storage(Path(tmp), CONFIG)
        try:
            for index, templates_ in enumerate(workload, start=1):
                commands = [build(t, model) for t in templates_]
                entry = encode_entry(Batch(tuple(commands), timestamp_ms=index))
                got = machine_of(storage).apply(index * 2, entry)  # gaps in raft indexes are fine
                assert without_messages(got) == model.apply(commands, index * 2, index)
                assert machine_of(storage).applied_index == index * 2
            assert state_of(storage) == model.data
            assert log_of(storage) == model.log
            assert machine_of(storage).applied_offset == model.last_offset
        finally:
            storage.close()
        # LMDB deleted entirely, reopened, replayed from the log: the same state
        LmdbStore.destroy(Path(tmp) / STATE_DIR)
        reopened = open_storage(Path(tmp), CONFIG)
        try:
            assert state_of(reopened) == model.data
            assert reopened.replayed_records == len(model.log)
            assert machine_of(reopened).applied_offset == model.last_offset
            # entries that wrote nothing leave no trace in the log: replay knows the
            # raft index of the last one that wrote something
            assert machine_of(reopened).applied_index == (model.log[-1][1] if model.log else 0)
        finally:
            reopened.close()


def put_entry(*pairs: tuple[bytes, bytes]) -> bytes:
    return encode_entry(Batch(tuple(Put(k, v) for k, v in pairs), timestamp_ms=1))


def test_reapplied_indexes_change_nothing(storage: NodeStorage) -> None:
    machine = machine_of(storage)
    first = machine.apply(1, put_entry((b"k", b"one")))
    assert observed(first) == [(ResultCode.OK, 1, 0)]
    machine.apply(2, put_entry((b"k", b"two")))
    before = state_of(storage)
    log_head = storage.commit_log.last_offset
    # the same index again, and an older one, as pysyncobj does after a restart
    assert machine.apply(2, put_entry((b"k", b"two"))) == machine.apply(2, b"")
    assert machine.apply(1, put_entry((b"k", b"one"))) == first
    assert state_of(storage) == before
    assert storage.commit_log.last_offset == log_head


def test_reapplied_index_after_restart_reports_already_applied(
    tmp_path: Path, small_config: StorageConfig
) -> None:
    storage = open_storage(tmp_path, small_config)
    machine_of(storage).apply(5, put_entry((b"k", b"v")))
    storage.close()
    reopened = open_storage(tmp_path, small_config)
    results = machine_of(reopened).apply(5, put_entry((b"k", b"other")))
    assert [r.code for r in results] == [ResultCode.ALREADY_APPLIED]
    assert reopened.store.get(b"k") is not None
    assert reopened.store.get(b"k").value == b"v"  # type: ignore[union-attr]
    reopened.close()


def test_malformed_entry_is_a_result_and_advances_the_index(storage: NodeStorage) -> None:
    results = machine_of(storage).apply(3, b"\x01garbage")
    assert [r.code for r in results] == [ResultCode.MALFORMED_ENTRY]
    assert "not valid msgpack" in results[0].message
    assert machine_of(storage).applied_index == 3
    assert storage.commit_log.last_offset == 0


def test_an_entry_of_a_newer_format_stalls_instead_of_being_skipped(
    storage: NodeStorage,
) -> None:
    """Skipping it would leave this replica without what the newer ones applied."""
    machine = machine_of(storage)
    with pytest.raises(UnsupportedEntryVersion, match="version 7"):
        machine.apply(3, b"\x07written-by-a-newer-rkv")
    assert machine.applied_index == 0
    assert storage.commit_log.last_offset == 0


def test_batch_results_are_per_command(storage: NodeStorage) -> None:
    entry = encode_entry(
        Batch(
            (
                Put(b"x", b"1"),
                Put(b"x", b"2", expected_version=1),
                Put(b"x", b"3", expected_version=1),  # stale: x is at version 2 now
                Put(b"y", b"new", expected_version=0),
                Delete(b"nope"),
                Put(RESERVED_PREFIX + b"producer", b"z"),
                Barrier(),
            ),
            timestamp_ms=42,
        )
    )
    got = observed(machine_of(storage).apply(1, entry))
    assert got == [
        (ResultCode.OK, 1, 0),
        (ResultCode.OK, 2, 0),
        (ResultCode.VERSION_CONFLICT, 0, 2),
        (ResultCode.OK, 3, 0),
        (ResultCode.NOT_FOUND, 0, 0),
        (ResultCode.RESERVED_KEY, 0, 0),
        (ResultCode.OK, 3, 0),
    ]
    x = storage.store.get(b"x")
    assert x is not None and (x.version, x.create_version, x.value) == (2, 1, b"2")
    records = list(storage.commit_log.read(1))
    assert [(r.offset, r.raft_index, r.timestamp_ms) for r in records] == [
        (1, 1, 42),
        (2, 1, 42),
        (3, 1, 42),
    ]


def test_value_limit_is_configurable(tmp_path: Path) -> None:
    config = StorageConfig(max_value_bytes=10)
    storage = open_storage(tmp_path, config)
    results = machine_of(storage).apply(1, put_entry((b"k", b"x" * 10), (b"k2", b"x" * 11)))
    assert [r.code for r in results] == [ResultCode.OK, ResultCode.VALUE_TOO_LARGE]
    storage.close()


def test_full_map_grows_instead_of_failing(tmp_path: Path) -> None:
    config = StorageConfig(lmdb_map_size=1024 * 1024, fsync=FsyncPolicy.ON_SYNC)
    storage = open_storage(tmp_path, config)
    value = b"v" * 4000
    for i in range(1, 801):  # ~3 MiB of values into a 1 MiB map
        results = machine_of(storage).apply(i, put_entry((b"key/%05d" % i, value)))
        assert results[0].ok
    assert storage.store.map_size > 1024 * 1024
    with storage.store.reader() as view:
        assert view.count() == 800
    storage.close()
