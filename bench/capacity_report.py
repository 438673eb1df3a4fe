"""The capacity benchmark's report: the text tables and targets printed on stdout,
capacity.html (tables + inline SVG bar charts) and capacity.json."""

from __future__ import annotations

import html
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.capacity_model import (
    BASE_BYTES,
    ENTRIES_IN_FLIGHT,
    FOLLOWERS,
    HOT_EVERY,
    HOT_SHARE,
    IN_FLIGHT,
    JOURNAL_INDEX_BYTES,
    NODES,
    PRODUCER_STATES_BYTES,
    PUTS_PER_TXN,
    READ_KINDS,
    READ_THREADS,
    REQUEST_COPIES,
    RESULTS_CACHE_BYTES,
    SAMPLE_INTERVAL_S,
    SEND_COPIES,
    TARGET_DISK_RATIO,
    TARGET_LOAD_MB_S,
    TARGET_REBUILD_MB_S,
    Row,
    disk_breakdown,
    mib,
)
from bench.compaction import bar_chart


def per_node(values: dict[str, float]) -> str:
    return "/".join(f"{v:.0f}" for _, v in sorted(values.items())) or "-"


def na(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def load_cells(row: Row) -> tuple[str, ...]:
    load, disk = row.load, row.disk
    loaded = ("-",) * 5
    if load is not None:
        loaded = (
            f"{mib(load.value_bytes_total):,.0f}",
            f"{load.keys:,}",
            f"{load.seconds:.1f}",
            f"{load.mb_per_s:.1f}",
            f"{load.keys_per_s:,.0f}",
        )
    ratios = ("-", "-")
    if disk is not None:
        ratios = (f"{disk.allocated_ratio:.2f}", f"{disk.apparent_ratio:.2f}")
    return (
        f"{row.multiple}x",
        f"{row.cap_mib}",
        *loaded,
        per_node(row.peak_rss_anon_mib),
        per_node(row.peak_charge_mib),
        f"{row.formula_mib:.0f}",
        f"{row.oom_kills}",
        "yes" if row.alive else "NO",
        *ratios,
    )


LOAD_HEADER = (
    "N", "cap MiB", "logical MiB", "keys", "load s", "load MB/s", "keys/s",
    "peak RssAnon MiB n0/n1/n2", "peak charge MiB n0/n1/n2", "formula MiB", "OOM kills",
    "all alive", "disk B/B alloc", "disk B/B apparent",
)  # fmt: skip
READ_HEADER = ("N", *(f"{kind} GET/s p50/p99 ms" for kind in READ_KINDS))
REBUILD_HEADER = (
    "N", "node", "total s", "ready s", "MB/s", "records pulled", "pulled MB", "pull s",
    "peak RssAnon MiB", "how",
)  # fmt: skip


def read_cells(row: Row) -> tuple[str, ...]:
    cells = [f"{row.multiple}x"]
    for kind in READ_KINDS:
        r = row.reads.get(kind)
        cells.append(
            "-"
            if r is None
            else f"{r.per_s:,.0f} {r.p50_ms:.1f}/{r.p99_ms:.1f}"
            + (f" ({r.errors} err)" if r.errors else "")
        )
    return tuple(cells)


def rebuild_cells(row: Row) -> tuple[str, ...]:
    r = row.rebuild
    if r is None:
        return (f"{row.multiple}x", *("-" for _ in REBUILD_HEADER[1:]))
    return (
        f"{row.multiple}x",
        r.node,
        f"{r.seconds:.2f}",
        f"{r.ready_seconds:.2f}",
        f"{r.mb_per_s:,.1f}",
        na(r.records_pulled, ","),
        na(r.pulled_mb, ",.1f"),
        na(r.pull_seconds, ".2f"),
        f"{r.peak_rss_anon_mib:.0f}",
        r.how[:60],
    )


def format_table(header: tuple[str, ...], lines: list[tuple[str, ...]]) -> str:
    every = [header, *lines]
    widths = [max(len(line[i]) for line in every) for i in range(len(header))]

    def fmt(line: tuple[str, ...]) -> str:
        return "  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True))

    return "\n".join([fmt(header), "  ".join("-" * w for w in widths), *map(fmt, lines)])


def verdict(met: bool | None) -> str:
    return "not measured" if met is None else "met" if met else "MISSED"


def format_targets(rows: list[Row]) -> str:
    lines = ["targets (the issue states zero OOM kills at 10x; checked on every row):"]
    for row in rows:
        found = ", ".join(f"{name}: {verdict(met)}" for name, met in row.targets().items())
        lines.append(f"  {row.multiple}x: {found}")
        if row.error:
            lines.append(f"  {row.multiple}x FAILED: {row.error.splitlines()[0]}")
    return "\n".join(lines)


def format_report(rows: list[Row]) -> str:
    return "\n\n".join(
        [
            "load, memory, disk\n" + format_table(LOAD_HEADER, [load_cells(r) for r in rows]),
            "reads (8 threads, keep-alive)\n"
            + format_table(READ_HEADER, [read_cells(r) for r in rows]),
            "rebuild of a wiped follower\n"
            + format_table(REBUILD_HEADER, [rebuild_cells(r) for r in rows]),
            "disk allocated per top-level entry of the largest data directory:\n"
            + "\n".join(f"  {r.multiple}x {disk_breakdown(r.disk)}" for r in rows if r.disk),
            format_targets(rows),
            f"formula (docs/OPERATIONS.md, Memory): base {mib(BASE_BYTES):.0f} MiB + journal "
            f"index {JOURNAL_INDEX_BYTES:,} B + results cache {mib(RESULTS_CACHE_BYTES):.0f} MiB "
            f"+ producers {PRODUCER_STATES_BYTES:,} B + {IN_FLIGHT} requests in flight x "
            f"{REQUEST_COPIES} x the largest transaction body sent + {FOLLOWERS} followers x "
            f"{ENTRIES_IN_FLIGHT} entries in flight x {SEND_COPIES} x that body",
        ]
    )


def html_table(header: tuple[str, ...], lines: list[tuple[str, ...]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in line) + "</tr>" for line in lines
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def status_of(met: bool | None) -> str:
    return "" if met is None else "PASS" if met else "MISS"


def render_html(rows: list[Row], meta: str) -> str:
    targets = "".join(
        f"<li>{row.multiple}x: "
        + ", ".join(
            f"{html.escape(name)}: <b>{verdict(met)}</b>" for name, met in row.targets().items()
        )
        + (f"<br>failed: <pre>{html.escape(row.error)}</pre>" if row.error else "")
        + "</li>"
        for row in rows
    )
    formula = max((r.formula_mib for r in rows), default=0.0)
    rss = bar_chart(
        [
            (f"{r.multiple}x {node}", value, status_of(value <= r.formula_mib))
            for r in rows
            for node, value in sorted(r.peak_rss_anon_mib.items())
        ],
        "MiB",
        [(formula, f"formula {formula:.0f} MiB")],
    )
    load = bar_chart(
        [
            (f"{r.multiple}x", r.load.mb_per_s, status_of(r.load.mb_per_s >= TARGET_LOAD_MB_S))
            for r in rows
            if r.load
        ],
        "MB/s",
        [(TARGET_LOAD_MB_S, f"target {TARGET_LOAD_MB_S:.0f} MB/s")],
    )
    rebuild_chart = bar_chart(
        [
            (
                f"{r.multiple}x",
                r.rebuild.mb_per_s,
                status_of(r.rebuild.mb_per_s >= TARGET_REBUILD_MB_S),
            )
            for r in rows
            if r.rebuild
        ],
        "MB/s",
        [(TARGET_REBUILD_MB_S, f"target {TARGET_REBUILD_MB_S:.0f} MB/s")],
    )
    disk = bar_chart(
        [
            (
                f"{r.multiple}x {what}",
                value,
                status_of(value <= TARGET_DISK_RATIO) if what == "allocated" else "",
            )
            for r in rows
            if r.disk
            for what, value in (
                ("allocated", r.disk.allocated_ratio),
                ("apparent", r.disk.apparent_ratio),
            )
        ],
        "B/B",
        [(TARGET_DISK_RATIO, f"target {TARGET_DISK_RATIO} (allocated)")],
    )
    reads = bar_chart(
        [
            (f"{r.multiple}x {kind}", found.per_s, "")
            for r in rows
            for kind, found in r.reads.items()
        ],
        "GET/s",
        [],
    )
    breakdown = "".join(
        f"<li>{r.multiple}x {html.escape(disk_breakdown(r.disk))}</li>" for r in rows if r.disk
    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>rkv capacity benchmark</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
th,td{{border:1px solid #ccc;padding:3px 10px;text-align:right}}</style></head>
<body><h1>rkv capacity benchmark: data larger than memory</h1><p>{html.escape(meta)}</p>
<p>Per row, a fresh cluster of 3 node processes on loopback on default settings, each in a
memory cgroup limited to the cap. N x cap bytes of values per replica loaded through the
leader with POST /v1/txn ({PUTS_PER_TXN} puts per transaction, {IN_FLIGHT} in flight); MB =
1e6 bytes of values. Peak RssAnon: /proc/&lt;pid&gt;/status sampled every
{SAMPLE_INTERVAL_S} s for the whole row (the rebuilt process included). Peak charge: the
cgroup's own peak, which counts the page cache too. Formula: docs/OPERATIONS.md, section
"Memory" (base {mib(BASE_BYTES):.0f} MiB + journal index + results cache + producers' states +
{IN_FLIGHT} requests in flight x {REQUEST_COPIES} x the largest transaction body + {FOLLOWERS}
followers x {ENTRIES_IN_FLIGHT} entries in flight x {SEND_COPIES} x that body). Disk: files in
each data directory after the load, allocated (st_blocks x 512) and apparent (st_size), per
logical byte (key + value bytes of one replica), the maximum over the nodes. Reads:
{READ_THREADS} threads with keep-alive connections; stale on a follower, linearizable on the
leader; skewed = {HOT_SHARE:.0%} of reads on a hot 1% of the keys (every {HOT_EVERY}th), the
rest uniform; the client is Python on the same machine. Rebuild: a follower SIGKILLed, its
data directory deleted, restarted in its cgroup; timed until /readyz is 200 and its applied
offset reaches the leader's; MB/s = value bytes of one replica per second.</p>
<h2>Load, memory, disk</h2>{html_table(LOAD_HEADER, [load_cells(r) for r in rows])}
<h2>Reads</h2>{html_table(READ_HEADER, [read_cells(r) for r in rows])}
<h2>Rebuild</h2>{html_table(REBUILD_HEADER, [rebuild_cells(r) for r in rows])}
<h2>Targets</h2><ul>{targets}</ul>
<h2>Peak RssAnon per node (MiB)</h2>
{rss}
<h2>Load (MB/s of values)</h2>
{load}
<h2>Rebuild (MB/s of values)</h2>
{rebuild_chart}
<h2>Disk bytes per logical byte</h2>
{disk}
<p>Allocated per top-level entry of the largest data directory:</p><ul>{breakdown}</ul>
<h2>Reads (GET/s)</h2>
{reads}
</body></html>
"""


def row_json(row: Row) -> dict[str, Any]:
    found = asdict(row)
    found["targets"] = row.targets()
    if row.load:
        found["load"] |= {"mb_per_s": row.load.mb_per_s, "keys_per_s": row.load.keys_per_s}
    if row.disk:
        found["disk"] |= {
            "allocated_ratio": row.disk.allocated_ratio,
            "apparent_ratio": row.disk.apparent_ratio,
        }
    for kind, reads in row.reads.items():
        found["reads"][kind]["per_s"] = reads.per_s
    if row.rebuild:
        found["rebuild"]["mb_per_s"] = row.rebuild.mb_per_s
    return found


def write_results(out: Path, rows: list[Row], meta: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "meta": meta,
        "config": {
            "nodes": NODES,
            "puts_per_txn": PUTS_PER_TXN,
            "in_flight": IN_FLIGHT,
            "read_threads": READ_THREADS,
            "skew": f"{HOT_SHARE:.0%} of reads on every {HOT_EVERY}th key, the rest uniform",
            "rss_sample_interval_s": SAMPLE_INTERVAL_S,
            "formula": {
                "base_bytes": BASE_BYTES,
                "journal_index_bytes": JOURNAL_INDEX_BYTES,
                "results_cache_bytes": RESULTS_CACHE_BYTES,
                "producer_states_bytes": PRODUCER_STATES_BYTES,
                "requests_in_flight": IN_FLIGHT,
                "request_copies": REQUEST_COPIES,
                "followers": FOLLOWERS,
                "entries_in_flight": ENTRIES_IN_FLIGHT,
                "send_copies": SEND_COPIES,
            },
        },
        "targets": {
            "oom_kills": 0,
            "peak_rss_anon_within_formula": True,
            "rebuild_mb_s_at_least": TARGET_REBUILD_MB_S,
            "load_mb_s_at_least": TARGET_LOAD_MB_S,
            "disk_allocated_bytes_per_logical_byte_at_most": TARGET_DISK_RATIO,
        },
        "rows": [row_json(r) for r in rows],
    }
    (out / "capacity.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "capacity.html").write_text(render_html(rows, meta))
