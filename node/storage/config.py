"""Storage settings of one node, as plain validated values.

The composition root builds these from flags and RKV_* variables; nothing in
the core reads the environment.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from node.errors import ConfigError
from node.keyspace import DEFAULT_MAX_VALUE_BYTES


class FsyncPolicy(enum.Enum):
    """When the commit log calls fsync.

    ``ALWAYS``: after every append (every applied entry). Simplest and slowest.
    ``ON_SYNC``: only when the owner calls :meth:`CommitLog.sync` (the raft
    layer does so at its durability point, once per group of entries, before
    any client is told a write succeeded), and when a segment is closed.
    """

    ALWAYS = "always"
    ON_SYNC = "on_sync"


DEFAULT_RESULTS_CACHE_BYTES = 8 * 1024 * 1024
"""The most bytes of applied entries' results a node keeps for entries raft delivers
again (node/state/machine.py)."""


@dataclass(frozen=True, slots=True)
class StorageConfig:
    segment_bytes: int = 64 * 1024 * 1024
    index_interval_bytes: int = 4096
    fsync: FsyncPolicy = FsyncPolicy.ALWAYS
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES
    lmdb_map_size: int = 256 * 1024 * 1024
    results_cache_bytes: int = DEFAULT_RESULTS_CACHE_BYTES

    def __post_init__(self) -> None:
        if self.segment_bytes < 4096:
            raise ConfigError(f"segment_bytes must be at least 4096, not {self.segment_bytes}")
        if not 64 <= self.index_interval_bytes <= self.segment_bytes:
            raise ConfigError(
                f"index_interval_bytes must be between 64 and segment_bytes, "
                f"not {self.index_interval_bytes}"
            )
        if not 1 <= self.max_value_bytes <= 64 * 1024 * 1024:
            raise ConfigError(
                f"max_value_bytes must be between 1 and 64 MiB, not {self.max_value_bytes}"
            )
        if self.results_cache_bytes < 0:
            raise ConfigError(
                f"results_cache_bytes must not be negative, not {self.results_cache_bytes}"
            )
        if self.lmdb_map_size < 1024 * 1024:
            raise ConfigError(f"lmdb_map_size must be at least 1 MiB, not {self.lmdb_map_size}")
