"""The HTTP benchmark's verdicts and outputs: the table, the rkv/etcd ratios against the
targets, bench/results/http.json and a self-contained http.html (table + inline SVG)."""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.loadgen import Result
from bench.systems import ETCD, RKV, RKV_SECURE, SYSTEMS, TRIVIAL

WORKLOADS = {
    "put": "PUT",
    "get_linearizable": "GET linearizable",
    "get_stale": "GET stale",
    "put_1conn": "PUT 1 conn",
}
COLORS = {RKV: "#2a6fb5", RKV_SECURE: "#7fa8d6", ETCD: "#e07b39", TRIVIAL: "#9a9a9a"}
HEADER = (
    *("system", "workload", "gen", "conns", "ops/s"),
    *("p50 ms", "p99 ms", "errors", "target", "result"),
)
RATIO_HEADER = ("workload", "rkv/etcd", "ratio of", "result", "rkv/trivial")
SECURE_HEADER = ("workload", "secure/plain", "ratio of", "cost", "result")
SECURE_TARGET = 0.8
"""Issue 16: TLS + token auth may cost at most 20 % of rkv's throughput."""


@dataclass(frozen=True)
class Target:
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
    "put": Target("ops", 3000),
    "get_linearizable": Target("ops", 3000),
    "get_stale": Target("ops", 6000),
    "put_1conn": Target("p50", 5.0),
}


@dataclass(frozen=True)
class Ratio:
    workload: str
    value: float | None  # > 1 means rkv is better; None when a run is missing
    basis: str  # what was divided
    status: str  # PASS | MISS | n/a
    of_trivial: float | None  # rkv's ops/s as a fraction of the trivial server's


def by_key(results: list[Result]) -> dict[tuple[str, str], Result]:
    return {(r.load.system, r.load.workload): r for r in results}


def row_status(result: Result) -> tuple[str, str]:
    """(target text, PASS/MISS) for an rkv row, blanks for the others."""
    target = TARGETS.get(result.load.workload)
    if result.load.system != RKV or target is None:
        return "", ""
    return target.text(), "PASS" if target.met(result) else "MISS"


def cells(result: Result) -> tuple[str, ...]:
    errors = f"{result.error_count:,} !" if result.error_count else "0"
    gen = "wrk" if result.generator == "wrk" else "python*"
    return (
        result.load.system,
        WORKLOADS[result.load.workload],
        gen,
        str(result.load.connections),
        f"{result.ops:,.0f}",
        f"{result.p50_ms:.2f}",
        f"{result.p99_ms:.2f}",
        errors,
        *row_status(result),
    )


def ratios(results: list[Result]) -> list[Ratio]:
    found = by_key(results)
    out = []
    for workload in WORKLOADS:
        rkv, etcd, trivial = (found.get((s, workload)) for s in (RKV, ETCD, TRIVIAL))
        value: float | None = None
        if workload == "put_1conn":
            basis = "etcd p50 / rkv p50"
            if rkv and etcd and rkv.p50_ms > 0:
                value = etcd.p50_ms / rkv.p50_ms
        else:
            basis = "rkv ops/s / etcd ops/s"
            if rkv and etcd and etcd.ops > 0:
                value = rkv.ops / etcd.ops
        passed = value is not None and value >= 1.0 and rkv is not None and not rkv.error_count
        status = "n/a" if value is None else "PASS" if passed else "MISS"
        of_trivial = rkv.ops / trivial.ops if rkv and trivial and trivial.ops else None
        out.append(Ratio(workload, value, basis, status, of_trivial))
    return out


def secure_costs(results: list[Result]) -> list[Ratio]:
    """rkv with TLS and a bearer token against plain rkv, per workload (ops/s, or the
    p50 latency for one connection): >= SECURE_TARGET passes."""
    found = by_key(results)
    out = []
    for workload in WORKLOADS:
        plain, secure = found.get((RKV, workload)), found.get((RKV_SECURE, workload))
        value: float | None = None
        if workload == "put_1conn":
            basis = "plain p50 / secure p50"
            if plain and secure and secure.p50_ms > 0:
                value = plain.p50_ms / secure.p50_ms
        else:
            basis = "secure ops/s / plain ops/s"
            if plain and secure and plain.ops > 0:
                value = secure.ops / plain.ops
        clean = secure is not None and not secure.error_count
        passed = value is not None and value >= SECURE_TARGET and clean
        status = "n/a" if value is None else "PASS" if passed else "MISS"
        out.append(Ratio(workload, value, basis, status, None))
    return out


def secure_cells(ratio: Ratio) -> tuple[str, ...]:
    value = "-" if ratio.value is None else f"{ratio.value:.2f}"
    cost = "-" if ratio.value is None else f"{1 - ratio.value:.0%}"
    return (WORKLOADS[ratio.workload], value, ratio.basis, cost, ratio.status)


def ratio_cells(ratio: Ratio) -> tuple[str, ...]:
    value = "-" if ratio.value is None else f"{ratio.value:.2f}"
    of = "-" if ratio.of_trivial is None else f"{ratio.of_trivial:.0%}"
    return (WORKLOADS[ratio.workload], value, ratio.basis, ratio.status, of)


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
            notes.append(f"ERRORS in {r.load.system} {WORKLOADS[r.load.workload]}: {kinds}")
    if any(r.generator != "wrk" for r in results):
        notes.append(
            "python* = the aiohttp closed-loop generator ran instead of wrk (a far lower ceiling)"
        )
    return notes


def text_report(results: list[Result]) -> str:
    rows = format_table(HEADER, [cells(r) for r in results])
    ratio_table = format_table(RATIO_HEADER, [ratio_cells(r) for r in ratios(results)], left=1)
    secure = format_table(SECURE_HEADER, [secure_cells(r) for r in secure_costs(results)], left=1)
    return "\n".join([rows, "", ratio_table, "", secure, *(["", *warnings(results)])])


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
            "target": target,
            "status": status,
            "wrk_output": r.raw,
        }

    return {
        "meta": meta,
        "targets": {w: asdict(t) for w, t in TARGETS.items()},
        "rows": [row(r) for r in results],
        "ratios": [asdict(r) for r in ratios(results)],
        "tls_auth_cost": [asdict(r) for r in secure_costs(results)],
        "warnings": warnings(results),
    }


CHART = {"label_w": 130, "bar_w": 520, "bar_h": 16, "gap": 3, "group_gap": 16, "top": 34}


def bar_chart(results: list[Result]) -> str:
    """Inline SVG: per workload one bar per system (ops/s), a dashed line at rkv's target."""
    systems = [s for s in SYSTEMS if any(r.load.system == s for r in results)]
    scale = max([r.ops for r in results] + [t.bound for t in TARGETS.values()]) * 1.15
    group_h = len(systems) * (CHART["bar_h"] + CHART["gap"]) + CHART["group_gap"]
    width, height = CHART["label_w"] + CHART["bar_w"] + 90, CHART["top"] + len(WORKLOADS) * group_h
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        *_legend(systems),
    ]
    for g, workload in enumerate(WORKLOADS):
        y0 = CHART["top"] + g * group_h
        parts += _group(workload, systems, by_key(results), y0, scale)
    return "\n".join([*parts, "</svg>"])


def _legend(systems: list[str]) -> list[str]:
    parts = []
    for i, system in enumerate(systems):
        x = CHART["label_w"] + i * 110
        parts.append(f'<rect x="{x}" y="6" width="12" height="12" fill="{COLORS[system]}"/>')
        parts.append(f'<text x="{x + 16}" y="16">{system}</text>')
    x = CHART["label_w"] + len(systems) * 110
    parts.append(f'<line x1="{x + 6}" y1="4" x2="{x + 6}" y2="20" {TARGET_STROKE}/>')
    parts.append(f'<text x="{x + 16}" y="16">rkv target</text>')
    return parts


TARGET_STROKE = 'stroke="#222" stroke-width="2" stroke-dasharray="3 2"'


def _group(
    workload: str,
    systems: list[str],
    found: dict[tuple[str, str], Result],
    y0: int,
    scale: float,
) -> list[str]:
    left, bar_h, step = CHART["label_w"], CHART["bar_h"], CHART["bar_h"] + CHART["gap"]
    title = WORKLOADS[workload]
    parts = [f'<text x="{left - 8}" y="{y0 + 12}" text-anchor="end">{title}</text>']
    target = TARGETS[workload]
    target_x = left + CHART["bar_w"] * target.bound / scale if target.metric == "ops" else 0.0
    for i, system in enumerate(systems):
        result, y = found.get((system, workload)), y0 + i * step
        width = CHART["bar_w"] * (result.ops if result else 0.0) / scale
        label = f"{result.ops:,.0f}/s" if result else "not run"
        label_x = max(left + width, target_x if system == RKV else 0.0) + 5
        parts.append(
            f'<rect x="{left}" y="{y}" width="{width:.1f}" height="{bar_h}" '
            f'fill="{COLORS[system]}"/>'
        )
        parts.append(f'<text x="{label_x:.1f}" y="{y + 12}">{label}</text>')
    if target_x:
        y1, y2 = y0 - 2, y0 + bar_h + 2
        parts.append(f'<line x1="{target_x:.1f}" y1="{y1}" x2="{target_x:.1f}" y2="{y2}" '
                     f"{TARGET_STROKE}/>")  # fmt: skip
    return parts


def html_table(header: tuple[str, ...], lines: list[tuple[str, ...]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in line) + "</tr>" for line in lines
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def render_html(results: list[Result], meta: dict[str, Any]) -> str:
    about = "".join(f"<li>{html.escape(k)}: {html.escape(str(v))}</li>" for k, v in meta.items())
    notes = "".join(f"<p class=warn>{html.escape(w)}</p>" for w in warnings(results))
    rows = html_table(HEADER, [cells(r) for r in results])
    ratio_rows = html_table(RATIO_HEADER, [ratio_cells(r) for r in ratios(results)])
    secure_rows = html_table(SECURE_HEADER, [secure_cells(r) for r in secure_costs(results)])
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>rkv HTTP benchmark</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;margin:1em 0}}
th,td{{border:1px solid #ccc;padding:3px 10px;text-align:right}}
th:first-child,td:first-child,td:nth-child(2){{text-align:left}}.warn{{color:#b00}}</style>
</head><body><h1>rkv HTTP benchmark</h1><ul>{about}</ul>{notes}
<h2>Runs</h2>{rows}
<h2>rkv against etcd (&gt; 1 means rkv is better; target &gt;= 1.0)</h2>{ratio_rows}
<h2>The cost of TLS + token auth (rkv_secure against rkv; target &gt;= 0.8)</h2>{secure_rows}
<h2>Throughput (ops/s; dashed: rkv's target)</h2>
{bar_chart(results)}
</body></html>
"""


def write_results(out: Path, results: list[Result], meta: dict[str, Any]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "http.json", out / "http.html"]
    paths[0].write_text(json.dumps(report_dict(results, meta), indent=2) + "\n")
    paths[1].write_text(render_html(results, meta))
    return paths
