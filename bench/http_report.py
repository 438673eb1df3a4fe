"""The HTTP benchmark's outputs: the runs table, the comparisons (bench/http_compare.py)
as text and HTML, bench/results/http.json and a self-contained http.html (tables + an
inline SVG chart)."""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.http_compare import (
    METRICS,
    WORKLOADS,
    Comparison,
    Targets,
    compare,
    issue19_targets,
    missing_targets,
    no_targets,
    secure_targets,
)
from bench.loadgen import Result
from bench.systems import (
    ETCD,
    ETCD_GRPC,
    LABELS,
    RKV,
    RKV_SECURE,
    RKV_WORKERS,
    SYSTEMS,
    TRIVIAL,
    WORKERS,
)

COLORS = {
    RKV: "#2a6fb5",
    RKV_WORKERS: "#1f4e80",
    ETCD_GRPC: "#b5452a",
    RKV_SECURE: "#7fa8d6",
    ETCD: "#e07b39",
    TRIVIAL: "#9a9a9a",
}
HEADER = (
    *("system", "workload", "conns", "gen", "ops/s"),
    *("p50 ms", "p99 ms", "errors", "elections", "target", "result"),
)


@dataclass(frozen=True)
class Section:
    """One comparison table: ``mine`` against ``other``."""

    key: str  # its name in http.json
    title: str
    mine: str
    other: str
    targets: Targets


SECTIONS = (
    Section(
        "rkv_vs_etcd_grpc",
        "rkv against etcd's gRPC client (clientv3): issue 19's targets",
        RKV,
        ETCD_GRPC,
        issue19_targets,
    ),
    Section(
        "rkv_workers_vs_etcd_grpc",
        f"rkv with {WORKERS} HTTP workers per node against etcd's gRPC client: issue 19's targets",
        RKV_WORKERS,
        ETCD_GRPC,
        issue19_targets,
    ),
    Section(
        "rkv_vs_etcd_gateway",
        "second reference: rkv against etcd's JSON gateway (both with wrk); no target",
        RKV,
        ETCD,
        no_targets,
    ),
    Section(
        "rkv_vs_trivial",
        "rkv against the trivial aiohttp server (the ceiling for Python here); no target",
        RKV,
        TRIVIAL,
        no_targets,
    ),
    Section(
        "tls_auth_cost",
        "the cost of TLS + token auth: rkv_secure against rkv (issue 16)",
        RKV_SECURE,
        RKV,
        secure_targets,
    ),
)


@dataclass(frozen=True)
class Target:
    """An absolute floor for an rkv row, kept from the benchmark's first targets."""

    metric: str  # "ops" (at least) or "p50" (at most, ms)
    bound: float

    def met(self, result: Result) -> bool:
        if result.error_count:
            return False  # a run with errors never passes
        if self.metric == "ops":
            return result.ops >= self.bound
        return result.p50_ms <= self.bound

    def text(self) -> str:
        return f">= {self.bound:,.0f}/s" if self.metric == "ops" else f"p50 <= {self.bound:g} ms"


TARGETS = {
    ("put", 64): Target("ops", 3000),
    ("get_linearizable", 64): Target("ops", 3000),
    ("get_stale", 64): Target("ops", 6000),
    ("put", 1): Target("p50", 5.0),
}


def row_status(result: Result) -> tuple[str, str]:
    """(target text, PASS/MISS) for an rkv row, blanks for the others."""
    target = TARGETS.get((result.load.workload, result.load.connections))
    if result.load.system != RKV or target is None:
        return "", ""
    return target.text(), "PASS" if target.met(result) else "MISS"


def count(number: int | None) -> str:
    return "-" if number is None else f"{number:,}" + (" !" if number else "")


def cells(result: Result) -> tuple[str, ...]:
    gen = "python*" if result.generator == "python" else result.generator
    return (
        LABELS[result.load.system],
        WORKLOADS[result.load.workload],
        str(result.load.connections),
        gen,
        f"{result.ops:,.0f}",
        f"{result.p50_ms:.2f}",
        f"{result.p99_ms:.2f}",
        count(result.error_count),
        count(result.elections),
        *row_status(result),
    )


def section_header(section: Section) -> tuple[str, ...]:
    mine, other = LABELS[section.mine], LABELS[section.other]
    return (
        *("workload", "conns", "metric", mine, other, f"{section.mine}/{section.other}"),
        *("target", "result", "errors", "elections"),
    )


def number(metric: str, amount: float | None) -> str:
    if amount is None:
        return "-"
    return f"{amount:,.0f}" if metric == "ops" else f"{amount:.2f}"


def comparison_cells(c: Comparison) -> tuple[str, ...]:
    def pair(a: int | None, b: int | None) -> str:
        return f"{'-' if a is None else a} / {'-' if b is None else b}"

    return (
        WORKLOADS[c.workload],
        str(c.connections),
        METRICS[c.metric],
        number(c.metric, c.mine),
        number(c.metric, c.other),
        "-" if c.ratio is None else f"{c.ratio:.2f}",
        c.target,
        c.status,
        pair(c.mine_errors, c.other_errors),
        pair(c.mine_elections, c.other_elections),
    )


def format_table(header: tuple[str, ...], lines: list[tuple[str, ...]], left: int = 2) -> str:
    """Columns before ``left`` are left-aligned, the rest right-aligned."""
    rows = [header, *lines]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]

    def fmt(row: tuple[str, ...]) -> str:
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )

    return "\n".join([fmt(header), "  ".join("-" * w for w in widths), *map(fmt, lines)])


def warnings(results: list[Result]) -> list[str]:
    notes = []
    for r in results:
        if r.error_count:
            kinds = ", ".join(f"{k} {v:,}" for k, v in r.errors.items())
            notes.append(
                f"ERRORS in {r.load.system} {WORKLOADS[r.load.workload]} "
                f"({r.load.connections} conns): {kinds}"
            )
        if r.elections:
            notes.append(
                f"ELECTIONS in {r.load.system} {WORKLOADS[r.load.workload]} "
                f"({r.load.connections} conns): {r.elections}"
            )
    if any(r.generator == "python" for r in results):
        notes.append(
            "python* = the aiohttp closed-loop generator ran instead of wrk (a far lower ceiling)"
        )
    missing = missing_targets(results, RKV, ETCD_GRPC, issue19_targets)
    if missing and any(r.load.system in (RKV, ETCD_GRPC) for r in results):
        notes.append("issue 19 targets not measured in this run: " + "; ".join(missing))
    return notes


def section_text(results: list[Result], section: Section) -> str | None:
    rows = compare(results, section.mine, section.other, section.targets)
    if not rows:
        return None
    table = format_table(section_header(section), [comparison_cells(c) for c in rows], left=1)
    return f"{section.title}\n{table}"


def text_report(results: list[Result]) -> str:
    parts = [format_table(HEADER, [cells(r) for r in results])]
    parts += [t for t in (section_text(results, s) for s in SECTIONS) if t is not None]
    notes = warnings(results)
    return "\n\n".join(parts + (["\n".join(notes)] if notes else []))


def report_dict(results: list[Result], meta: dict[str, Any]) -> dict[str, Any]:
    def row(r: Result) -> dict[str, Any]:
        target, status = row_status(r)
        load = asdict(r.load)
        return load | {
            "generator": r.generator,
            "requests": r.requests,
            "seconds": r.seconds,
            "ops_per_s": r.ops,
            "p50_ms": r.p50_ms,
            "p99_ms": r.p99_ms,
            "errors": r.errors,
            "elections": r.elections,
            "target": target,
            "status": status,
            "generator_output": r.raw,
        }

    comparisons = {
        s.key: [asdict(c) for c in compare(results, s.mine, s.other, s.targets)] for s in SECTIONS
    }
    return {
        "meta": meta,
        "targets": {f"{w} {c} conns": asdict(t) for (w, c), t in TARGETS.items()},
        "rows": [row(r) for r in results],
        "comparisons": comparisons,
        "warnings": warnings(results),
    }


CHART = {"label_w": 260, "bar_w": 520, "bar_h": 14, "gap": 3, "group_gap": 14, "top": 34}
TARGET_STROKE = 'stroke="#222" stroke-width="2" stroke-dasharray="3 2"'


def bar_chart(results: list[Result]) -> str:
    """Inline SVG: per (workload, conns) one bar per system that ran it (ops/s), dashed:
    rkv's absolute target."""
    systems = [s for s in SYSTEMS if any(r.load.system == s for r in results)]
    groups = list(dict.fromkeys((r.load.workload, r.load.connections) for r in results))
    found = {(r.load.system, r.load.workload, r.load.connections): r for r in results}
    bounds = [t.bound for t in TARGETS.values() if t.metric == "ops"]
    scale = max([r.ops for r in results] + bounds) * 1.15
    parts, y = [*_legend(systems)], CHART["top"]
    for workload, conns in groups:
        bars = [found[s, workload, conns] for s in systems if (s, workload, conns) in found]
        parts += _group((workload, conns), bars, y, scale)
        y += len(bars) * (CHART["bar_h"] + CHART["gap"]) + CHART["group_gap"]
    width = CHART["label_w"] + CHART["bar_w"] + 90
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" '
        'font-family="sans-serif" font-size="12">'
    )
    return "\n".join([head, *parts, "</svg>"])


def _legend(systems: list[str]) -> list[str]:
    parts, x = [], 10
    for system in systems:
        parts.append(f'<rect x="{x}" y="6" width="12" height="12" fill="{COLORS[system]}"/>')
        parts.append(f'<text x="{x + 16}" y="16">{html.escape(LABELS[system])}</text>')
        x += 22 + 7 * len(LABELS[system])
    parts.append(f'<line x1="{x + 6}" y1="4" x2="{x + 6}" y2="20" {TARGET_STROKE}/>')
    parts.append(f'<text x="{x + 16}" y="16">rkv target</text>')
    return parts


def _group(group: tuple[str, int], bars: list[Result], y0: int, scale: float) -> list[str]:
    workload, conns = group
    left, bar_h, step = CHART["label_w"], CHART["bar_h"], CHART["bar_h"] + CHART["gap"]
    title = html.escape(f"{WORKLOADS[workload]}, {conns} conn{'s' if conns > 1 else ''}")
    parts = [f'<text x="{left - 8}" y="{y0 + 12}" text-anchor="end">{title}</text>']
    target = TARGETS.get(group)
    target_x = 0.0
    if target is not None and target.metric == "ops":
        target_x = left + CHART["bar_w"] * target.bound / scale
    for i, result in enumerate(bars):
        system, y = result.load.system, y0 + i * step
        width = CHART["bar_w"] * result.ops / scale
        label_x = max(left + width, target_x if system == RKV else 0.0) + 5
        parts.append(
            f'<rect x="{left}" y="{y}" width="{width:.1f}" height="{bar_h}" '
            f'fill="{COLORS[system]}"/>'
        )
        parts.append(f'<text x="{label_x:.1f}" y="{y + 11}">{result.ops:,.0f}/s</text>')
        if system == RKV and target_x:
            parts.append(f'<line x1="{target_x:.1f}" y1="{y - 2}" x2="{target_x:.1f}" '
                         f'y2="{y + bar_h + 2}" {TARGET_STROKE}/>')  # fmt: skip
    return parts


def html_table(header: tuple[str, ...], lines: list[tuple[str, ...]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in line) + "</tr>" for line in lines
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def section_html(results: list[Result], section: Section) -> str:
    rows = compare(results, section.mine, section.other, section.targets)
    if not rows:
        return ""
    table = html_table(section_header(section), [comparison_cells(c) for c in rows])
    return f"<h2>{html.escape(section.title)}</h2>{table}"


def render_html(results: list[Result], meta: dict[str, Any]) -> str:
    about = "".join(f"<li>{html.escape(k)}: {html.escape(str(v))}</li>" for k, v in meta.items())
    notes = "".join(f"<p class=warn>{html.escape(w)}</p>" for w in warnings(results))
    rows = html_table(HEADER, [cells(r) for r in results])
    sections = "\n".join(section_html(results, s) for s in SECTIONS)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>rkv HTTP benchmark</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;margin:1em 0}}
th,td{{border:1px solid #ccc;padding:3px 10px;text-align:right}}
th:first-child,td:first-child,td:nth-child(2){{text-align:left}}.warn{{color:#b00}}</style>
</head><body><h1>rkv HTTP benchmark</h1><ul>{about}</ul>{notes}
<p>Ratios are rkv / the other system: for ops/s above 1 means rkv is faster, for a latency
below 1 means rkv is quicker. A target is met only by a row with no errors and no
election during its load.</p>
<h2>Runs</h2>{rows}
{sections}
<h2>Throughput (ops/s; dashed: rkv's absolute target)</h2>
{bar_chart(results)}
</body></html>
"""


def write_results(out: Path, results: list[Result], meta: dict[str, Any]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "http.json", out / "http.html"]
    paths[0].write_text(json.dumps(report_dict(results, meta), indent=2) + "\n")
    paths[1].write_text(render_html(results, meta))
    return paths
