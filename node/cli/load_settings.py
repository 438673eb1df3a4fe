"""A node's bulk load flags (and RKV_* variables): the bounds of POST /v1/kv:load.

Parsed by node/cli/settings.py, which owns the environment.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from node.errors import ConfigError
from node.service.load_limits import (
    DEFAULT_LOAD_CHUNK_KEYS,
    DEFAULT_LOAD_CHUNKS_IN_FLIGHT,
    LoadLimits,
)
from node.state.commands import MAX_TXN_OPS

_MAX_CHUNK_KEYS = 100 * MAX_TXN_OPS
_MAX_CHUNKS_IN_FLIGHT = 16


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--load-chunk-keys",
        help="most keys one chunk of a bulk load (POST /v1/kv:load) carries, one raft "
        "entry, which --max-entry-bytes also bounds; 1 to "
        f"{_MAX_CHUNK_KEYS} (RKV_LOAD_CHUNK_KEYS, {DEFAULT_LOAD_CHUNK_KEYS})",
    )
    add(
        "--load-chunks-in-flight",
        help="chunks of one bulk load proposed at once (each held until committed), "
        f"1 to {_MAX_CHUNKS_IN_FLIGHT} (RKV_LOAD_CHUNKS_IN_FLIGHT, "
        f"{DEFAULT_LOAD_CHUNKS_IN_FLIGHT})",
    )


def load_limits(
    value: Callable[[str], str | None],
    positive_int: Callable[[str | None, str, int], int],
    max_entry_bytes: int,
) -> LoadLimits:
    """The flags, read through settings.py's ``value(name)`` and number parser."""
    chunk_keys = positive_int(
        value("load_chunk_keys"), "--load-chunk-keys", DEFAULT_LOAD_CHUNK_KEYS
    )
    if chunk_keys > _MAX_CHUNK_KEYS:
        raise ConfigError(f"--load-chunk-keys must be at most {_MAX_CHUNK_KEYS}, not {chunk_keys}")
    in_flight = positive_int(
        value("load_chunks_in_flight"), "--load-chunks-in-flight", DEFAULT_LOAD_CHUNKS_IN_FLIGHT
    )
    if in_flight > _MAX_CHUNKS_IN_FLIGHT:
        raise ConfigError(
            f"--load-chunks-in-flight must be at most {_MAX_CHUNKS_IN_FLIGHT}, not {in_flight}"
        )
    return LoadLimits(chunk_keys, max_entry_bytes, in_flight)
