"""Key limits and the reserved internal prefix.

Internal state (producer sessions, replication checkpoints, cluster metadata)
lives in ordinary records under :data:`RESERVED_PREFIX`, so replay, compaction
and pull replication carry it with no special case. User commands may neither
read nor write it.
"""

from __future__ import annotations

RESERVED_PREFIX = b"\x00rkv/"
MEMBERS_PREFIX = RESERVED_PREFIX + b"members/"
"""The replicated member directory: MEMBERS_PREFIX + id -> JSON {id, raft_address, url}."""
MIN_KEY_BYTES = 1
MAX_KEY_BYTES = 4096
DEFAULT_MAX_VALUE_BYTES = 1024 * 1024


def key_length_problem(key: bytes) -> str | None:
    """Why ``key`` has an unacceptable length, or None if it is fine."""
    if len(key) < MIN_KEY_BYTES:
        return "key must not be empty"
    if len(key) > MAX_KEY_BYTES:
        return f"key is {len(key)} bytes; the limit is {MAX_KEY_BYTES}"
    return None


def is_reserved(key: bytes) -> bool:
    """True for keys under the internal prefix, which user commands may not touch."""
    return key.startswith(RESERVED_PREFIX)


def member_key(node_id: str) -> bytes:
    return MEMBERS_PREFIX + node_id.encode()
