"""The state machine against a plain dict model, plus idempotence and replay."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.commands import Barrier, Batch, Command, Delete, Put, encode_entry
from node.keyspace import MAX_KEY_BYTES, RESERVED_PREFIX
from node.lmdb_store import LmdbStore
from node.recovery import STATE_DIR, NodeStorage, open_storage
from node.results import CommandResult, ResultCode
from node.storage_config import FsyncPolicy, StorageConfig

MAX_VALUE = 64
CONFIG = StorageConfig(
    segment_bytes=4096,
    index_interval_bytes=128,
    fsync=FsyncPolicy.ON_SYNC,
    max_value_bytes=MAX_VALUE,
    lmdb_map_size=1024 * 1024,
)

# -- the model ------------------------------------------------------------------


@dataclass
class Model:
    """What a KV store with versions-as-offsets must do, in the plainest terms."""

    data: dict[bytes, tuple[int, int, bytes]] = field(default_factory=dict)
    last_offset: int = 0

    def apply(self, commands: list[Command]) -> list[tuple[ResultCode, int, int]]:
        out: list[tuple[ResultCode, int, int]] = []
        for c in commands:
            if isinstance(c, Barrier):
                out.append((ResultCode.OK, self.last_offset, 0))
                continue
            if c.key.startswith(RESERVED_PREFIX):
                out.append((ResultCode.RESERVED_KEY, 0, 0))
                continue
            if not 1 <= len(c.key) <= MAX_KEY_BYTES:
                out.append((ResultCode.INVALID_KEY, 0, 0))
                continue
            if isinstance(c, Put) and len(c.value) > MAX_VALUE:
                out.append((ResultCode.VALUE_TOO_LARGE, 0, 0))
                continue
            current = self.data.get(c.key)
            version = current[0] if current else 0
            if c.expected_version is not None and c.expected_version != version:
                out.append((ResultCode.VERSION_CONFLICT, 0, version))
                continue
            if isinstance(c, Delete) and current is None:
                out.append((ResultCode.NOT_FOUND, 0, 0))
                continue
            self.last_offset += 1
            if isinstance(c, Put):
                create = current[1] if current else self.last_offset
                self.data[c.key] = (self.last_offset, create, c.value)
            else:
                del self.data[c.key]
            out.append((ResultCode.OK, self.last_offset, 0))
        return out


def observed(results: tuple[CommandResult, ...]) -> list[tuple[ResultCode, int, int]]:
    return [(r.code, r.version, r.current_version) for r in results]


def state_of(storage: NodeStorage) -> dict[bytes, tuple[int, int, bytes]]:
    with storage.store.reader() as view:
        items = view.scan(b"", limit=1_000_000, include_internal=True)
    return {k: (v.version, v.create_version, v.value) for k, v in items}


# -- generated workloads ----------------------------------------------------------

KEYS = [b"a", b"b", b"c", b"dir/x", b"dir/y", b"\x00raw"]
BAD_KEYS = [b"", b"k" * (MAX_KEY_BYTES + 1), RESERVED_PREFIX + b"p"]

# A command template; "expected" is resolved against the model when the batch
# is built, so compare-and-set hits the current version often enough to matter.
templates = st.tuples(
    st.sampled_from(["put", "put", "put", "delete", "barrier"]),
    st.sampled_from(KEYS) | st.sampled_from(BAD_KEYS),
    st.binary(max_size=MAX_VALUE + 8),
    st.sampled_from(["none", "none", "current", "zero", "wrong"]),
)
workloads = st.lists(st.lists(templates, min_size=1, max_size=12), min_size=1, max_size=25)


def build(
    template: tuple[str, bytes, bytes, str], model: Model, pending: dict[bytes, int]
) -> Command:
    kind, key, value, expected_kind = template
    if kind == "barrier":
        return Barrier()
    current = pending.get(key, model.data[key][0] if key in model.data else 0)
    expected = {"none": None, "current": current, "zero": 0, "wrong": current + 1000}[expected_kind]
    return Put(key, value, expected) if kind == "put" else Delete(key, expected)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads)
def test_state_machine_matches_the_dict_model(
    workload: list[list[tuple[str, bytes, bytes, str]]],
) -> None:
    model = Model()
    with tempfile.TemporaryDirectory() as tmp:
        storage = open_storage(Path(tmp), CONFIG)
        try:
            for index, templates_ in enumerate(workload, start=1):
                commands = [build(t, model, {}) for t in templates_]
                entry = encode_entry(Batch(tuple(commands), timestamp_ms=index))
                got = storage.state_machine.apply(index * 2, entry)  # gaps in raft indexes are fine
                assert observed(got) == model.apply(commands)
                assert storage.state_machine.applied_index == index * 2
            assert state_of(storage) == model.data
            assert storage.state_machine.applied_offset == model.last_offset
        finally:
            storage.close()
        # LMDB deleted entirely, reopened, replayed from the log: the same state
        LmdbStore.destroy(Path(tmp) / STATE_DIR)
        reopened = open_storage(Path(tmp), CONFIG)
        try:
            assert state_of(reopened) == model.data
            assert reopened.replayed_records == sum(1 for _ in reopened.commit_log.read(1))
            assert reopened.state_machine.applied_offset == model.last_offset
        finally:
            reopened.close()


def put_entry(*pairs: tuple[bytes, bytes]) -> bytes:
    return encode_entry(Batch(tuple(Put(k, v) for k, v in pairs), timestamp_ms=1))


def test_reapplied_indexes_change_nothing(storage: NodeStorage) -> None:
    machine = storage.state_machine
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
    storage.state_machine.apply(5, put_entry((b"k", b"v")))
    storage.close()
    reopened = open_storage(tmp_path, small_config)
    results = reopened.state_machine.apply(5, put_entry((b"k", b"other")))
    assert [r.code for r in results] == [ResultCode.ALREADY_APPLIED]
    assert reopened.store.get(b"k") is not None
    assert reopened.store.get(b"k").value == b"v"  # type: ignore[union-attr]
    reopened.close()


def test_malformed_entry_is_a_result_and_advances_the_index(storage: NodeStorage) -> None:
    results = storage.state_machine.apply(3, b"\x07garbage")
    assert [r.code for r in results] == [ResultCode.MALFORMED_ENTRY]
    assert "unsupported entry format version 7" in results[0].message
    assert storage.state_machine.applied_index == 3
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
    got = observed(storage.state_machine.apply(1, entry))
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
    results = storage.state_machine.apply(1, put_entry((b"k", b"x" * 10), (b"k2", b"x" * 11)))
    assert [r.code for r in results] == [ResultCode.OK, ResultCode.VALUE_TOO_LARGE]
    storage.close()


def test_full_map_grows_instead_of_failing(tmp_path: Path) -> None:
    config = StorageConfig(lmdb_map_size=1024 * 1024, fsync=FsyncPolicy.ON_SYNC)
    storage = open_storage(tmp_path, config)
    value = b"v" * 4000
    for i in range(1, 801):  # ~3 MiB of values into a 1 MiB map
        results = storage.state_machine.apply(i, put_entry((b"key/%05d" % i, value)))
        assert results[0].ok
    assert storage.store.map_size > 1024 * 1024
    with storage.store.reader() as view:
        assert view.count() == 800
    storage.close()
