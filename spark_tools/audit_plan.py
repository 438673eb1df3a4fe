"""What an audit reads: the replicas' exports at one cut, as tasks for an engine,
and the interface every engine implements."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from spark_tools.divergence import DivergenceRow, ReplayRow
from spark_tools.export_layout import Manifest, ReplicaExport
from spark_tools.export_reading import sort_key
from spark_tools.export_scan import LogScan, LogScanTask, StateScan, StateScanTask
from spark_tools.findings import LogAgreement
from spark_tools.progress import Progress


@dataclass(frozen=True)
class AuditPlan:
    """Complete exports of two or more replicas at one raft index, same split points.

    Replicas are numbered by their position in ``replicas`` (sorted ids).
    """

    exports: tuple[ReplicaExport, ...]
    raft_index: int
    split_points: tuple[bytes, ...]
    check_logs: bool

    @property
    def replicas(self) -> list[str]:
        return [e.replica for e in self.exports]

    @property
    def buckets(self) -> int:
        return len(self.split_points) + 1

    @property
    def split_sort_keys(self) -> list[bytes]:
        return [sort_key(k) for k in self.split_points]

    def manifest(self, replica: int) -> Manifest:
        manifest = self.exports[replica].manifest
        assert manifest is not None
        return manifest

    def state_task(self, replica: int, bucket: int) -> StateScanTask:
        manifest = self.manifest(replica)
        splits = self.split_sort_keys
        return StateScanTask(
            replica=replica,
            bucket=bucket,
            path=str(self.exports[replica].state_path(bucket)),
            raft_index=manifest.raft_index,
            applied_offset=manifest.applied_offset,
            expected_count=manifest.bucket_counts[bucket],
            expected_digest=manifest.bucket_digests[bucket],
            low=splits[bucket - 1] if bucket > 0 else None,
            high=splits[bucket] if bucket < len(splits) else None,
        )

    def state_tasks(self, buckets: Sequence[int] | None = None) -> list[StateScanTask]:
        chosen = range(self.buckets) if buckets is None else buckets
        return [self.state_task(r, b) for b in chosen for r in range(len(self.exports))]

    @property
    def log_replicas(self) -> list[int]:
        """The replicas whose logs are checked (all that exported one, unless skipped)."""
        if not self.check_logs:
            return []
        return [i for i, e in enumerate(self.exports) if e.log_path is not None]

    def log_task(self, replica: int) -> LogScanTask:
        manifest = self.manifest(replica)
        path = self.exports[replica].log_path
        assert path is not None
        return LogScanTask(replica, str(path), manifest.applied_offset, manifest.log_records)


Pair = tuple[int, int]
"""(replica position, bucket)."""


class AuditEngine(Protocol):
    """Runs the data-heavy parts of an audit; the driver-side logic is shared."""

    def describe(self) -> dict[str, Any]:
        """The report's ``engine`` field."""

    def scan(self, plan: AuditPlan, progress: Progress) -> tuple[list[StateScan], list[LogScan]]:
        """Phase one over every bucket file and every checked log."""

    def replay_fingerprints(self, plan: AuditPlan) -> dict[Pair, tuple[int, int]]:
        """(key count, fingerprint) of each (replica, bucket) of the log replays;
        pairs the replay leaves empty may be absent."""

    def replay_rows(
        self, plan: AuditPlan, pairs: list[Pair], emit: Callable[[ReplayRow], None]
    ) -> None:
        """Every key of ``pairs`` where state and replay differ, ordered by
        (replica, bucket, key)."""

    def log_agreement(self, plan: AuditPlan, replicas: list[int]) -> LogAgreement:
        """The logs of ``replicas`` compared offset by offset."""

    def compare_buckets(
        self,
        plan: AuditPlan,
        buckets: list[int],
        emit: Callable[[DivergenceRow], None],
        progress: Progress,
    ) -> dict[int, int]:
        """Emit the divergence rows of ``buckets`` ordered by (bucket, key, seq);
        return each bucket's number of distinct keys across the replicas."""

    def close(self) -> None:
        """Release what the engine holds (temporary files; a session it started)."""
