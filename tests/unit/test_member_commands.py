"""Member directory commands: encoding (tags 5 and 6) and how the state machine
applies them (ordinary records under the reserved prefix, never from clients)."""

from __future__ import annotations

import json

import msgpack
import pytest

from node.errors import EntryDecodeError
from node.keyspace import member_key
from node.state.commands import (
    FORMAT_VERSION,
    TAG_REMOVE_MEMBER,
    TAG_SET_MEMBER,
    Batch,
    Put,
    RemoveMember,
    SetMember,
    decode_entry,
    encode_entry,
)
from node.state.results import ResultCode
from node.storage.recovery import NodeStorage
from tests.support.state import machine_of


def test_tags_are_5_and_6_and_round_trip() -> None:
    assert (TAG_SET_MEMBER, TAG_REMOVE_MEMBER) == (5, 6)
    batch = Batch((SetMember("n3", "h:1", "http://h:2"), RemoveMember("n1")), 7)
    assert decode_entry(encode_entry(batch)) == batch


@pytest.mark.parametrize(
    "command", [[TAG_SET_MEMBER, "n3", "h:1"], [TAG_SET_MEMBER, "n3", b"h:1", "u"], [6, ""]]
)
def test_malformed_member_commands_do_not_decode(command: list[object]) -> None:
    data = bytes((FORMAT_VERSION,)) + msgpack.packb([0, [command]], use_bin_type=True)
    with pytest.raises(EntryDecodeError):
        decode_entry(data)


def test_member_records_are_written_and_removed(storage: NodeStorage) -> None:
    machine = machine_of(storage)
    entry = encode_entry(Batch((Put(b"k", b"v"), SetMember("n3", "h:1", "http://h:2")), 1))
    results = machine.apply(1, entry)
    assert [r.code for r in results] == [ResultCode.OK, ResultCode.OK]
    stored = storage.store.get(member_key("n3"))
    assert stored is not None and stored.version == 2
    assert json.loads(stored.value) == {"id": "n3", "raft_address": "h:1", "url": "http://h:2"}
    # user scans never show it
    with storage.store.reader() as view:
        assert [key for key, _ in view.scan(b"")] == [b"k"]
    machine.apply(2, encode_entry(Batch((RemoveMember("n3"), RemoveMember("absent")), 2)))
    assert storage.store.get(member_key("n3")) is None
    assert storage.commit_log.last_offset == 3  # one tombstone; the absent id wrote nothing


def test_clients_still_cannot_write_the_member_prefix(storage: NodeStorage) -> None:
    results = machine_of(storage).apply(1, encode_entry(Batch((Put(member_key("x"), b"{}"),))))
    assert results[0].code is ResultCode.RESERVED_KEY
