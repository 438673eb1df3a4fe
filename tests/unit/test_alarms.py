"""Cluster alarms in the state machine (node/state/alarm_commands.py, alarms.py):
their encoding, what a raised nospace alarm refuses at apply, and that the alarm
lives in the replicated state (a reopened node, a snapshot install)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import pytest

from node.errors import EntryDecodeError, UnsupportedEntryVersion
from node.snapshot.file import export_snapshot
from node.snapshot.install import install_snapshot
from node.state.alarm_commands import (
    TAG_RAISE_ALARM,
    AlarmKind,
    DisarmAlarm,
    RaiseAlarm,
)
from node.state.commands import (
    Append,
    AuditCut,
    Batch,
    Delete,
    Fenced,
    Incr,
    InitProducer,
    Produced,
    Put,
    Txn,
    TxnDelete,
    TxnGet,
    TxnPut,
    decode_entry,
    encode_entry,
)
from node.state.lease_commands import LeaseGrant, LeaseRevoke, TtlPut
from node.state.load_command import Load
from node.state.machine import StateMachine
from node.state.results import CommandResult, ResultCode
from node.storage.config import FsyncPolicy, StorageConfig
from node.storage.recovery import NodeStorage, open_storage

NOSPACE = AlarmKind.NOSPACE
FULL = RaiseAlarm("n2", NOSPACE, "disk full: No space left on device")


def test_alarms_are_format_6_and_round_trip() -> None:
    for command in (FULL, DisarmAlarm("n2", NOSPACE), DisarmAlarm(None, NOSPACE)):
        data = encode_entry(Batch((command, Put(b"k", b"v")), 3))
        assert data[0] == 6
        assert decode_entry(data).commands == (command, Put(b"k", b"v"))
    with pytest.raises(EntryDecodeError, match="later format"):
        decode_entry(b"\x05" + encode_entry(Batch((FULL,)))[1:])
    with pytest.raises(UnsupportedEntryVersion):
        decode_entry(b"\x07" + encode_entry(Batch((FULL,)))[1:])


@pytest.mark.parametrize(
    "raw",
    [
        [TAG_RAISE_ALARM, "n1", "disk", "why"],  # unknown kind
        [TAG_RAISE_ALARM, None, "nospace", "why"],  # a raise names its member
        [TAG_RAISE_ALARM, "a/b", "nospace", "why"],  # not a member id
        [TAG_RAISE_ALARM, "n1", "nospace", "x" * 2000],  # reason too long
    ],
)
def test_a_malformed_alarm_is_a_decode_error(raw: list[object]) -> None:
    with pytest.raises(EntryDecodeError, match="malformed alarm"):
        decode_entry(b"\x06" + msgpack.packb([1, [raw]], use_bin_type=True))


def test_encoding_refuses_what_decoding_would() -> None:
    with pytest.raises(ValueError):
        encode_entry(Batch((RaiseAlarm("n1", NOSPACE, "x" * 2000),)))
    with pytest.raises(ValueError):
        encode_entry(Batch((DisarmAlarm("", NOSPACE),)))


@pytest.fixture
def storage(tmp_path: Path) -> Any:
    opened = open_storage(tmp_path / "node", StorageConfig(fsync=FsyncPolicy.ON_SYNC))
    try:
        yield opened
    finally:
        opened.close()


class Applier:
    def __init__(self, storage: NodeStorage) -> None:
        self.storage = storage
        self.machine = StateMachine.over(storage)

    def __call__(self, *commands: Any) -> tuple[CommandResult, ...]:
        index = self.storage.store.applied_index + 1
        return self.machine.apply(index, encode_entry(Batch(tuple(commands), 1000 + index)))


ADDING = [
    Put(b"k", b"v"),
    Incr(b"n", 1),
    Append(b"k", b"more"),
    Load([b"a"], [b"1"]),
    Txn(success=(TxnPut(b"t", b"1"),)),
    Txn(success=(TxnGet(b"k"),), failure=(TxnPut(b"t", b"1"),)),
    InitProducer("tx", 60_000, 10),
    Produced(1, 0, 0, Put(b"k", b"v")),
    Fenced("lock", 1, Put(b"k", b"v")),
    LeaseGrant(10_000, "", 100, 100),
    TtlPut(b"k", b"v", None, 10_000, "", 100),
]


@pytest.mark.parametrize("command", ADDING, ids=lambda c: type(c).__name__)
def test_a_nospace_alarm_refuses_every_write_that_adds_data(storage, command) -> None:
    apply = Applier(storage)
    apply(Put(b"k", b"before"))
    offset = storage.commit_log.last_offset
    (raised,) = apply(FULL)
    assert raised.code is ResultCode.OK
    (result,) = apply(command)
    assert result.code is ResultCode.NO_SPACE
    assert "n2" in result.message and "disk full" in result.message
    assert "disarm" in result.message
    assert storage.store.get(b"k").value == b"before"
    assert storage.commit_log.last_offset == offset + 1  # only the alarm's record
    assert apply.machine.space_refusal(command) == result  # what the proposer checks


def test_deletes_reads_revokes_and_the_disarm_go_on(storage) -> None:
    apply = Applier(storage)
    apply(Put(b"a", b"1"), Put(b"b", b"2"), Put(b"c", b"3"))
    apply(FULL)
    results = apply(
        Delete(b"a"),
        Txn(success=(TxnDelete(b"b"), TxnGet(b"c"))),
        LeaseRevoke(12345),
        AuditCut("audit-1"),
    )
    assert results[0].code is ResultCode.OK and results[1].code is ResultCode.OK
    assert results[2].code is ResultCode.LEASE_NOT_FOUND  # decided, not refused
    assert results[3].code is ResultCode.OK
    assert storage.store.get(b"a") is None and storage.store.get(b"b") is None
    # The disarm frees writes, from the next command of the same entry on.
    refused, disarmed, put = apply(Put(b"x", b"1"), DisarmAlarm(None, NOSPACE), Put(b"x", b"2"))
    assert refused.code is ResultCode.NO_SPACE
    assert disarmed.code is ResultCode.OK and put.code is ResultCode.OK
    assert storage.store.get(b"x").value == b"2"
    assert apply.machine.alarms() == ()


def test_an_alarm_raised_in_an_entry_refuses_the_later_writes_of_that_entry(storage) -> None:
    apply = Applier(storage)
    before, raised, after = apply(Put(b"k", b"1"), FULL, Put(b"k", b"2"))
    assert before.code is ResultCode.OK and raised.code is ResultCode.OK
    assert after.code is ResultCode.NO_SPACE
    assert storage.store.get(b"k").value == b"1"


def test_raising_twice_keeps_one_alarm_and_a_disarm_names_its_member(storage) -> None:
    apply = Applier(storage)
    apply(FULL)
    offset = storage.commit_log.last_offset
    apply(RaiseAlarm("n2", NOSPACE, "again"))
    assert storage.commit_log.last_offset == offset  # no new record
    apply(RaiseAlarm("n3", NOSPACE, "quota"))
    alarms = apply.machine.alarms()
    assert [(a.member, a.kind, a.reason) for a in alarms] == [
        ("n2", NOSPACE, "disk full: No space left on device"),
        ("n3", NOSPACE, "quota"),
    ]
    assert alarms[0].raised_ms == 1001
    apply(DisarmAlarm("n2", NOSPACE))
    assert [a.member for a in apply.machine.alarms()] == ["n3"]
    (still,) = apply(Put(b"k", b"v"))
    assert still.code is ResultCode.NO_SPACE and "n3" in still.message


def test_the_alarm_survives_a_reopen_and_travels_in_a_snapshot(tmp_path: Path) -> None:
    config = StorageConfig(fsync=FsyncPolicy.ON_SYNC)
    leader = open_storage(tmp_path / "leader", config)
    apply = Applier(leader)
    apply(Put(b"k", b"1"))
    apply(FULL)
    leader.close()
    leader = open_storage(tmp_path / "leader", config)
    reopened = Applier(leader)
    assert [a.member for a in reopened.machine.alarms()] == ["n2"]
    assert reopened(Put(b"k", b"2"))[0].code is ResultCode.NO_SPACE

    follower = open_storage(tmp_path / "follower", config)
    behind = Applier(follower)
    behind(Put(b"k", b"0"))
    assert behind.machine.alarms() == ()
    snapshot = tmp_path / "leader.snapshot"
    with open(snapshot, "wb") as f:
        export_snapshot(leader.store, f)
    install_snapshot(follower, snapshot)
    # The machine's remembered alarms follow the installed state.
    assert [a.member for a in behind.machine.alarms()] == ["n2"]
    assert behind(Put(b"k", b"3"))[0].code is ResultCode.NO_SPACE
    stored = follower.store.get(b"k")
    assert stored is not None and stored.value == b"1"
    leader.close()
    follower.close()


def test_an_apply_that_meets_a_full_disk_tells_the_space_hook_and_can_be_retried(
    storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    from node.errors import StoreFullError  # noqa: PLC0415

    apply = Applier(storage)
    told: list[str] = []
    apply.machine.space_hook = told.append
    real_write = storage.store.write

    def full(*args: Any) -> None:
        raise StoreFullError("LMDB write failed: No space left on device")

    monkeypatch.setattr(storage.store, "write", full)
    entry = encode_entry(Batch((Put(b"k", b"v"),), 5))
    with pytest.raises(StoreFullError):
        apply.machine.apply(1, entry)
    assert told == ["LMDB write failed: No space left on device"]
    monkeypatch.setattr(storage.store, "write", real_write)
    # raft's retry, once space is back: the log had the records, LMDB catches up to it
    (result,) = apply.machine.apply(1, entry)
    assert result.code is ResultCode.ALREADY_APPLIED
    assert storage.store.get(b"k").value == b"v"
    assert len(list(storage.commit_log.read(1))) == 1  # the record is not written twice
