"""A node's space flags (and RKV_* variables): its quota and how often it measures.

``--quota-bytes N`` (RKV_QUOTA_BYTES): the most bytes the node's data (commit log,
LMDB, raft journal) may take before it raises a NOSPACE alarm; 0 turns the quota
off (a full disk still raises it); by default half the size of the data
directory's filesystem at start-up (node/service/space.py says why).
``--nospace-free-bytes N`` (RKV_NOSPACE_FREE_BYTES, 32 MiB, at least 1 MiB): the
alarm is raised too when the data directory's filesystem has less free space,
before a write meets ENOSPC. ``--space-check-interval S``
(RKV_SPACE_CHECK_INTERVAL, 5): seconds between measurements.

Parsed by node/cli/settings.py, which owns the environment.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from node.errors import ConfigError
from node.service.space import (
    DEFAULT_FREE_FLOOR,
    DEFAULT_QUOTA_FRACTION,
    DEFAULT_SPACE_CHECK_INTERVAL,
    MIN_FREE_FLOOR,
)


@dataclass(frozen=True, slots=True)
class SpaceSettings:
    quota_bytes: int | None = None
    """None: the default, a fraction of the filesystem measured at start-up; 0: none."""
    check_interval: float = DEFAULT_SPACE_CHECK_INTERVAL
    free_floor: int = DEFAULT_FREE_FLOOR


def add_space_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--quota-bytes",
        help="most bytes this node's data (commit log, LMDB, raft journal) may take; "
        "past it the node raises a NOSPACE alarm and the cluster refuses writes that add "
        "data until it is disarmed; 0: no quota (RKV_QUOTA_BYTES, default "
        f"{DEFAULT_QUOTA_FRACTION:.0%} of the data directory's filesystem size)",
    )
    add(
        "--nospace-free-bytes",
        help="raise the NOSPACE alarm also while the data directory's filesystem has "
        f"less free space than this, at least {MIN_FREE_FLOOR // 1024 // 1024} MiB "
        f"(RKV_NOSPACE_FREE_BYTES, {DEFAULT_FREE_FLOOR // 1024 // 1024} MiB)",
    )
    add(
        "--space-check-interval",
        help="seconds between measurements of the data's size and the disk's free "
        f"space (RKV_SPACE_CHECK_INTERVAL, {DEFAULT_SPACE_CHECK_INTERVAL:g})",
    )


def space_settings(
    value: Callable[[str], str | None], positive_float: Callable[[str | None, str, float], float]
) -> SpaceSettings:
    """The flags, read through settings.py's ``value(name)`` and number parser."""
    quota = value("quota_bytes")
    if quota is not None and not (quota.isascii() and quota.isdigit()):
        raise ConfigError(f"--quota-bytes must be a whole number of bytes, not {quota!r:.40}")
    interval = positive_float(
        value("space_check_interval"), "--space-check-interval", DEFAULT_SPACE_CHECK_INTERVAL
    )
    floor = value("nospace_free_bytes")
    if floor is not None and not (floor.isascii() and floor.isdigit()):
        raise ConfigError(
            f"--nospace-free-bytes must be a whole number of bytes, not {floor!r:.40}"
        )
    if floor is not None and int(floor) < MIN_FREE_FLOOR:
        raise ConfigError(f"--nospace-free-bytes must be at least {MIN_FREE_FLOOR}, not {floor}")
    return SpaceSettings(
        None if quota is None else int(quota),
        interval,
        DEFAULT_FREE_FLOOR if floor is None else int(floor),
    )
