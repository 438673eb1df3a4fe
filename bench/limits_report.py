"""The limits benchmark's rows and outputs: the table and details printed on stdout,
bench/results/limits.json and limits.html (the table and inline SVG bar charts)."""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.compaction import bar_chart

TARGET_SHARE = 0.70
"""Under every attack the well-behaved client keeps at least this share of its
undisturbed throughput, with no error beyond the documented refusals (429, 503)."""
UNDISTURBED = "undisturbed"
HEADER = (
    "attack", "ops/s", "% of undisturbed", "p99 ms", "refused 429/503", "other errors",
    "peak RSS MiB", "healthy after", "target",
)  # fmt: skip


@dataclass
class Row:
    attack: str
    what: str
    seconds: float
    ops: int
    ops_per_s: float
    p50_ms: float
    p99_ms: float
    refused: dict[str, int]
    errors: dict[str, int]
    peak_rss_mib: float | None  # the attacked node's VmHWM over the phase; None if it died
    health: str  # "ok", or what was wrong after the attack
    attacker: dict[str, int] = field(default_factory=dict)  # what the attack saw
    share: float | None = None  # of the undisturbed ops/s; set once that is known

    @property
    def healthy(self) -> bool:
        return self.health == "ok"

    @property
    def met(self) -> bool | None:
        """None for the undisturbed row; else the target, and healthy after."""
        if self.attack == UNDISTURBED or self.share is None:
            return None
        return self.share >= TARGET_SHARE and not self.errors and self.healthy

    @property
    def verdict(self) -> str:
        return {None: "-", True: "MET", False: "MISSED"}[self.met]

    def cells(self) -> tuple[str, ...]:
        return (
            self.attack,
            f"{self.ops_per_s:,.0f}",
            "-" if self.share is None else f"{100 * self.share:.0f} %",
            f"{self.p99_ms:.1f}",
            f"{sum(self.refused.values()):,}",
            f"{sum(self.errors.values()):,}",
            "-" if self.peak_rss_mib is None else f"{self.peak_rss_mib:,.0f}",
            "yes" if self.healthy else "NO",
            self.verdict,
        )


def set_shares(rows: list[Row]) -> None:
    base = next((r.ops_per_s for r in rows if r.attack == UNDISTURBED), 0.0)
    for row in rows:
        row.share = row.ops_per_s / base if base > 0 else None


def format_table(rows: list[Row]) -> str:
    lines = [HEADER, *(row.cells() for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]

    def fmt(line: tuple[str, ...]) -> str:
        return "  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True))

    return "\n".join([fmt(HEADER), "  ".join("-" * w for w in widths), *map(fmt, lines[1:])])


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v:,}" for k, v in sorted(counts.items())) or "none"


def format_details(rows: list[Row]) -> str:
    lines = []
    for row in rows:
        lines.append(f"{row.attack}: {row.what}")
        lines.append(f"  refused: {_counts(row.refused)}")
        lines.append(f"  other errors: {_counts(row.errors)}")
        if row.attack != UNDISTURBED:
            lines.append(f"  the attacker saw: {_counts(row.attacker)}")
        if not row.healthy:
            lines.append(f"  after: {row.health}")
    return "\n".join(lines)


def target_line(rows: list[Row]) -> str:
    attacked = [r for r in rows if r.met is not None]
    missed = [r.attack for r in attacked if not r.met]
    summary = "MET" if attacked and not missed else f"MISSED ({', '.join(missed) or 'no rows'})"
    return (
        f"target: >= {100 * TARGET_SHARE:.0f} % of the undisturbed ops/s under every attack, "
        f"no error beyond the documented 429/503, node and cluster healthy after: {summary}"
    )


def render_html(rows: list[Row], meta: str, method: str) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row.cells()) + "</tr>"
        for row in rows
    )
    status = {None: "", True: "PASS", False: "MISS"}
    share = bar_chart(
        [(r.attack, 100 * (r.share or 0.0), status[r.met]) for r in rows],
        "%",
        [(100 * TARGET_SHARE, f"target >= {100 * TARGET_SHARE:.0f} %")],
    )
    rss = bar_chart([(r.attack, r.peak_rss_mib or 0.0, "") for r in rows], "MiB", [])
    details = "".join(
        f"<li><b>{html.escape(r.attack)}</b>: {html.escape(r.what)}<br>"
        f"refused: {html.escape(_counts(r.refused))}<br>"
        f"other errors: {html.escape(_counts(r.errors))}<br>"
        f"the attacker saw: {html.escape(_counts(r.attacker))}<br>"
        f"after: {html.escape(r.health)}</li>"
        for r in rows
    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>rkv under hostile clients</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
th,td{{border:1px solid #ccc;padding:3px 10px;text-align:right}}</style></head>
<body><h1>rkv under hostile clients</h1><p>{html.escape(meta)}</p>
<p>{html.escape(method)}</p>
<table><tr>{head}</tr>{body}</table>
<p>{html.escape(target_line(rows))}</p>
<h2>Well-behaved ops/s, % of undisturbed</h2>
{share}
<h2>Peak RSS of the attacked node (MiB)</h2>
{rss}
<h2>Details</h2><ul>{details}</ul>
</body></html>
"""


def write_results(
    out: Path, rows: list[Row], meta: str, method: str, config: dict[str, object]
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "meta": meta,
        "method": method,
        "config": config,
        "targets": {"share_of_undisturbed_at_least": TARGET_SHARE, "other_errors": 0},
        "rows": [asdict(r) | {"met": r.met, "healthy": r.healthy} for r in rows],
    }
    (out / "limits.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "limits.html").write_text(render_html(rows, meta, method))
