from __future__ import annotations

import contextlib

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from node.commands import (
    FORMAT_VERSION,
    Barrier,
    Batch,
    Command,
    Delete,
    Put,
    decode_entry,
    encode_entry,
)
from node.errors import EntryDecodeError, UnsupportedEntryVersion

versions = st.none() | st.integers(min_value=0, max_value=2**63)
commands: st.SearchStrategy[Command] = st.one_of(
    st.builds(Put, st.binary(max_size=64), st.binary(max_size=256), versions),
    st.builds(Delete, st.binary(max_size=64), versions),
    st.just(Barrier()),
)


@given(st.lists(commands, max_size=20), st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_entries_round_trip(cmds: list[Command], timestamp: int) -> None:
    batch = Batch(tuple(cmds), timestamp)
    assert decode_entry(encode_entry(batch)) == batch


def test_entry_starts_with_its_format_version() -> None:
    assert encode_entry(Batch((Barrier(),)))[0] == FORMAT_VERSION


@pytest.mark.parametrize("version", [0, 2, 255])
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
