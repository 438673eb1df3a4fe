"""HTTP request metrics of the worker processes, added into main's /metrics.

A worker counts the requests it serves itself in its own process
(``rkv_http_requests_total``, ``rkv_http_request_duration_seconds``) and sends
main, every :data:`SHIP_SECONDS`, what grew since its last message; main adds
that into the same counters and histogram buckets, so a scrape of the node sees
every request once, whichever process served it (a request a worker forwards is
counted by main only). At most the last interval of a worker that dies is lost.
"""

from __future__ import annotations

import itertools
from typing import Any

from node import metrics

SHIP_SECONDS = 1.0

_Key = tuple[str, ...]


class MetricDeltas:
    """The worker side: what its counters hold beyond what it last shipped."""

    def __init__(self) -> None:
        self._requests: dict[_Key, float] = {}
        self._buckets: dict[_Key, list[float]] = {}
        self._sums: dict[_Key, float] = {}

    def take(self) -> dict[str, Any] | None:
        """The deltas as a link message body, or None when nothing grew."""
        requests: list[list[Any]] = []
        durations: list[list[Any]] = []
        for family in metrics.HTTP_REQUESTS.collect():
            for sample in family.samples:
                if not sample.name.endswith("_total"):
                    continue
                labels = sample.labels
                key: _Key = (labels["method"], labels["route"], labels["code"])
                grown = sample.value - self._requests.get(key, 0.0)
                if grown:
                    self._requests[key] = sample.value
                    requests.append([*key, grown])
        cumulative: dict[_Key, list[float]] = {}
        sums: dict[_Key, float] = {}
        for family in metrics.HTTP_DURATION.collect():
            for sample in family.samples:
                route: _Key = (sample.labels["method"], sample.labels["route"])
                if sample.name.endswith("_bucket"):
                    cumulative.setdefault(route, []).append(sample.value)
                elif sample.name.endswith("_sum"):
                    sums[route] = sample.value
        for route, counts in cumulative.items():
            per_bucket = [counts[0], *(b - a for a, b in itertools.pairwise(counts))]
            before = self._buckets.get(route, [0.0] * len(per_bucket))
            grown_buckets = [now - then for now, then in zip(per_bucket, before, strict=True)]
            if any(grown_buckets):
                grown_sum = sums.get(route, 0.0) - self._sums.get(route, 0.0)
                durations.append([*route, grown_buckets, grown_sum])
                self._buckets[route] = per_bucket
                self._sums[route] = sums.get(route, 0.0)
        if not requests and not durations:
            return None
        return {"requests": requests, "durations": durations}


def add_deltas(body: dict[str, Any]) -> None:
    """Main's side: add a worker's deltas into this process's metrics."""
    if not metrics.enabled:
        return
    for method, route, code, grown in body.get("requests", ()):
        metrics.HTTP_REQUESTS.labels(method, route, code).inc(grown)
    for method, route, buckets, grown_sum in body.get("durations", ()):
        child = metrics.HTTP_DURATION.labels(method, route)
        # prometheus_client has no public way to add observations in bulk: its
        # per-bucket values and sum are what observe() itself increments.
        for value, grown in zip(child._buckets, buckets, strict=False):
            if grown:
                value.inc(grown)
        child._sum.inc(grown_sum)
