"""What an engine found, and the collectors that summarise its ordered findings.

An engine hands the divergence rows (ordered by bucket, key, then the row's
sequence) and the replay rows (ordered by replica, bucket, key) to these
collectors on the driver; the counts, the samples and the Parquet file are
therefore computed by the same code whichever engine produced the rows.
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from spark_tools.divergence import (
    CLASSES,
    REPLAY_CLASSES,
    REPLICA_CLASSES,
    DivergenceRow,
    Observation,
    ReplayRow,
)
from spark_tools.export_reading import LogItem


def key_json(key: bytes) -> dict[str, Any]:
    """A key for the report: base64 always, and the text when it is printable UTF-8."""
    try:
        text: str | None = key.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and not text.isprintable():
        text = None
    return {"key": base64.b64encode(key).decode("ascii"), "key_utf8": text}


def observation_json(observation: Observation) -> dict[str, Any] | None:
    if observation is None:
        return None
    return {"version": observation[0], "value_sha256": observation[1]}


@dataclass
class StateFindings:
    """The cross-replica comparison of the buckets whose digests differ."""

    divergent_keys: int = 0
    divergences: int = 0
    by_class: Counter[str] = field(default_factory=Counter)
    by_replica: dict[int, Counter[str]] = field(default_factory=dict)
    by_bucket: dict[int, dict[str, int]] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)


class DivergenceCollector:
    """Counts divergence rows, keeps the first ``samples`` keys, forwards every row."""

    def __init__(
        self,
        replicas: Sequence[str],
        samples: int,
        sink: Callable[[DivergenceRow], None] | None = None,
    ) -> None:
        self._replicas = list(replicas)
        self._samples = samples
        self._sink = sink
        self._last: tuple[int, bytes, bytes] | None = None
        self._in_sample = False
        self.findings = StateFindings(
            by_replica={i: Counter() for i in range(len(replicas))},
        )

    def add(self, row: DivergenceRow) -> None:
        found = self.findings
        identity = (row.bucket, row.sort_key, row.key)
        bucket = found.by_bucket.setdefault(row.bucket, {"divergent_keys": 0})
        if identity != self._last:
            self._last = identity
            found.divergent_keys += 1
            bucket["divergent_keys"] += 1
            if len(found.samples) < self._samples:
                found.samples.append(
                    {
                        **key_json(row.key),
                        "bucket": row.bucket,
                        "findings": [],
                        "replicas": {
                            name: observation_json(row.observations[i])
                            for i, name in enumerate(self._replicas)
                        },
                    }
                )
            self._in_sample = found.divergent_keys <= self._samples
        found.divergences += 1
        found.by_class[row.klass] += 1
        bucket[row.klass] = bucket.get(row.klass, 0) + 1
        if row.replica is not None:
            found.by_replica[row.replica][row.klass] += 1
        if self._in_sample:
            found.samples[-1]["findings"].append(
                {
                    "class": row.klass,
                    "replica": None if row.replica is None else self._replicas[row.replica],
                }
            )
        if self._sink is not None:
            self._sink(row)

    def summary(self) -> dict[str, Any]:
        found = self.findings
        return {
            "by_class": {c: found.by_class[c] for c in CLASSES},
            "by_replica": {
                name: {c: found.by_replica[i][c] for c in REPLICA_CLASSES}
                for i, name in enumerate(self._replicas)
            },
            "by_bucket": [
                {
                    "bucket": b,
                    "divergent_keys": counts["divergent_keys"],
                    "by_class": {c: counts.get(c, 0) for c in CLASSES},
                }
                for b, counts in sorted(found.by_bucket.items())
            ],
            "samples": found.samples,
        }


@dataclass
class ReplayFindings:
    mismatched_keys: int = 0
    by_class: Counter[str] = field(default_factory=Counter)
    samples: list[dict[str, Any]] = field(default_factory=list)


class ReplayCollector:
    """Counts replay rows per replica and keeps each replica's first ``samples`` keys."""

    def __init__(self, replicas: Sequence[str], samples: int) -> None:
        self._replicas = list(replicas)
        self._samples = samples
        self.findings = {i: ReplayFindings() for i in range(len(replicas))}

    def add(self, row: ReplayRow) -> None:
        found = self.findings[row.replica]
        found.mismatched_keys += 1
        found.by_class[row.klass] += 1
        if len(found.samples) < self._samples:
            found.samples.append(
                {
                    **key_json(row.key),
                    "bucket": row.bucket,
                    "class": row.klass,
                    "state": observation_json(row.state),
                    "log": observation_json(row.log),
                }
            )

    def summary(self, replica: int) -> dict[str, Any]:
        found = self.findings[replica]
        return {
            "mismatched_keys": found.mismatched_keys,
            "by_class": {c: found.by_class[c] for c in REPLAY_CLASSES},
            "samples": found.samples,
        }


@dataclass
class LogAgreement:
    """The replicas' logs compared offset by offset (offsets held by two or more)."""

    replicas: list[int]
    offsets_compared: int = 0
    divergent_offsets: int = 0
    first_offset: int | None = None
    first_records: dict[int, LogItem | None] = field(default_factory=dict)


def log_item_json(item: LogItem | None) -> dict[str, Any] | None:
    if item is None:
        return None
    return {
        "raft_index": item.raft_index,
        "op": {1: "put", 2: "delete"}.get(item.op, str(item.op)),
        **key_json(item.key),
        "value_sha256": item.value_sha,
    }
