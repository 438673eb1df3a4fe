"""Leases and locks in the state machine: records, expiry by version, tokens, fencing."""

from __future__ import annotations

import msgpack
import pytest

from node.errors import EntryDecodeError
from node.state.commands import (
    Batch,
    Command,
    Delete,
    Fenced,
    Produced,
    Put,
    Txn,
    TxnPut,
    decode_entry,
    encode_entry,
)
from node.state.entry_writer import LeaseEvents
from node.state.lease_commands import (
    ExpireLeases,
    LeasedPut,
    LeaseGrant,
    LeaseKeepAlive,
    LeaseRevoke,
    Lock,
    Proclaim,
    TtlPut,
    Unlock,
)
from node.state.leases import LEASE_COUNT_KEY, decode_lock, lease_key, lock_key
from node.state.machine import StateMachine
from node.state.results import CommandResult, ResultCode
from node.storage.recovery import NodeStorage
from tests.support.state import machine_of


class Applier:
    def __init__(self, storage: NodeStorage) -> None:
        self.storage = storage
        self.machine: StateMachine = machine_of(storage)
        self.index = 0
        self.events: list[LeaseEvents] = []
        self.machine.lease_hook = self.events.append

    def run(self, *commands: Command) -> tuple[CommandResult, ...]:
        self.index += 1
        entry = encode_entry(Batch(commands, timestamp_ms=1000 + self.index))
        return self.machine.apply(self.index, entry)

    def one(self, command: Command) -> CommandResult:
        return self.run(command)[0]

    def grant(self, ttl_ms: int = 2000, max_attachments: int = 10) -> int:
        result = self.one(LeaseGrant(ttl_ms, "alice", 100, max_attachments))
        assert result.code is ResultCode.OK
        return int(result.value)

    def value(self, key: bytes) -> bytes | None:
        found = self.storage.store.get(key)
        return None if found is None else found.value

    def lease_version(self, lease_id: int) -> int:
        found = self.storage.store.get(lease_key(lease_id))
        assert found is not None
        return found.version


@pytest.fixture
def app(storage: NodeStorage) -> Applier:
    return Applier(storage)


def test_every_lease_command_survives_its_encoding() -> None:
    commands: tuple[Command, ...] = (
        LeaseGrant(2000, "alice", 10, 5),
        LeaseKeepAlive((1, 2, 3)),
        LeaseRevoke(7),
        ExpireLeases(((1, 4), (2, 9)), 100),
        LeasedPut(b"k", b"v", None, 3),
        TtlPut(b"k", b"v", 0, 1000, "", 10),
        Lock("jobs/a", 3, b"node-a", 10),
        Unlock("jobs/a", 3),
        Proclaim("jobs/a", 3, 12, b"x"),
        Fenced("jobs/a", 12, Put(b"k", b"v")),
        Produced(1, 0, 0, Fenced("jobs/a", 12, Delete(b"k"))),
        Txn(success=(TxnPut(b"k", b"v", 3), TxnPut(b"j", b"w"))),
    )
    entry = encode_entry(Batch(commands, 5))
    assert entry[0] == 4
    assert decode_entry(entry).commands == commands


def test_older_entries_keep_their_format() -> None:
    assert encode_entry(Batch((Txn(success=(TxnPut(b"k", b"v"),)),), 5))[0] == 1


@pytest.mark.parametrize(
    "command",
    [
        LeaseGrant(0, "a", 10, 5),
        LeaseKeepAlive(()),
        LeaseRevoke(0),
        Lock("bad name", 1, b"", 10),
        Lock("a", 1, b"x" * 5000, 10),
        Fenced("a", -1, Put(b"k", b"v")),
    ],
)
def test_malformed_commands_are_refused_when_encoded(command: Command) -> None:
    with pytest.raises(ValueError):
        encode_entry(Batch((command,), 1))


def test_a_malformed_lease_command_does_not_decode() -> None:
    entry = b"\x04" + msgpack.packb([1, [[16, "seven"]]], use_bin_type=True)
    with pytest.raises(EntryDecodeError):
        decode_entry(entry)


def test_revoking_a_lease_deletes_its_keys_in_one_entry(app: Applier) -> None:
    lease = app.grant()
    assert app.one(LeasedPut(b"a", b"1", None, lease)).ok
    assert app.one(LeasedPut(b"b", b"2", None, lease)).ok
    assert app.one(Put(b"c", b"3")).ok
    revoked = app.one(LeaseRevoke(lease))
    assert revoked.ok and revoked.value == b"2"
    assert app.value(b"a") is None and app.value(b"b") is None
    assert app.value(b"c") == b"3"
    assert app.storage.store.get(lease_key(lease)) is None
    assert app.value(LEASE_COUNT_KEY) is None
    assert app.events[-1].ended == [lease]
    assert app.one(LeaseRevoke(lease)).code is ResultCode.LEASE_NOT_FOUND


def test_a_key_written_again_without_the_lease_outlives_it(app: Applier) -> None:
    lease = app.grant()
    app.one(LeasedPut(b"a", b"1", None, lease))
    app.one(Put(b"a", b"2"))  # detached, as etcd does
    assert app.one(LeaseRevoke(lease)).value == b"0"
    assert app.value(b"a") == b"2"


def test_an_expiry_decided_before_a_keepalive_changes_nothing(app: Applier) -> None:
    lease = app.grant()
    app.one(LeasedPut(b"a", b"1", None, lease))
    seen = app.lease_version(lease)
    renewed = app.one(LeaseKeepAlive((lease, 999)))
    assert [(r.found, r.value) for r in renewed.op_results] == [(True, b"2000"), (False, b"")]
    expired = app.one(ExpireLeases(((lease, seen),), 100))
    assert [r.found for r in expired.op_results] == [False]
    assert app.value(b"a") == b"1"
    expired = app.one(ExpireLeases(((lease, app.lease_version(lease)),), 100))
    assert [r.found for r in expired.op_results] == [True]
    assert app.value(b"a") is None


def test_attaching_keys_does_not_renew_or_void_an_expiry(app: Applier) -> None:
    lease = app.grant()
    seen = app.lease_version(lease)
    app.one(LeasedPut(b"a", b"1", None, lease))
    assert app.lease_version(lease) == seen
    assert app.one(ExpireLeases(((lease, seen),), 100)).op_results[0].found


def test_an_expiry_stops_at_its_record_budget(app: Applier) -> None:
    first, second = app.grant(), app.grant()
    for i in range(5):
        app.one(LeasedPut(b"a%d" % i, b"v", None, first))
    app.one(LeasedPut(b"b", b"v", None, second))
    pairs = ((first, app.lease_version(first)), (second, app.lease_version(second)))
    result = app.one(ExpireLeases(pairs, 3))
    assert [r.found for r in result.op_results] == [True]  # the first whole, then stop
    assert app.value(b"b") == b"v"


def test_limits_travel_in_the_entry(app: Applier) -> None:
    lease = app.grant(max_attachments=2)
    assert app.one(LeasedPut(b"a", b"1", None, lease)).ok
    assert app.one(LeasedPut(b"a", b"again", None, lease)).ok  # the same attachment
    assert app.one(LeasedPut(b"b", b"1", None, lease)).ok
    refused = app.one(LeasedPut(b"c", b"1", None, lease))
    assert refused.code is ResultCode.TOO_MANY_LEASE_ATTACHMENTS
    assert app.value(b"c") is None
    assert app.one(LeaseGrant(1000, "", 1, 5)).code is ResultCode.TOO_MANY_LEASES
    assert app.one(LeasedPut(b"d", b"1", None, 424242)).code is ResultCode.LEASE_NOT_FOUND


def test_a_ttl_put_grants_a_lease_for_its_key(app: Applier) -> None:
    result = app.one(TtlPut(b"k", b"v", None, 3000, "bob", 10))
    assert result.ok
    lease = int(result.value)
    assert app.value(b"k") == b"v"
    assert app.events[-1].renewed[0][:2] == (lease, 3000)
    assert app.one(TtlPut(b"k", b"w", 0, 3000, "bob", 10)).code is ResultCode.VERSION_CONFLICT
    app.one(LeaseRevoke(lease))
    assert app.value(b"k") is None


def test_a_txn_put_attaches_and_a_missing_lease_fails_the_whole_txn(app: Applier) -> None:
    lease = app.grant()
    assert app.one(Txn(success=(TxnPut(b"a", b"1", lease), TxnPut(b"b", b"2")))).ok
    failed = app.one(Txn(success=(TxnPut(b"c", b"1"), TxnPut(b"d", b"2", 5555))))
    assert failed.code is ResultCode.LEASE_NOT_FOUND
    assert app.value(b"c") is None
    app.one(LeaseRevoke(lease))
    assert app.value(b"a") is None and app.value(b"b") == b"2"


def test_a_lease_ended_in_the_entry_that_attached_it_deletes_the_key(app: Applier) -> None:
    lease = app.grant()
    results = app.run(LeasedPut(b"a", b"1", None, lease), LeaseRevoke(lease))
    assert results[1].value == b"1"
    assert app.value(b"a") is None


def lock_state(app: Applier, name: str) -> tuple[int, int, list[int]]:
    found = app.storage.store.get(lock_key(name))
    if found is None:
        return (0, 0, [])
    lock = decode_lock(found.value)
    return (lock.holder, lock.token, [w for w, _ in lock.waiters])


def test_a_lock_queues_in_order_and_tokens_increase(app: Applier) -> None:
    a, b, c = app.grant(), app.grant(), app.grant()
    first = app.one(Lock("job", a, b"", 10))
    assert first.succeeded
    token_a = first.version
    assert app.one(Lock("job", a, b"", 10)).version == token_a  # again: the same token
    assert not app.one(Lock("job", b, b"", 10)).succeeded
    assert not app.one(Lock("job", c, b"", 10)).succeeded
    assert lock_state(app, "job") == (a, token_a, [b, c])
    assert app.one(Unlock("job", a)).ok
    holder, token_b, waiters = lock_state(app, "job")
    assert (holder, waiters) == (b, [c]) and token_b > token_a
    app.one(LeaseRevoke(b))  # the holder's lease ends: the next waiter takes it
    holder, token_c, waiters = lock_state(app, "job")
    assert (holder, waiters) == (c, []) and token_c > token_b
    assert app.one(Unlock("job", a)).code is ResultCode.NOT_LOCK_HOLDER
    app.one(Unlock("job", c))
    assert lock_state(app, "job") == (0, 0, [])
    assert "job" in app.events[-1].locks


def test_a_waiter_whose_lease_ends_leaves_the_queue(app: Applier) -> None:
    a, b = app.grant(), app.grant()
    app.one(Lock("job", a, b"", 10))
    app.one(Lock("job", b, b"", 10))
    app.one(LeaseRevoke(b))
    assert lock_state(app, "job")[2] == []
    assert app.one(Lock("job", b, b"", 10)).code is ResultCode.LEASE_NOT_FOUND


def test_lock_waiters_are_bounded(app: Applier) -> None:
    a, b, c = app.grant(), app.grant(), app.grant()
    app.one(Lock("job", a, b"", 1))
    assert app.one(Lock("job", b, b"", 1)).ok
    assert app.one(Lock("job", c, b"", 1)).code is ResultCode.TOO_MANY_LOCK_WAITERS


def test_fenced_writes_need_the_current_holders_token(app: Applier) -> None:
    a, b = app.grant(), app.grant()
    token_a = app.one(Lock("job", a, b"", 10)).version
    assert app.one(Fenced("job", token_a, Put(b"k", b"a"))).ok
    app.one(Lock("job", b, b"", 10))
    app.one(LeaseRevoke(a))  # a paused holder's lease expires; b takes the lock
    late = app.one(Fenced("job", token_a, Put(b"k", b"late")))
    assert late.code is ResultCode.FENCED
    token_b = lock_state(app, "job")[1]
    assert late.current_version == token_b
    assert app.value(b"k") == b"a"
    assert app.one(Fenced("job", token_b, Put(b"k", b"b"))).ok
    app.one(Unlock("job", b))
    nobody = app.one(Fenced("job", token_b, Put(b"k", b"after")))
    assert nobody.code is ResultCode.FENCED and nobody.current_version == 0


def test_only_the_holder_with_its_token_proclaims(app: Applier) -> None:
    a, b = app.grant(), app.grant()
    token = app.one(Lock("leader", a, b"node-a", 10)).version
    assert app.one(Proclaim("leader", a, token, b"node-a2")).ok
    found = app.storage.store.get(lock_key("leader"))
    assert found is not None and decode_lock(found.value).value == b"node-a2"
    assert app.one(Proclaim("leader", b, token, b"x")).code is ResultCode.NOT_LOCK_HOLDER
    assert app.one(Proclaim("leader", a, token + 1, b"x")).code is ResultCode.NOT_LOCK_HOLDER
