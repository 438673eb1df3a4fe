"""Elections during a run: each member's leader-change counter on /metrics, before and after.

rkv counts ``rkv_server_leader_changes_seen_total`` and etcd
``etcd_server_leader_changes_seen_total``: each member adds one whenever it sees a new
leader. The elections of a run are the largest increase on any member (every member
sees the same change, so the members are not added up).
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from bench.support import http_request

Counts = dict[str, float]  # member URL -> counter value


def counter_value(exposition: str, sample: str) -> float | None:
    """The value of the sample named ``sample`` (no labels) in Prometheus text, or None."""
    try:
        for family in text_string_to_metric_families(exposition):
            for found in family.samples:
                if found.name == sample and not found.labels:
                    return float(found.value)
    except ValueError:
        return None
    return None


def read_counts(members: tuple[str, ...], sample: str) -> Counts:
    """Each reachable plain-HTTP member's counter (https members are left out)."""
    counts: Counts = {}
    for url in members:
        if not url.startswith("http://"):
            continue
        status, body = http_request(f"{url}/metrics")
        value = counter_value(body.decode(errors="replace"), sample) if status == 200 else None
        if value is not None:
            counts[url] = value
    return counts


def elections_between(before: Counts, after: Counts) -> int | None:
    """The largest increase on a member read both times; None when none was."""
    increases = [after[url] - value for url, value in before.items() if url in after]
    return int(max(increases)) if increases else None
