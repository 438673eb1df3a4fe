"""A bulk load chunk: many plain puts in one command (POST /v1/kv:load).

Encoding (entry format 5, node/state/commands.py)::

    [TAG_LOAD, [key, ...], [value, ...]]      the two arrays of equal length

A :class:`Load` is what a chunk of a bulk load becomes: the HTTP layer reads
lines, checks each key and value as a PUT would, and proposes up to
``--max-entry-bytes`` of them (and ``--load-chunk-keys``) as one command, so a
raft entry carries thousands of puts for the cost of one command. Why not a
txn of puts: a txn builds a NamedTuple per op on every replica, checks and
tracks each op for a rollback, and answers one result per op that every
replica holds; a load is two flat arrays in, one result out
(docs/ARCHITECTURE.md, "Bulk load").

Applying it (node/state/load_apply.py) is all or nothing: a key or value
that would be refused (reserved, too long, too large) refuses the whole
command, the same on every replica. The pairs are then written in order, each
a put with its own offset, as if they were plain puts; a key given twice
takes the later value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from node.errors import EntryDecodeError

TAG_LOAD = 24


class Load(NamedTuple):
    """Put ``values[i]`` at ``keys[i]`` for every i, in order (one command)."""

    keys: Sequence[bytes]
    values: Sequence[bytes]


def load_bytes(load: Load) -> int:
    """About how many bytes ``load`` takes in an entry (commands.payload_bytes)."""
    return sum(map(len, load.keys)) + sum(map(len, load.values)) + 8 * len(load.keys) + 12


def encode_load(load: Load) -> list[Any]:
    keys, values = list(load.keys), list(load.values)
    if len(keys) != len(values):
        raise ValueError(f"a load has {len(keys)} keys and {len(values)} values")
    if not all(type(k) is bytes for k in keys) or not all(type(v) is bytes for v in values):
        raise ValueError("a load's keys and values must be bytes")
    return [TAG_LOAD, keys, values]


def decode_load(raw: list[Any]) -> Load:
    _, keys, values = raw
    if not isinstance(keys, list) or not isinstance(values, list) or len(keys) != len(values):
        raise EntryDecodeError("a load must be [tag, [key, ...], [value, ...]] of equal lengths")
    # One pass per array in C (map/all) rather than a check per pair in Python.
    if not all(map(bytes.__instancecheck__, keys)) or not all(map(bytes.__instancecheck__, values)):
        raise EntryDecodeError("a load's keys and values must be bytes")
    return Load(keys, values)
