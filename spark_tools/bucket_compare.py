"""Phase two for one key-range bucket: the replicas' bucket files merged side by
side (one open reader per replica, keys in LMDB order, one key per replica in
memory) and every key whose replicas disagree classified. Shared by both
engines: the Python engine runs it bucket after bucket, the Spark engine in
executor tasks, a wave of buckets at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from spark_tools.divergence import DivergenceRow, Observation, divergence_rows
from spark_tools.export_reading import read_state


def merge_bucket(bucket: int, paths: Sequence[Path], emit: Callable[[DivergenceRow], None]) -> int:
    """Emit the bucket's divergence rows in key order; return its number of
    distinct keys across the replicas (``paths``: its file on each replica)."""
    n = len(paths)
    readers = [read_state(path) for path in paths]
    heads = [next(reader, None) for reader in readers]
    count = 0
    while True:
        present = [h.sort_key for h in heads if h is not None]
        if not present:
            return count
        order = min(present)
        observations: list[Observation] = [None] * n
        key = b""
        for i, h in enumerate(heads):
            if h is not None and h.sort_key == order:
                observations[i] = (h.version, h.value_sha)
                key = h.key
                heads[i] = next(readers[i], None)
        count += 1
        for row in divergence_rows(bucket, key, order, observations):
            emit(row)


class ComparedBucket(NamedTuple):
    bucket: int
    keys: int
    rows: list[DivergenceRow]


def compare_bucket_task(task: tuple[int, list[str]]) -> ComparedBucket:
    """merge_bucket in an executor: (bucket, its file paths) -> its rows and count."""
    bucket, paths = task
    rows: list[DivergenceRow] = []
    keys = merge_bucket(bucket, [Path(p) for p in paths], rows.append)
    return ComparedBucket(bucket, keys, rows)
