"""The largest request body a node reads (no aiohttp import: the settings use it).

A transaction may carry many values, so the limit is above the value limit; it
is also the most keys and values one write, so one raft command, can carry,
which the raft port's frame limit must leave room for (node/cli/settings.py).
"""

from __future__ import annotations

MIN_BODY_LIMIT = 16 * 1024 * 1024


def body_limit(max_value_bytes: int) -> int:
    """The largest request body the API reads (413 above it, before reading it whole)."""
    return max(MIN_BODY_LIMIT, 2 * max_value_bytes + 65536)
