"""The capacity benchmark's shared model: its constants, the dataclasses holding a
row's results (Load, Disk, Reads, Rebuild, Row), the targets and the memory formula of
docs/OPERATIONS.md; used by bench/capacity.py and bench/capacity_report.py."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# The memory formula of docs/OPERATIONS.md, section "Memory": keep these in step with it.
BASE_BYTES = 100 * 2**20  # interpreter, libraries and buffers ("about 100 MB")
JOURNAL_INDEX_BYTES = 24 * 5000  # 24 B of index per raft entry, --raft-compaction-entries 5000
RESULTS_CACHE_BYTES = 8 * 2**20  # --results-cache-bytes default
PRODUCER_STATES_BYTES = 100_000 * 300  # 100,000 producers, a few hundred bytes each
REQUEST_COPIES = 4  # a write request in flight: its body, the decoded JSON, the commands, the entry
ENTRIES_IN_FLIGHT = 4  # raft entries the leader has in flight to each follower
SEND_COPIES = 2.5  # an entry being sent, per follower: pickled and encrypted copies
FOLLOWERS = 2

NODES = 3
PUTS_PER_TXN = 1000
IN_FLIGHT = 8
READ_THREADS = 8
SAMPLE_KEYS = 1000
HOT_EVERY = 100  # the hot keys: every 100th key, 1% of them
HOT_SHARE = 0.9  # of the skewed reads
SAMPLE_INTERVAL_S = 0.5
READ_SECONDS = 10.0
QUICK_READ_SECONDS = 3.0
DEFAULT_MULTIPLES = (4, 10)
QUICK_MULTIPLES = (1, 2)
TXN_ATTEMPTS = 10
START_TIMEOUT_S = 60.0
CATCH_UP_TIMEOUT_S = 900.0
REBUILD_TIMEOUT_S = 1800.0
PROGRESS_SECONDS = 5.0
TARGET_LOAD_MB_S = 20.0
TARGET_REBUILD_MB_S = 50.0
TARGET_DISK_RATIO = 2.5
CAUGHT_UP = re.compile(r"caught up: (\d+) records \(([\d.]+) MB\) pulled from (\S+) in ([\d.]+)s")
CATCHING_UP = re.compile(r"catching up: (.*)$", re.MULTILINE)
READ_KINDS = ("stale uniform", "stale skewed", "linearizable uniform", "linearizable skewed")
ALPHABET = "abcdefghijklmnopqrstuvwxyz"


def mib(n: float) -> float:
    return n / 2**20


# -- load ---------------------------------------------------------------------------


@dataclass
class Load:
    keys: int
    value_bytes_total: int  # the logical bytes of one replica's values
    kv_bytes_total: int  # key bytes + value bytes of one replica
    seconds: float
    largest_body_bytes: int
    retries: int
    leader_offset: int = 0
    sample_verified: int = 0

    @property
    def mb_per_s(self) -> float:
        return self.value_bytes_total / 1e6 / self.seconds

    @property
    def keys_per_s(self) -> float:
        return self.keys / self.seconds


# -- disk ---------------------------------------------------------------------------


@dataclass
class Disk:
    apparent: dict[str, int]
    allocated: dict[str, int]
    kv_bytes: int
    allocated_by_entry: dict[str, dict[str, int]]  # node -> top-level entry of its data dir

    @property
    def apparent_ratio(self) -> float:
        return max(self.apparent.values()) / self.kv_bytes

    @property
    def allocated_ratio(self) -> float:
        return max(self.allocated.values()) / self.kv_bytes


def disk_breakdown(disk: Disk) -> str:
    """Allocated MiB per top-level entry of the largest data directory."""
    node = max(disk.allocated, key=lambda n: disk.allocated[n])
    entries = sorted(disk.allocated_by_entry[node].items(), key=lambda e: -e[1])
    return f"{node}: " + ", ".join(f"{name} {mib(size):,.0f} MiB" for name, size in entries)


# -- reads --------------------------------------------------------------------------


@dataclass
class Reads:
    node: str
    seconds: float
    requests: int
    ok: int
    errors: int
    p50_ms: float
    p99_ms: float

    @property
    def per_s(self) -> float:
        return self.ok / self.seconds


# -- rebuild ------------------------------------------------------------------------


@dataclass
class Rebuild:
    node: str
    seconds: float
    ready_seconds: float
    target_offset: int
    value_bytes_total: int
    how: str  # the first "catching up: ..." line of its log
    records_pulled: int | None
    pulled_mb: float | None
    pull_seconds: float | None
    peak_rss_anon_mib: float
    sample_verified: int = 0

    @property
    def mb_per_s(self) -> float:
        return self.value_bytes_total / 1e6 / self.seconds


# -- one row ------------------------------------------------------------------------


def formula_bytes(largest_body_bytes: int) -> int:
    """The RSS bound of docs/OPERATIONS.md, section "Memory", for this load: IN_FLIGHT
    write requests at once, and entries no larger than their bodies."""
    return int(
        BASE_BYTES
        + JOURNAL_INDEX_BYTES
        + RESULTS_CACHE_BYTES
        + PRODUCER_STATES_BYTES
        + IN_FLIGHT * REQUEST_COPIES * largest_body_bytes
        + FOLLOWERS * ENTRIES_IN_FLIGHT * SEND_COPIES * largest_body_bytes
    )


@dataclass
class Row:
    multiple: int
    cap_mib: int
    value_bytes: int
    formula_mib: float
    load: Load | None = None
    disk: Disk | None = None
    reads: dict[str, Reads] = field(default_factory=dict)
    rebuild: Rebuild | None = None
    peak_rss_anon_mib: dict[str, float] = field(default_factory=dict)
    peak_charge_mib: dict[str, float] = field(default_factory=dict)
    peak_cgroup_anon_mib: dict[str, float] = field(default_factory=dict)
    oom_kills: int = 0
    alive: bool = False
    error: str | None = None

    def targets(self) -> dict[str, bool | None]:
        """Each target: met, missed, or None when not measured (the row failed first)."""
        rss = max(self.peak_rss_anon_mib.values(), default=None)
        return {
            "zero OOM kills, all alive": self.oom_kills == 0 and self.alive,
            "peak RssAnon <= formula": None if rss is None else rss <= self.formula_mib,
            f"rebuild >= {TARGET_REBUILD_MB_S:.0f} MB/s": (
                None if self.rebuild is None else self.rebuild.mb_per_s >= TARGET_REBUILD_MB_S
            ),
            f"load >= {TARGET_LOAD_MB_S:.0f} MB/s": (
                None if self.load is None else self.load.mb_per_s >= TARGET_LOAD_MB_S
            ),
            f"disk <= {TARGET_DISK_RATIO} B/B (allocated)": (
                None if self.disk is None else self.disk.allocated_ratio <= TARGET_DISK_RATIO
            ),
        }
