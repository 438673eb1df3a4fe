"""Key limits and the reserved internal prefix.

Internal state (producer sessions, replication checkpoints, cluster metadata)
lives in ordinary records under :data:`RESERVED_PREFIX`, so replay, compaction
and pull replication carry it with no special case. User commands may neither
read nor write it.
"""

from __future__ import annotations

import re

RESERVED_PREFIX = b"\x00rkv/"
MEMBERS_PREFIX = RESERVED_PREFIX + b"members/"
"""The replicated member directory: MEMBERS_PREFIX + id -> JSON {id, raft_address, url}."""
ALARMS_PREFIX = RESERVED_PREFIX + b"alarms/"
"""The raised alarms: ALARMS_PREFIX + kind + "/" + member id -> JSON (node/state/alarms.py)."""
CHECKPOINTS_PREFIX = RESERVED_PREFIX + b"checkpoints/"
"""Named checkpoints of external replicators (the Redis replicator's replid and
offset): CHECKPOINTS_PREFIX + name -> the replicator's value. The one internal
namespace user transactions may compare, put and get, by name, so a replicator
commits its data and its position in one atomic write."""
MAX_CHECKPOINT_NAME_BYTES = 200
_CHECKPOINT_NAME = re.compile(r"[A-Za-z0-9._:/@-]+")
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


MAX_MEMBER_ID_CHARS = 128


def member_id_problem(node_id: str) -> str | None:
    """Why ``node_id`` cannot name a member (it names directories, e.g. an audit's
    ``<audit id>/<node id>/``, and appears in URLs), or None."""
    if not node_id or len(node_id) > MAX_MEMBER_ID_CHARS:
        return f"a member id has 1 to {MAX_MEMBER_ID_CHARS} characters"
    if node_id in (".", "..") or any(c in node_id for c in "/\\") or not node_id.isprintable():
        return f"a member id may not be . or .., nor hold / \\ or control characters: {node_id!r}"
    return None


def member_key(node_id: str) -> bytes:
    return MEMBERS_PREFIX + node_id.encode()


def checkpoint_key(name: str) -> bytes:
    return CHECKPOINTS_PREFIX + name.encode()


def checkpoint_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a checkpoint, or None."""
    if not 0 < len(name) <= MAX_CHECKPOINT_NAME_BYTES or not _CHECKPOINT_NAME.fullmatch(name):
        return (
            f"a checkpoint name is 1 to {MAX_CHECKPOINT_NAME_BYTES} characters of "
            "A-Z a-z 0-9 . _ : / @ -"
        )
    return None


def is_checkpoint(key: bytes) -> bool:
    return key.startswith(CHECKPOINTS_PREFIX)
