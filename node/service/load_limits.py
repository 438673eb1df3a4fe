"""The bounds of a bulk load (POST /v1/kv:load, docs/BULK_LOAD.md).

A load streams lines; the node holds at most one chunk being filled and
``chunks_in_flight`` chunks proposed and not yet answered, each at most
``chunk_keys`` pairs and ``chunk_bytes`` bytes of keys and values (the node's
--max-entry-bytes: a chunk is one raft entry). A line may hold at most
:func:`max_line_bytes`, what the largest key and value take once encoded.
"""

from __future__ import annotations

from dataclasses import dataclass

from node.keyspace import MAX_KEY_BYTES

DEFAULT_LOAD_CHUNK_KEYS = 20_000
DEFAULT_LOAD_CHUNKS_IN_FLIGHT = 4
DEFAULT_LOAD_CHUNK_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class LoadLimits:
    chunk_keys: int = DEFAULT_LOAD_CHUNK_KEYS
    """Most key/value pairs in one chunk (--load-chunk-keys)."""
    chunk_bytes: int = DEFAULT_LOAD_CHUNK_BYTES
    """Most bytes of keys and values in one chunk (--max-entry-bytes)."""
    chunks_in_flight: int = DEFAULT_LOAD_CHUNKS_IN_FLIGHT
    """Chunks of one load proposed at once (--load-chunks-in-flight)."""


def max_line_bytes(max_value_bytes: int) -> int:
    """The longest line a load reads: the largest key and value written the longest
    JSON allows (``\\u00XX`` escapes: 6 characters a byte) plus the field names."""
    return 6 * (MAX_KEY_BYTES + max_value_bytes) + 256
