"""Small inline SVG bar charts (no scripts, no external assets)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

WIDTH = 720
HEIGHT = 260
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 16, 28, 56
PALETTE = ("#d62728", "#ff7f0e", "#1f77b4", "#9467bd", "#7f7f7f", "#2ca02c", "#8c564b")


def nice_top(maximum: int) -> int:
    """The axis top: 4 equal integer steps of 1, 2 or 5 times a power of ten, >= maximum."""
    power = 1
    while True:
        for factor in (1, 2, 5):
            if factor * power * 4 >= maximum:
                return factor * power * 4
        power *= 10


def _axis(top: float, plot_height: float, maximum: int) -> list[str]:
    parts = []
    for step in range(5):
        value = maximum * step // 4
        y = top + plot_height - plot_height * step / 4
        parts.append(
            f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{WIDTH - _RIGHT}" y2="{y:.1f}" '
            f'stroke="#ddd"/><text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" '
            f'font-size="11">{value:,}</text>'
        )
    return parts


def _legend(series: Sequence[str], y: float) -> list[str]:
    parts, x = [], float(_LEFT)
    for i, name in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        parts.append(
            f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{x + 14:.1f}" y="{y:.1f}" font-size="11">{escape(name)}</text>'
        )
        x += 24 + 7 * len(name)
    return parts


def _frame(title: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">'
        f'<text x="{_LEFT}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>'
        + "".join(body)
        + "</svg>"
    )


def grouped_bars(
    title: str,
    groups: Sequence[str],
    series: Sequence[str],
    values: Mapping[tuple[str, str], int],
) -> str:
    """One group of bars per ``groups`` entry, one bar per series."""
    plot_w = WIDTH - _LEFT - _RIGHT
    plot_h = HEIGHT - _TOP - _BOTTOM
    maximum = nice_top(max([1, *values.values()]))
    body = _axis(_TOP, plot_h, maximum)
    group_w = plot_w / max(1, len(groups))
    bar_w = max(1.0, (group_w * 0.8) / max(1, len(series)))
    for g, group in enumerate(groups):
        x0 = _LEFT + g * group_w + group_w * 0.1
        for s, name in enumerate(series):
            value = values.get((group, name), 0)
            h = plot_h * value / maximum
            body.append(
                f'<rect x="{x0 + s * bar_w:.1f}" y="{_TOP + plot_h - h:.1f}" '
                f'width="{bar_w:.1f}" height="{h:.1f}" fill="{PALETTE[s % len(PALETTE)]}">'
                f"<title>{escape(group)} {escape(name)}: {value:,}</title></rect>"
            )
        body.append(
            f'<text x="{_LEFT + (g + 0.5) * group_w:.1f}" y="{_TOP + plot_h + 16}" '
            f'text-anchor="middle" font-size="11">{escape(group)}</text>'
        )
    body.extend(_legend(series, HEIGHT - 10))
    return _frame(title, body)


def stacked_columns(
    title: str,
    columns: int,
    series: Sequence[str],
    values: Mapping[int, Mapping[str, int]],
    x_label: str,
) -> str:
    """``columns`` positions (0..columns-1), each a stack of its series' values."""
    plot_w = WIDTH - _LEFT - _RIGHT
    plot_h = HEIGHT - _TOP - _BOTTOM
    totals = {c: sum(v.values()) for c, v in values.items()}
    maximum = nice_top(max([1, *totals.values()]))
    body = _axis(_TOP, plot_h, maximum)
    col_w = plot_w / max(1, columns)
    bar_w = max(1.0, col_w * 0.8)
    for column, stack in sorted(values.items()):
        x = _LEFT + column * col_w + (col_w - bar_w) / 2
        y: float = _TOP + plot_h
        for s, name in enumerate(series):
            value = stack.get(name, 0)
            if not value:
                continue
            h = plot_h * value / maximum
            y -= h
            body.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                f'fill="{PALETTE[s % len(PALETTE)]}"><title>{escape(x_label)} {column} '
                f"{escape(name)}: {value:,}</title></rect>"
            )
    for column in sorted({0, columns - 1, *values}):
        if len(values) > 40 and column not in (0, columns - 1):
            continue
        body.append(
            f'<text x="{_LEFT + (column + 0.5) * col_w:.1f}" y="{_TOP + plot_h + 16}" '
            f'text-anchor="middle" font-size="10">{column}</text>'
        )
    body.append(
        f'<text x="{_LEFT + plot_w / 2:.1f}" y="{_TOP + plot_h + 32}" text-anchor="middle" '
        f'font-size="11">{escape(x_label)}</text>'
    )
    body.extend(_legend(series, HEIGHT - 6))
    return _frame(title, body)
