"""A bulk load chunk (node/state/load_command.py): its encoding and how it applies."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest

from node.errors import EntryDecodeError, UnsupportedEntryVersion
from node.state.commands import Batch, Put, decode_entry, encode_entry, payload_bytes
from node.state.load_command import TAG_LOAD, Load
from node.state.machine import StateMachine
from node.state.results import ResultCode
from node.storage.config import FsyncPolicy, StorageConfig
from node.storage.recovery import open_storage


def test_a_load_is_format_5_and_round_trips() -> None:
    load = Load([b"a", b"b"], [b"1", b""])
    data = encode_entry(Batch((load, Put(b"k", b"v")), 7))
    assert data[0] == 5
    decoded = decode_entry(data)
    assert decoded.commands == (load, Put(b"k", b"v"))
    assert type(decoded.commands[0]) is Load
    assert payload_bytes(load) >= 4  # counted by its bytes, for group commit's bound
    # A node that reads format 4 at most refuses (and stalls) rather than skip it.
    assert payload_bytes(Load([b"k" * 100], [b"v" * 1000])) > 1100


@pytest.mark.parametrize(
    "raw",
    [
        [TAG_LOAD, [b"a"], []],  # lengths differ
        [TAG_LOAD, [b"a"], ["text"]],  # a value that is not bytes
        [TAG_LOAD, b"a", [b"1"]],  # not arrays
    ],
)
def test_a_malformed_load_is_a_decode_error(raw: list[object]) -> None:
    data = b"\x05" + msgpack.packb([1, [raw]], use_bin_type=True)
    with pytest.raises(EntryDecodeError):
        decode_entry(data)


def test_a_load_claiming_an_older_format_is_refused() -> None:
    data = encode_entry(Batch((Load([b"a"], [b"1"]),)))
    with pytest.raises(EntryDecodeError, match="later format"):
        decode_entry(b"\x04" + data[1:])
    with pytest.raises(UnsupportedEntryVersion):
        decode_entry(b"\x07" + data[1:])


def test_encoding_refuses_what_decoding_would() -> None:
    with pytest.raises(ValueError):
        encode_entry(Batch((Load([b"a", b"b"], [b"1"]),)))
    with pytest.raises(ValueError):
        encode_entry(Batch((Load(["a"], [b"1"]),)))  # type: ignore[list-item]


@pytest.fixture
def machine(tmp_path: Path):
    storage = open_storage(tmp_path / "node", StorageConfig(fsync=FsyncPolicy.ON_SYNC))
    try:
        yield StateMachine.over(storage), storage
    finally:
        storage.close()


def test_a_load_writes_every_pair_as_puts_in_order(machine) -> None:
    state, storage = machine
    state.apply(1, encode_entry(Batch((Put(b"b", b"old"),), 1)))
    load = Load([b"a", b"b", b"c", b"a"], [b"1", b"2", b"3", b"4"])
    (result,) = state.apply(2, encode_entry(Batch((load,), 2)))
    assert result.code is ResultCode.OK and result.version == 5  # offsets 2..5
    store = storage.store
    assert store.get(b"a").value == b"4" and store.get(b"a").version == 5  # the later value
    assert store.get(b"a").create_version == 2
    assert store.get(b"b").value == b"2" and store.get(b"b").create_version == 1
    assert [r.key for r in storage.commit_log.read(2)] == [b"a", b"b", b"c", b"a"]


@pytest.mark.parametrize(
    ("key", "value", "code"),
    [
        (b"\x00rkv/members/x", b"v", ResultCode.RESERVED_KEY),
        (b"", b"v", ResultCode.INVALID_KEY),
        (b"k" * 5000, b"v", ResultCode.INVALID_KEY),
        (b"ok", b"v" * (2 * 1024 * 1024), ResultCode.VALUE_TOO_LARGE),
    ],
)
def test_one_refused_pair_refuses_the_whole_load(machine, key, value, code) -> None:
    state, storage = machine
    load = Load([b"first", key, b"last"], [b"1", value, b"3"])
    (result,) = state.apply(1, encode_entry(Batch((load,), 1)))
    assert result.code is code and "pair 1" in result.message
    assert storage.store.get(b"first") is None and storage.store.get(b"last") is None
    assert storage.commit_log.last_offset == 0
