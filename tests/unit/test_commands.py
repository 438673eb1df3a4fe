from __future__ import annotations

import contextlib

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from node.errors import EntryDecodeError, UnsupportedEntryVersion
from node.state.commands import (
    FORMAT_VERSION,
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
    decode_entry,
    encode_entry,
)

versions = st.none() | st.integers(min_value=0, max_value=2**63)
keys = st.binary(max_size=64)
compares = st.one_of(
    st.builds(
        Compare, keys, st.just(CompareTarget.VERSION), st.integers(min_value=0, max_value=2**64 - 1)
    ),
    st.builds(Compare, keys, st.just(CompareTarget.VALUE), st.binary(max_size=64)),
    st.builds(Compare, keys, st.just(CompareTarget.EXISTS), st.booleans()),
)
txn_ops: st.SearchStrategy[TxnOp] = st.one_of(
    st.builds(TxnPut, keys, st.binary(max_size=256), st.integers(0, 2**63 - 1)),
    st.builds(TxnDelete, keys),
    st.builds(TxnGet, keys),
)
txns = st.builds(
    Txn,
    st.lists(compares, max_size=5).map(tuple),
    st.lists(txn_ops, max_size=8).map(tuple),
    st.lists(txn_ops, max_size=8).map(tuple),
    st.none() | st.integers(min_value=0, max_value=2**63 - 1),
)
commands: st.SearchStrategy[Command] = st.one_of(
    st.builds(Put, keys, st.binary(max_size=256), versions),
    st.builds(Delete, keys, versions),
    st.just(Barrier()),
    txns,
)


def typed(value: object) -> object:
    """``value`` with the type of every tuple spelled out: NamedTuples compare as
    plain tuples, so ``TxnDelete(k) == TxnGet(k)`` and equality alone would miss
    an op decoded as the wrong kind."""
    if isinstance(value, tuple | list):
        return (type(value).__name__, *(typed(v) for v in value))
    return (type(value).__name__, value)


@given(st.lists(commands, max_size=20), st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_entries_round_trip(cmds: list[Command], timestamp: int) -> None:
    batch = Batch(tuple(cmds), timestamp)
    decoded = decode_entry(encode_entry(batch))
    assert decoded == batch
    assert typed(decoded.commands) == typed(batch.commands)


def test_entry_starts_with_the_lowest_format_version_that_holds_it() -> None:
    assert encode_entry(Batch((Barrier(),)))[0] == 1
    assert FORMAT_VERSION == 6  # alarms (tests/unit/test_alarms.py)


@pytest.mark.parametrize("version", [0, 7, 255])
def test_unknown_format_version_is_a_clear_error(version: int) -> None:
    data = bytes((version,)) + encode_entry(Batch((Put(b"k", b"v"),)))[1:]
    with pytest.raises(
        UnsupportedEntryVersion, match=f"unsupported entry format version {version}"
    ):
        decode_entry(data)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        bytes((FORMAT_VERSION,)),
        bytes((FORMAT_VERSION,)) + b"\xc1",  # a byte msgpack never uses
        bytes((FORMAT_VERSION,)) + msgpack.packb({"a": 1}),
        bytes((FORMAT_VERSION,)) + msgpack.packb([1, [[99, b"k"]]]),  # unknown tag
        bytes((FORMAT_VERSION,)) + msgpack.packb([1, [[1, "text-key", b"v", None]]]),
        bytes((FORMAT_VERSION,)) + msgpack.packb([1, [[1, b"k", b"v", -3]]]),
        bytes((FORMAT_VERSION,)) + msgpack.packb([1, [[2, b"k"]]]),  # delete missing a field
        bytes((FORMAT_VERSION,)) + msgpack.packb(["soon", []]),
    ],
)
def test_malformed_entries_are_decode_errors(data: bytes) -> None:
    with pytest.raises(EntryDecodeError):
        decode_entry(data)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_crash_the_decoder(data: bytes) -> None:
    with contextlib.suppress(EntryDecodeError):
        decode_entry(data)
