"""report.html: the report for a person, one self-contained page with SVG charts."""

from __future__ import annotations

from html import escape
from typing import Any

from spark_tools.divergence import CLASSES, REPLAY_CLASSES, REPLICA_CLASSES
from spark_tools.svg_charts import grouped_bars, stacked_columns

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; font-size: 13px; }
th { background: #f3f3f3; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: 12px; }
.status { display: inline-block; padding: 4px 12px; border-radius: 4px; color: #fff;
          font-weight: bold; }
.PASS { background: #2ca02c; } .FAIL { background: #d62728; }
.INCONCLUSIVE { background: #7f7f7f; }
"""


def _cell(value: Any) -> str:
    if value is None:
        return "<td>-</td>"
    if isinstance(value, bool):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, int):
        return f'<td class="n">{value:,}</td>'
    if isinstance(value, float):
        return f'<td class="n">{value:.6g}</td>'
    return f"<td>{escape(str(value))}</td>"


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _key_text(entry: dict[str, Any]) -> str:
    text = entry.get("key_utf8")
    return repr(text) if text is not None else f"base64:{entry['key']}"


def _short(observation: dict[str, Any] | None) -> str:
    if observation is None:
        return "absent"
    return f"v{observation['version']} {observation['value_sha256'][:12]}"


def _divergence_section(report: dict[str, Any]) -> list[str]:
    totals, names = report["totals"], [r["replica"] for r in report["replicas"]]
    parts = [
        "<h2>Divergence</h2>",
        _table(
            ["distinct keys", "divergent keys", "divergences", "rate", "max rate"],
            [
                [
                    totals["distinct_keys"],
                    totals["divergent_keys"],
                    totals["divergences"],
                    totals["divergence_rate"],
                    report["thresholds"]["max_divergence_rate"],
                ]
            ],
        ),
        _table(
            ["replica", *REPLICA_CLASSES],
            [[n, *(report["by_replica"][n][c] for c in REPLICA_CLASSES)] for n in names],
        ),
        f"<p>Keys without a majority (no odd replica named): "
        f"{report['by_class']['no_majority']:,}</p>",
    ]
    values = {(n, c): report["by_replica"][n][c] for n in names for c in REPLICA_CLASSES}
    groups = list(names)
    if report["by_class"]["no_majority"]:
        groups.append("no majority")
        values["no majority", "no_majority"] = report["by_class"]["no_majority"]
    parts.append(grouped_bars("Divergences per replica, by class", groups, CLASSES, values))
    per_bucket = {b["bucket"]: b["by_class"] for b in report["by_bucket"]}
    parts.append(
        stacked_columns(
            "Divergences by key-range bucket",
            report["buckets"]["count"],
            CLASSES,
            per_bucket,
            "bucket",
        )
    )
    if report["samples"]:
        parts.append(f"<h3>Sample keys (first {len(report['samples'])} in key order)</h3>")
        rows = [
            [
                _key_text(s),
                s["bucket"],
                ", ".join(
                    f["class"] + ("" if f["replica"] is None else f" on {f['replica']}")
                    for f in s["findings"]
                ),
                *(_short(s["replicas"][n]) for n in names),
            ]
            for s in report["samples"]
        ]
        parts.append(_table(["key", "bucket", "findings", *names], rows))
    return parts


def _replay_section(report: dict[str, Any]) -> list[str]:
    rows: list[list[Any]] = []
    samples: list[list[Any]] = []
    for name, r in report["replay"].items():
        by_class = r["by_class"] or {}
        rows.append(
            [
                name,
                r["status"],
                r["log_records"],
                r["replayed_keys"],
                r["state_keys"],
                r["mismatched_keys"],
                *(by_class.get(c) for c in REPLAY_CLASSES),
            ]
        )
        samples.extend(
            [name, _key_text(s), s["class"], _short(s["state"]), _short(s["log"])]
            for s in r["samples"]
        )
    parts = [
        "<h2>State = replay of the replica's own log</h2>",
        _table(
            [
                "replica",
                "status",
                "log records",
                "replayed keys",
                "state keys",
                "mismatched",
                *REPLAY_CLASSES,
            ],
            rows,
        ),
    ]
    if samples:
        parts.append(_table(["replica", "key", "class", "state", "log replay"], samples))
    return parts


def _log_section(report: dict[str, Any]) -> list[str]:
    log = report["log_check"]
    parts = [
        "<h2>Logs compared offset by offset</h2>",
        _table(
            ["status", "replicas", "offsets compared", "divergent offsets", "first divergence"],
            [
                [
                    log["status"] + (f" ({log['reason']})" if log["reason"] else ""),
                    ", ".join(log["replicas"]),
                    log["offsets_compared"],
                    log["divergent_offsets"],
                    None if log["first_divergence"] is None else log["first_divergence"]["offset"],
                ]
            ],
        ),
    ]
    first = log["first_divergence"]
    if first is not None:
        rows = [
            [name]
            + (
                ["absent", "", "", ""]
                if rec is None
                else [rec["raft_index"], rec["op"], _key_text(rec), rec["value_sha256"][:12]]
            )
            for name, rec in first["records"].items()
        ]
        parts.append(_table(["replica", "raft index", "op", "key", "value sha256"], rows))
    return parts


def render_html(report: dict[str, Any]) -> str:
    status = report["status"]
    cut = report["cut"] or {}
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>rkv audit {escape(str(report['audit_id']))}: {status}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>rkv consistency audit <code>{escape(str(report['audit_id']))}</code></h1>",
        f'<p><span class="status {status}">{status}</span> at raft index '
        f"{escape(str(cut.get('raft_index')))}, offset {escape(str(cut.get('applied_offset')))}"
        f" &middot; engine {escape(str(report['engine'].get('name')))}</p>",
    ]
    if report["reasons"]:
        parts.append("<ul>" + "".join(f"<li>{escape(r)}</li>" for r in report["reasons"]) + "</ul>")
    parts.append("<h2>Replicas</h2>")
    parts.append(
        _table(
            [
                "replica",
                "complete",
                "raft index",
                "applied offset",
                "keys",
                "log records",
                "export",
            ],
            [
                [
                    r["replica"],
                    r["complete"] if r["problem"] is None else r["problem"],
                    r["raft_index"],
                    r["applied_offset"],
                    r["key_count"],
                    r["log_records"],
                    r["export"],
                ]
                for r in report["replicas"]
            ],
        )
    )
    if report["totals"] is not None:
        parts.extend(_divergence_section(report))
    if report["replay"] is not None:
        parts.extend(_replay_section(report))
    if report["log_check"] is not None:
        parts.extend(_log_section(report))
    timings = report.get("timings") or {}
    if timings:
        parts.append("<h2>Timings</h2>")
        parts.append(_table(list(timings), [list(timings.values())]))
    parts.append("</body></html>\n")
    return "\n".join(parts)
