"""The HTML report of a chaos campaign: summary, a timeline, faults, anomalies."""

from __future__ import annotations

import html
from typing import Any

from tests.chaos.rig.campaign import CampaignResult

_COLORS = {"ok": "#2a9d4b", "fail": "#e9b44c", "unknown": "#d1495b"}


def timeline(result: CampaignResult, width: int = 900, height: int = 160) -> str:
    """Inline SVG: operations per second by outcome, and fault intervals as bands."""
    ops = result.history.ops
    end = max([op.invoke for op in ops] + [1.0])
    seconds = int(end) + 1
    buckets = {k: [0] * seconds for k in _COLORS}
    for op in ops:
        buckets[op.outcome][int(op.invoke)] += 1
    peak = max([sum(buckets[k][s] for k in _COLORS) for s in range(seconds)] + [1])
    left, top, plot_h = 40, 20, height - 40
    x_of = lambda t: left + (width - left - 10) * t / end  # noqa: E731
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="11">'
    ]
    for fault in result.faults:
        x1 = x_of(fault.injected_at)
        x2 = x_of(fault.healed_at if fault.healed_at is not None else fault.injected_at + 0.3)
        parts.append(
            f'<rect x="{x1:.1f}" y="{top}" width="{max(2.0, x2 - x1):.1f}" height="{plot_h}" '
            f'fill="#888" opacity="0.18"><title>{html.escape(fault.action)}</title></rect>'
        )
    bar_w = max(1.0, (width - left - 10) / seconds)
    for s in range(seconds):
        y: float = top + plot_h
        for kind in ("ok", "fail", "unknown"):
            h = plot_h * buckets[kind][s] / peak
            y -= h
            if h > 0:
                parts.append(
                    f'<rect x="{x_of(s):.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                    f'fill="{_COLORS[kind]}"/>'
                )
    parts.append(f'<text x="{left}" y="{height - 4}">0 s</text>')
    parts.append(f'<text x="{width - 60}" y="{height - 4}">{end:.0f} s</text>')
    parts.append(f'<text x="{left}" y="12">ops/s by outcome (green ok, yellow fail, red '
                 f"unknown); grey bands: faults; peak {peak}/s</text>")  # fmt: skip
    return "\n".join([*parts, "</svg>"])


def render(result: CampaignResult, meta: dict[str, Any]) -> str:
    summary = result.summary()
    rows = "".join(
        f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}</td></tr>"
        for k, v in {**meta, **summary}.items()
    )
    faults = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(v))}</td>"
            for v in (
                f"{f.injected_at:.1f}",
                f.nemesis,
                f.action,
                "" if f.healed_at is None else f"{f.healed_at:.1f}",
                _seconds(f.writes_back_after_inject),
                _seconds(f.writes_back_after_heal),
            )
        )
        + "</tr>"
        for f in result.faults
    )
    anomalies = (
        "".join(
            f"<h3>{html.escape(a['kind'])} on {html.escape(str(a['key']))}</h3>"
            f"<p>{html.escape(a['message'])}</p><pre>{html.escape(chr(10).join(a['excerpt']))}</pre>"
            for a in result.anomalies
        )
        or "<p>None.</p>"
    )
    verdict = "PASS" if result.passed else "FAIL"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>rkv chaos {verdict}</title>
<style>body{{font-family:sans-serif;margin:2em}}td{{padding:2px 8px;border-bottom:1px solid #ddd}}
pre{{background:#f4f4f4;padding:8px;overflow:auto}}</style></head><body>
<h1>rkv chaos campaign: {verdict}</h1>
{timeline(result)}
<h2>Summary</h2><table>{rows}</table>
<h2>Faults</h2><table><tr><th>at s</th><th>nemesis</th><th>action</th><th>healed s</th>
<th>writes back after inject s</th><th>writes back after heal s</th></tr>{faults}</table>
<h2>Anomalies</h2>{anomalies}
<h2>Convergence</h2><p>{html.escape(result.convergence_detail)}</p>
</body></html>"""


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"
