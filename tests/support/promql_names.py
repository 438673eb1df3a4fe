"""The metric names a PromQL expression reads, and the series names an rkv node exposes.

For the tests that check the alert rules and the Grafana dashboard against the registry:
an expression may only read series a node serves. The name extraction is a small lexer,
not a PromQL parser: it drops strings, label matchers ``{...}``, ranges ``[...]``, the
label lists of ``by``/``without``/``on``/``ignoring``/``group_*``, function names and
keywords; what is left are metric names.
"""

from __future__ import annotations

import re

from node import metrics
from node.cli.node_metrics import SCRAPED
from replication.redis.metrics import SCRAPED as REPLICATOR_SCRAPED
from replication.redis.metrics import ReplicatorMetrics

_KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
    "atan2",
    "group_left",
    "group_right",
}
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_STRING = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_GRAFANA_VARIABLE = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")
_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "info": ("_info",),
}


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` reads."""
    text = _STRING.sub(" ", expr)
    text = _GRAFANA_VARIABLE.sub("1", text)  # $__rate_interval, ${instance}...
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _LABEL_LIST.sub(" ", text)
    text = re.sub(r"(?<![A-Za-z0-9_:])[0-9][0-9A-Za-z_.]*", " ", text)  # 0.99, 5m, 1e3
    names: set[str] = set()
    for match in _IDENT.finditer(text):
        word = match.group()
        after = text[match.end() :].lstrip()
        if after.startswith("(") or word.lower() in _KEYWORDS:
            continue  # a function or an aggregation
        names.add(word)
    return names


def exposed_series() -> set[str]:
    """Every series name a node's /metrics can carry (histograms: _bucket, _sum, _count)."""
    kinds: dict[str, str] = {}
    for family in metrics.REGISTRY.collect():
        kinds[family.name] = family.type
    for name, (kind, _) in SCRAPED.items():
        kinds[name] = kind
    return _series(kinds)


def replicator_series() -> set[str]:
    """Every series name the Redis replicator's /metrics can carry."""
    kinds = {family.name: family.type for family in ReplicatorMetrics().registry.collect()}
    kinds.update(dict.fromkeys(REPLICATOR_SCRAPED, "gauge"))
    return _series(kinds)


def _series(kinds: dict[str, str]) -> set[str]:
    return {name + suffix for name, kind in kinds.items() for suffix in _SUFFIXES[kind]}
