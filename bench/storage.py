"""Storage-core benchmark (not a test): apply throughput, log append, replay, peak RSS.

Run from the repository root: ``python -m bench.storage [--quick] [--ops N] [--out DIR]``.
Scratch data goes to the system temporary directory (set TMPDIR to pick the disk).
"""

from __future__ import annotations

import argparse
import html
import json
import resource
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

from node.state.commands import Batch, Put, encode_entry
from node.state.machine import StateMachine
from node.storage.commit_log import CommitLog
from node.storage.config import FsyncPolicy, StorageConfig
from node.storage.datadir import LOG_DIR, STATE_DIR
from node.storage.lmdb_store import LmdbStore
from node.storage.record import Record, RecordOp
from node.storage.recovery import open_storage

VALUE = bytes(range(100))  # 100-byte values
TIMESTAMP_MS = 1_700_000_000_000
TARGET_BATCH_1000 = 200_000  # puts/s, batches of 1000 puts per entry
TARGET_SINGLE = 20_000  # puts/s, one put per entry, fsync on_sync
ON_SYNC = StorageConfig(fsync=FsyncPolicy.ON_SYNC)
ALWAYS = StorageConfig(fsync=FsyncPolicy.ALWAYS)
HEADER = ("scenario", "ops", "seconds", "rate", "unit", "target", "result")


class ApplyScenario(NamedTuple):
    key: str
    name: str
    config: StorageConfig
    batch_size: int  # puts per entry
    target: float | None = None  # puts/s


SINGLE_ON_SYNC = ApplyScenario("single_on_sync", "1 put/entry, on_sync", ON_SYNC, 1, TARGET_SINGLE)
SINGLE_ALWAYS = ApplyScenario("single_always", "1 put/entry, fsync always", ALWAYS, 1)
BATCH_100 = ApplyScenario("batch_100", "100 puts/entry, on_sync", ON_SYNC, 100)
BATCH_1000 = ApplyScenario(
    "batch_1000", "1000 puts/entry, on_sync", ON_SYNC, 1000, TARGET_BATCH_1000
)


@dataclass(frozen=True)
class Counts:
    single: int  # puts in the one-put-per-entry on_sync scenario
    always: int  # puts in the fsync-per-entry scenario
    batched: int  # puts in the batched scenarios, records in the log-append scenario


@dataclass
class Row:
    key: str
    scenario: str
    ops: int
    seconds: float
    rate: float
    unit: str
    target: float | None = None

    @property
    def status(self) -> str:
        if self.target is None:
            return ""
        return "PASS" if self.rate >= self.target else "MISS"

    def cells(self) -> tuple[str, ...]:
        timed = self.seconds > 0
        return (
            self.scenario,
            f"{self.ops:,}" if timed else "-",
            f"{self.seconds:.3f}" if timed else "-",
            f"{self.rate:,.1f}" if self.unit in ("MB/s", "MiB") else f"{self.rate:,.0f}",
            self.unit,
            f">= {self.target:,.0f}" if self.target is not None else "",
            self.status,
        )


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def build_entries(n_puts: int, batch_size: int) -> list[bytes]:
    """Entry bytes for n_puts distinct keys, batch_size puts per entry."""
    entries = []
    for start in range(0, n_puts, batch_size):
        keys = range(start, min(start + batch_size, n_puts))
        commands = tuple(Put(b"key/%08d" % i, VALUE) for i in keys)
        entries.append(encode_entry(Batch(commands, TIMESTAMP_MS + start)))
    return entries


def time_apply(data_dir: Path, config: StorageConfig, entries: list[bytes], n_puts: int) -> float:
    storage = open_storage(data_dir, config)
    try:
        machine = StateMachine.over(storage)
        apply = machine.apply
        started = time.perf_counter()
        for raft_index, entry in enumerate(entries, start=1):
            apply(raft_index, entry)
        storage.sync()  # the node's durability point: one sync after the group
        elapsed = time.perf_counter() - started
        if machine.applied_offset != n_puts:
            raise SystemExit(f"applied offset {machine.applied_offset} != {n_puts}")
    finally:
        storage.close()
    return elapsed


def apply_row(scenario: ApplyScenario, n_puts: int, data_dir: Path) -> Row:
    key, name, config, batch_size, target = scenario
    # Encode before the timed loop: the proposer encodes entries, apply() only decodes.
    entries = build_entries(n_puts, batch_size)
    progress(f"start {key}: {n_puts:,} puts in {len(entries):,} entries")
    seconds = time_apply(data_dir, config, entries, n_puts)
    row = Row(key, name, n_puts, seconds, n_puts / seconds, "puts/s", target)
    progress(f"done  {key}: {seconds:.3f}s, {row.rate:,.0f} puts/s {row.status}")
    return row


def log_append_row(n_records: int, batch_size: int = 1000) -> Row:
    records = [
        Record(o, o, TIMESTAMP_MS, RecordOp.PUT, b"key/%08d" % o, VALUE)
        for o in range(1, n_records + 1)
    ]
    batches = [records[i : i + batch_size] for i in range(0, n_records, batch_size)]
    progress(f"start log_append: {n_records:,} records in batches of {batch_size}")
    with tempfile.TemporaryDirectory(prefix="rkv-bench-") as tmp:
        log = CommitLog.open(Path(tmp) / LOG_DIR, ON_SYNC)
        started = time.perf_counter()
        for batch in batches:
            log.append(batch)
        log.sync()
        seconds = time.perf_counter() - started
        size = log.size_bytes
        log.close()
    row = Row(
        "log_append", "log append, 1000/append", n_records, seconds, size / 1e6 / seconds, "MB/s"
    )
    progress(f"done  log_append: {size / 1e6:.1f} MB in {seconds:.3f}s, {row.rate:.1f} MB/s")
    return row


def replay_row(data_dir: Path, config: StorageConfig, expected: int) -> Row:
    """Drop LMDB and time open_storage rebuilding it from the commit log."""
    LmdbStore.destroy(data_dir / STATE_DIR)
    progress(f"start replay: rebuilding LMDB from {expected:,} log records")
    started = time.perf_counter()
    storage = open_storage(data_dir, config)
    seconds = time.perf_counter() - started
    replayed = storage.replayed_records
    storage.close()
    if replayed != expected:
        raise SystemExit(f"replayed {replayed} records, expected {expected}")
    row = Row(
        "replay", "replay into empty LMDB", replayed, seconds, replayed / seconds, "records/s"
    )
    progress(f"done  replay: {seconds:.3f}s, {row.rate:,.0f} records/s")
    return row


def rss_row() -> Row:
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return Row("peak_rss", "peak RSS (whole run)", 0, 0.0, peak_kib / 1024, "MiB")


def run(counts: Counts) -> list[Row]:
    rows = []
    for scenario, n_puts in (
        (SINGLE_ON_SYNC, counts.single),
        (SINGLE_ALWAYS, counts.always),
        (BATCH_100, counts.batched),
    ):
        with tempfile.TemporaryDirectory(prefix="rkv-bench-") as tmp:
            rows.append(apply_row(scenario, n_puts, Path(tmp)))
    with tempfile.TemporaryDirectory(prefix="rkv-bench-") as tmp:  # batch 1000, then replay it
        rows.append(apply_row(BATCH_1000, counts.batched, Path(tmp)))
        rows.append(replay_row(Path(tmp), ON_SYNC, counts.batched))
    rows.append(log_append_row(counts.batched))
    rows.append(rss_row())
    return rows


def format_table(rows: list[Row]) -> str:
    lines = [HEADER, *(row.cells() for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]

    def fmt(line: tuple[str, ...]) -> str:
        first = line[0].ljust(widths[0])
        return "  ".join([first, *(c.rjust(w) for c, w in zip(line[1:], widths[1:], strict=True))])

    return "\n".join([fmt(HEADER), "  ".join("-" * w for w in widths), *map(fmt, lines[1:])])


def bar_chart(rows: list[Row]) -> str:
    """Inline SVG: one horizontal bar per apply scenario, dashed target lines."""
    label_w, bar_w, bar_h, gap, top = 250, 480, 22, 8, 30
    scale = max([r.rate for r in rows] + [TARGET_BATCH_1000]) * 1.1
    height = top + len(rows) * (bar_h + gap) + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 110}" '
        f'height="{height}" font-family="sans-serif" font-size="12">'
    ]
    for i, row in enumerate(rows):
        y, width = top + i * (bar_h + gap), bar_w * row.rate / scale
        color = {"PASS": "#2a9d4b", "MISS": "#d1495b"}.get(row.status, "#4a7ab5")
        parts += [
            f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end">'
            f"{html.escape(row.scenario)}</text>",
            f'<rect x="{label_w}" y="{y}" width="{width:.1f}" height="{bar_h}" fill="{color}"/>',
            f'<text x="{label_w + width + 4:.1f}" y="{y + 15}">{row.rate:,.0f}/s</text>',
        ]
    for target, label in ((TARGET_SINGLE, "20k/s single"), (TARGET_BATCH_1000, "200k/s b1000")):
        x = label_w + bar_w * target / scale
        parts += [
            f'<line x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" y2="{height - 6}" '
            'stroke="#333" stroke-dasharray="4 3"/>',
            f'<text x="{x:.1f}" y="{top - 10}" text-anchor="middle">target {label}</text>',
        ]
    return "\n".join([*parts, "</svg>"])


def render_html(rows: list[Row], meta: str) -> str:
    head = "".join(f"<th>{h}</th>" for h in HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row.cells()) + "</tr>"
        for row in rows
    )
    chart = bar_chart([r for r in rows if r.unit == "puts/s"])
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>rkv storage benchmark</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
th,td{{border:1px solid #ccc;padding:3px 10px;text-align:right}}
th:first-child,td:first-child{{text-align:left}}</style></head>
<body><h1>rkv storage benchmark</h1><p>{html.escape(meta)}</p>
<table><tr>{head}</tr>{body}</table>
<h2>Apply throughput (puts/s)</h2>
{chart}
</body></html>
"""


def write_results(out: Path, rows: list[Row], counts: Counts, meta: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "meta": meta,
        "counts": asdict(counts),
        "targets": {BATCH_1000.key: TARGET_BATCH_1000, SINGLE_ON_SYNC.key: TARGET_SINGLE},
        "rows": [asdict(row) | {"status": row.status} for row in rows],
    }
    (out / "storage.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "storage.html").write_text(render_html(rows, meta))


def parse_counts(argv: list[str] | None) -> tuple[Counts, Path]:
    parser = argparse.ArgumentParser(description="Benchmark the rkv storage core.")
    parser.add_argument("--ops", type=int, help="puts per scenario (default 200000, 1-put 50000)")
    parser.add_argument("--quick", action="store_true", help="small counts for a smoke run")
    out = Path(__file__).resolve().parent / "results"
    parser.add_argument("--out", type=Path, default=out, help="default bench/results")
    args = parser.parse_args(argv)
    batched, single = (20_000, 5_000) if args.quick else (200_000, 50_000)
    if args.ops is not None:
        if args.ops < 1:
            parser.error("--ops must be positive")
        batched = single = args.ops
    always = min(2_000, max(single // 10, 1) if args.quick else single)  # fsync per entry: slow
    return Counts(single, always, batched), args.out


def main(argv: list[str] | None = None) -> None:
    counts, out = parse_counts(argv)
    python = sys.version.split()[0]
    meta = f"{time.strftime('%F %T')}, Python {python}, scratch in {tempfile.gettempdir()}"
    progress(meta)
    rows = run(counts)
    write_results(out, rows, counts, meta)
    print(format_table(rows))
    print(f"results written to {out / 'storage.json'} and {out / 'storage.html'}")


if __name__ == "__main__":
    main()
