"""A node's lease and lock flags (and RKV_* variables): the bounds of docs/LEASES.md.

Parsed by node/cli/settings.py, which owns the environment.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from node.errors import ConfigError
from node.service.leases import DEFAULT_MAX_LOCK_WAIT, LeaseLimits
from node.state.leases import (
    DEFAULT_MAX_LEASE_ATTACHMENTS,
    DEFAULT_MAX_LEASE_TTL,
    DEFAULT_MAX_LEASES,
    DEFAULT_MAX_LOCK_WAITERS,
)

_MAX_TTL_CEILING = 10 * 365 * 24 * 3600


def add_lease_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--max-leases",
        help="most leases the cluster holds; a grant past it answers 429 too_many_leases "
        f"(RKV_MAX_LEASES, {DEFAULT_MAX_LEASES})",
    )
    add(
        "--max-lease-ttl",
        help="the longest TTL of a lease or a key, in seconds; more answers 400 invalid_ttl "
        f"(RKV_MAX_LEASE_TTL, {DEFAULT_MAX_LEASE_TTL} = 30 days)",
    )
    add(
        "--max-lease-attachments",
        help="most keys and locks one lease holds (what its end deletes in one raft entry); "
        f"more answers 429 too_many_lease_attachments (RKV_MAX_LEASE_ATTACHMENTS, "
        f"{DEFAULT_MAX_LEASE_ATTACHMENTS})",
    )
    add(
        "--max-lock-waiters",
        help="most leases queued for one lock; more answers 429 too_many_lock_waiters "
        f"(RKV_MAX_LOCK_WAITERS, {DEFAULT_MAX_LOCK_WAITERS})",
    )
    add(
        "--max-lock-wait",
        help="the longest a lock or campaign request may wait for the lock, in seconds "
        f"(RKV_MAX_LOCK_WAIT, {DEFAULT_MAX_LOCK_WAIT:g})",
    )


def lease_limits(
    value: Callable[[str], str | None],
    positive_int: Callable[[str | None, str, int], int],
    positive_float: Callable[[str | None, str, float], float],
) -> LeaseLimits:
    """The flags, read through settings.py's ``value(name)`` and number parsers."""
    max_ttl = positive_int(value("max_lease_ttl"), "--max-lease-ttl", DEFAULT_MAX_LEASE_TTL)
    if max_ttl > _MAX_TTL_CEILING:
        raise ConfigError(f"--max-lease-ttl must be at most {_MAX_TTL_CEILING} (ten years)")
    return LeaseLimits(
        max_leases=positive_int(value("max_leases"), "--max-leases", DEFAULT_MAX_LEASES),
        max_lease_ttl=max_ttl,
        max_lease_attachments=positive_int(
            value("max_lease_attachments"),
            "--max-lease-attachments",
            DEFAULT_MAX_LEASE_ATTACHMENTS,
        ),
        max_lock_waiters=positive_int(
            value("max_lock_waiters"), "--max-lock-waiters", DEFAULT_MAX_LOCK_WAITERS
        ),
        max_lock_wait=positive_float(
            value("max_lock_wait"), "--max-lock-wait", DEFAULT_MAX_LOCK_WAIT
        ),
    )
