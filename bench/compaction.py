"""Compaction benchmark (not a test): throughput and peak RSS of node/storage/compaction.py.

For each size, a log of N records over N/10 distinct keys (each key overwritten
about 10 times, 100-byte values) is built through StateMachine.apply (entries of
1000 puts, fsync on_sync, 64 MiB segments) and its active segment rolled, so
every record is in a closed segment. Then one compaction runs in a fresh
process (multiprocessing 'spawn'), whose own peak RSS is what is reported; the
build also runs in its own process, for contrast. Afterwards the log is read
from offset 0 and must hold exactly one record per key, each the key's latest
version in LMDB: a benchmark of a broken compaction would be worthless.

The machine's sequential write speed (Python writes in 4 MiB blocks, one fsync
at the end) is measured in the same run on the same scratch disk.

Run from the repository root: ``python -m bench.compaction [--quick] [--sizes N,N]``.
Scratch data goes to the system temporary directory (set TMPDIR to pick the disk)
and is deleted afterwards. Note that the compaction reads a log the build has
just written, so it is mostly served from the page cache.
"""

from __future__ import annotations

import argparse
import html
import json
import multiprocessing
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from node.state.commands import Batch, Put, encode_entry
from node.state.machine import StateMachine
from node.storage.compaction import CompactionPolicy, compact
from node.storage.config import FsyncPolicy, StorageConfig
from node.storage.record import RecordOp
from node.storage.recovery import open_storage

VALUE = bytes(range(100))  # 100-byte values
TIMESTAMP_MS = 1_700_000_000_000
PUTS_PER_ENTRY = 1000
LIVE_FRACTION = 10  # one distinct key per this many records
SEGMENT_BYTES = 64 * 1024 * 1024
CONFIG = StorageConfig(fsync=FsyncPolicy.ON_SYNC, segment_bytes=SEGMENT_BYTES)
TARGET_MB_S = 50.0  # compaction throughput, MB of log read per second
TARGET_RSS_MIB = 300.0  # peak RSS of the compacting process
FULL_SIZES = (1_000_000, 5_000_000)
QUICK_SIZES = (100_000, 200_000)
PROGRESS_SECONDS = 3.0
DISK_BLOCK = 4 * 1024 * 1024
HEADER = (
    "records",
    "keys",
    "log MB before",
    "log MB after",
    "seconds",
    "MB/s",
    "records/s",
    "% of disk",
    "peak RSS MiB",
    "end RSS anon+file",
    "build RSS MiB",
    "disk write MB/s",
    "MB/s >= 50",
    "RSS < 300",
)


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def current_rss_mib() -> dict[str, float]:
    """RssAnon / RssFile of this process now (file pages include LMDB's map)."""
    found: dict[str, float] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in ("RssAnon", "RssFile"):
                    found[name] = int(rest.split()[0]) / 1024
    except OSError:
        pass
    return found


# -- disk ---------------------------------------------------------------------------


def disk_write_mb_s(directory: Path, total_bytes: int) -> float:
    """Sequential write speed: ``total_bytes`` in 4 MiB os.write calls, one fsync."""
    block = os.urandom(DISK_BLOCK)  # incompressible, in case the disk compresses
    path = directory / "disk-write-test"
    progress(f"measuring sequential write: {total_bytes / 2**20:,.0f} MiB to {directory}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        started = time.perf_counter()
        written = 0
        while written < total_bytes:
            written += os.write(fd, block)
        os.fsync(fd)
        seconds = time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink()
    rate = written / 1e6 / seconds
    progress(f"disk write: {written / 1e6:,.0f} MB in {seconds:.2f}s = {rate:,.1f} MB/s")
    return rate


# -- the child processes ------------------------------------------------------------


def entries(n_records: int, distinct: int) -> Iterator[bytes]:
    """Entries of 1000 puts cycling over ``distinct`` keys, built one at a time."""
    for start in range(0, n_records, PUTS_PER_ENTRY):
        commands = tuple(
            Put(b"key/%08d" % (i % distinct), VALUE)
            for i in range(start, min(start + PUTS_PER_ENTRY, n_records))
        )
        yield encode_entry(Batch(commands, TIMESTAMP_MS + start))


def build_log(data_dir: str, n_records: int, distinct: int) -> dict[str, Any]:
    """(Child process) apply the puts, roll the active segment, close."""
    started = last = time.perf_counter()
    storage = open_storage(Path(data_dir), CONFIG)
    try:
        machine = StateMachine.over(storage)
        apply = machine.apply
        for raft_index, entry in enumerate(entries(n_records, distinct), start=1):
            apply(raft_index, entry)
            now = time.perf_counter()
            if now - last >= PROGRESS_SECONDS:
                last = now
                done = machine.applied_offset
                progress(
                    f"  building: {done:,}/{n_records:,} puts applied "
                    f"({done / (now - started):,.0f} puts/s)"
                )
        storage.sync()
        storage.commit_log.roll()  # close the active segment: compaction sees it all
        applied = machine.applied_offset
        segments = storage.commit_log.segment_count
        log_bytes = storage.commit_log.size_bytes
    finally:
        storage.close()
    if applied != n_records:
        raise RuntimeError(f"applied offset {applied} != {n_records} records")
    return {
        "seconds": time.perf_counter() - started,
        "segments": segments,
        "log_bytes": log_bytes,
        "peak_rss_mib": peak_rss_mib(),
    }


def run_compaction(data_dir: str) -> dict[str, Any]:
    """(Child process) open the data directory and compact every closed segment."""
    opened = time.perf_counter()
    storage = open_storage(Path(data_dir), CONFIG)
    open_seconds = time.perf_counter() - opened
    rss_after_open = peak_rss_mib()
    first_callback: list[float] = []
    last = [0.0]
    progress(f"  compacting (open took {open_seconds:.2f}s)")

    def report(examined: int, total: int) -> None:
        """compact() reports bytes of log examined out of the closed segments' size."""
        now = time.perf_counter()
        if not first_callback:
            first_callback.append(now - started)
        if now - last[0] >= PROGRESS_SECONDS or examined == total:
            last[0] = now
            rate = examined / max(now - started, 1e-9) / 1e6
            progress(
                f"  compacting: {examined / 1e6:,.0f}/{total / 1e6:,.0f} MB examined "
                f"({rate:,.1f} MB/s, peak RSS {peak_rss_mib():,.0f} MiB)"
            )

    try:
        started = time.perf_counter()
        result = compact(
            storage.commit_log,
            storage.store,
            CompactionPolicy(),
            CONFIG.segment_bytes,
            progress=report,
        )
        seconds = time.perf_counter() - started
        rss_now = current_rss_mib()
    finally:
        storage.close()
    return {
        "result": asdict(result),
        "seconds": seconds,
        "open_seconds": open_seconds,
        "first_progress_seconds": first_callback[0] if first_callback else 0.0,
        "peak_rss_mib": peak_rss_mib(),
        "rss_after_open_mib": rss_after_open,
        "rss_anon_end_mib": rss_now.get("RssAnon", 0.0),
        "rss_file_end_mib": rss_now.get("RssFile", 0.0),
    }


def in_fresh_process(function: Any, *args: Any) -> dict[str, Any]:
    """Run ``function(*args)`` in a new 'spawn' process (its own ru_maxrss)."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        result: dict[str, Any] = pool.submit(function, *args).result()
    return result


# -- verification -------------------------------------------------------------------


def verify(data_dir: Path, distinct: int) -> int:
    """Read the compacted log from 0: one put per key, each the key's LMDB version."""
    storage = open_storage(data_dir, CONFIG)
    try:
        seen: set[bytes] = set()
        count = 0
        with storage.store.reader() as view:
            if view.count() != distinct:
                raise SystemExit(f"LMDB holds {view.count()} keys, expected {distinct}")
            for record in storage.commit_log.read(0):
                count += 1
                if record.op is not RecordOp.PUT:
                    raise SystemExit(f"unexpected tombstone at offset {record.offset}")
                if record.key in seen:
                    raise SystemExit(f"key {record.key!r} kept twice (offset {record.offset})")
                seen.add(record.key)
                stored = view.get(record.key)
                if stored is None or stored.version != record.offset or record.value != VALUE:
                    raise SystemExit(
                        f"record at offset {record.offset} for {record.key!r} is not the "
                        f"key's latest version ({stored!r:.80})"
                    )
        if storage.replayed_records:
            raise SystemExit(f"reopening replayed {storage.replayed_records} records")
    finally:
        storage.close()
    if count != distinct:
        raise SystemExit(f"compacted log holds {count} records, expected {distinct} (one per key)")
    return count


# -- one size -----------------------------------------------------------------------


@dataclass
class Row:
    records: int
    distinct_keys: int
    segments_before: int
    segments_after: int
    log_mb_before: float
    log_mb_after: float
    seconds: float
    mb_per_s: float
    records_per_s: float
    peak_rss_mib: float
    build_rss_mib: float
    build_seconds: float
    disk_write_mb_s: float
    count_pass_seconds: float  # until compact()'s first progress call: its counting pass
    rss_anon_end_mib: float
    rss_file_end_mib: float
    verified_records: int

    @property
    def speed_status(self) -> str:
        return "PASS" if self.mb_per_s >= TARGET_MB_S else "MISS"

    @property
    def rss_status(self) -> str:
        return "PASS" if self.peak_rss_mib < TARGET_RSS_MIB else "MISS"

    def cells(self) -> tuple[str, ...]:
        return (
            f"{self.records:,}",
            f"{self.distinct_keys:,}",
            f"{self.log_mb_before:,.1f}",
            f"{self.log_mb_after:,.1f}",
            f"{self.seconds:.2f}",
            f"{self.mb_per_s:,.1f}",
            f"{self.records_per_s:,.0f}",
            f"{100 * self.mb_per_s / self.disk_write_mb_s:.0f}%",
            f"{self.peak_rss_mib:,.1f}",
            f"{self.rss_anon_end_mib:,.0f}+{self.rss_file_end_mib:,.0f}",
            f"{self.build_rss_mib:,.1f}",
            f"{self.disk_write_mb_s:,.1f}",
            self.speed_status,
            self.rss_status,
        )


def measure(n_records: int, scratch: Path, disk_mb_s: float) -> Row:
    distinct = max(n_records // LIVE_FRACTION, PUTS_PER_ENTRY)
    data_dir = scratch / f"log-{n_records}"
    progress(f"building {n_records:,} records over {distinct:,} keys in a fresh process")
    built = in_fresh_process(build_log, str(data_dir), n_records, distinct)
    progress(
        f"built: {built['log_bytes'] / 1e6:,.1f} MB in {built['segments']} segments "
        f"in {built['seconds']:.1f}s (build process peak RSS {built['peak_rss_mib']:,.0f} MiB)"
    )
    progress("compacting in a fresh process")
    done = in_fresh_process(run_compaction, str(data_dir))
    result = done["result"]
    seconds = done["seconds"]
    progress(
        f"compacted: {result['records_before']:,} -> {result['records_kept']:,} records, "
        f"{result['segments_before']} -> {result['segments_after']} segments "
        f"in {seconds:.2f}s (counting pass {done['first_progress_seconds']:.2f}s), "
        f"peak RSS {done['peak_rss_mib']:,.1f} MiB "
        f"(after open {done['rss_after_open_mib']:,.1f}; at the end anon "
        f"{done['rss_anon_end_mib']:,.1f} + file {done['rss_file_end_mib']:,.1f})"
    )
    if result["records_before"] != n_records:
        raise SystemExit(f"compaction examined {result['records_before']} of {n_records} records")
    progress("verifying: reading the compacted log from offset 0")
    verified = verify(data_dir, distinct)
    progress(f"verified: {verified:,} records, one per key, each the latest version")
    shutil.rmtree(data_dir)  # free the disk for the next size
    return Row(
        records=n_records,
        distinct_keys=distinct,
        segments_before=result["segments_before"],
        segments_after=result["segments_after"],
        log_mb_before=result["bytes_before"] / 1e6,
        log_mb_after=result["bytes_after"] / 1e6,
        seconds=seconds,
        mb_per_s=result["bytes_before"] / 1e6 / seconds,
        records_per_s=result["records_before"] / seconds,
        peak_rss_mib=done["peak_rss_mib"],
        build_rss_mib=built["peak_rss_mib"],
        build_seconds=built["seconds"],
        disk_write_mb_s=disk_mb_s,
        count_pass_seconds=done["first_progress_seconds"],
        rss_anon_end_mib=done["rss_anon_end_mib"],
        rss_file_end_mib=done["rss_file_end_mib"],
        verified_records=verified,
    )


# -- report -------------------------------------------------------------------------


def format_table(rows: list[Row]) -> str:
    lines = [HEADER, *(row.cells() for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]

    def fmt(line: tuple[str, ...]) -> str:
        return "  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True))

    return "\n".join([fmt(HEADER), "  ".join("-" * w for w in widths), *map(fmt, lines[1:])])


def bar_chart(bars: list[tuple[str, float, str]], unit: str, lines: list[tuple[float, str]]) -> str:
    """Inline SVG: one horizontal bar per (label, value, status), dashed reference lines."""
    label_w, bar_w, bar_h, gap, top = 150, 460, 22, 8, 34
    scale = max([v for _, v, _ in bars] + [v for v, _ in lines] + [1.0]) * 1.1
    height = top + len(bars) * (bar_h + gap) + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 120}" '
        f'height="{height}" font-family="sans-serif" font-size="12">'
    ]
    for i, (label, value, status) in enumerate(bars):
        y, width = top + i * (bar_h + gap), bar_w * value / scale
        color = {"PASS": "#2a9d4b", "MISS": "#d1495b"}.get(status, "#4a7ab5")
        parts += [
            f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end">{html.escape(label)}</text>',
            f'<rect x="{label_w}" y="{y}" width="{width:.1f}" height="{bar_h}" fill="{color}"/>',
            f'<text x="{label_w + width + 4:.1f}" y="{y + 15}">{value:,.1f} {unit}</text>',
        ]
    for i, (value, label) in enumerate(lines):
        x = label_w + bar_w * value / scale
        parts += [
            f'<line x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" y2="{height - 6}" '
            'stroke="#333" stroke-dasharray="4 3"/>',
            f'<text x="{x:.1f}" y="{top - 10 - 12 * i}" text-anchor="middle">'
            f"{html.escape(label)}</text>",
        ]
    return "\n".join([*parts, "</svg>"])


def render_html(rows: list[Row], meta: str) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row.cells()) + "</tr>"
        for row in rows
    )
    disk = rows[0].disk_write_mb_s if rows else 0.0
    speed = bar_chart(
        [(f"{r.records:,} records", r.mb_per_s, r.speed_status) for r in rows],
        "MB/s",
        [(TARGET_MB_S, f"target {TARGET_MB_S:.0f} MB/s"), (disk, f"disk write {disk:,.0f} MB/s")],
    )
    rss = bar_chart(
        [(f"{r.records:,} compaction", r.peak_rss_mib, r.rss_status) for r in rows]
        + [(f"{r.records:,} build", r.build_rss_mib, "") for r in rows],
        "MiB",
        [(TARGET_RSS_MIB, f"target < {TARGET_RSS_MIB:.0f} MiB (compaction)")],
    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>rkv compaction benchmark</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
th,td{{border:1px solid #ccc;padding:3px 10px;text-align:right}}</style></head>
<body><h1>rkv compaction benchmark</h1><p>{html.escape(meta)}</p>
<p>Logs of N records over N/10 keys (about 10 overwrites each, 100-byte values), built
with entries of 1000 puts, fsync on_sync, 64 MiB segments; each compaction runs in a fresh
process. Every compacted log was read back from offset 0 and held exactly one record per
key, each the key's latest version. Peak RSS is the compacting process's ru_maxrss; it
includes LMDB's memory-mapped pages (file-backed, reclaimable), which grow with the number
of keys ("end RSS anon+file" splits the RSS at the end of the compaction).</p>
<table><tr>{head}</tr>{body}</table>
<h2>Compaction throughput (MB of log read per second)</h2>
{speed}
<h2>Peak RSS (MiB)</h2>
{rss}
</body></html>
"""


def write_results(out: Path, rows: list[Row], meta: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "meta": meta,
        "config": {
            "puts_per_entry": PUTS_PER_ENTRY,
            "value_bytes": len(VALUE),
            "records_per_key": LIVE_FRACTION,
            "segment_bytes": SEGMENT_BYTES,
            "fsync": CONFIG.fsync.value,
        },
        "targets": {"mb_per_s": TARGET_MB_S, "peak_rss_mib_below": TARGET_RSS_MIB},
        "rows": [
            asdict(row) | {"speed_status": row.speed_status, "rss_status": row.rss_status}
            for row in rows
        ],
    }
    (out / "compaction.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "compaction.html").write_text(render_html(rows, meta))


# -- main ---------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> tuple[tuple[int, ...], int, Path]:
    parser = argparse.ArgumentParser(description="Benchmark rkv's commit-log compaction.")
    parser.add_argument("--quick", action="store_true", help="100k and 200k records")
    parser.add_argument("--sizes", help="comma-separated record counts (default 1000000,5000000)")
    parser.add_argument(
        "--disk-mib", type=int, help="MiB written to measure the disk (default 1024, quick 256)"
    )
    out = Path(__file__).resolve().parent / "results"
    parser.add_argument("--out", type=Path, default=out, help="default bench/results")
    args = parser.parse_args(argv)
    sizes: tuple[int, ...] = QUICK_SIZES if args.quick else FULL_SIZES
    if args.sizes:
        try:
            sizes = tuple(int(s.replace("_", "")) for s in args.sizes.split(","))
        except ValueError:
            parser.error("--sizes must be comma-separated integers")
        if any(s < PUTS_PER_ENTRY for s in sizes):
            parser.error(f"every size must be at least {PUTS_PER_ENTRY}")
    disk_mib = args.disk_mib if args.disk_mib is not None else 256 if args.quick else 1024
    if disk_mib < 4:
        parser.error("--disk-mib must be at least 4")
    return sizes, disk_mib * 2**20, args.out


def main(argv: list[str] | None = None) -> None:
    sizes, disk_bytes, out = parse_args(argv)
    python = sys.version.split()[0]
    meta = (
        f"{time.strftime('%F %T')}, Python {python}, {os.cpu_count()} CPUs, "
        f"scratch in {tempfile.gettempdir()}"
    )
    progress(meta)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rkv-bench-compaction-") as tmp:
        scratch = Path(tmp)
        disk = disk_write_mb_s(scratch, disk_bytes)
        rows = [measure(n, scratch, disk) for n in sizes]
    write_results(out, rows, meta)
    print(format_table(rows))
    print(
        f"targets: compaction >= {TARGET_MB_S:.0f} MB/s of log read, peak RSS of the "
        f"compacting process < {TARGET_RSS_MIB:.0f} MiB; disk write {disk:,.1f} MB/s "
        f"(4 MiB blocks, one fsync); every compacted log verified one record per key"
    )
    print(
        "end RSS anon+file: the compacting process's RssAnon + RssFile in MiB when it "
        "finished; the file part is mostly LMDB's memory map, which grows with the key count"
    )
    print(f"total {time.perf_counter() - started:.0f}s")
    print(f"results written to {out / 'compaction.json'} and {out / 'compaction.html'}")


if __name__ == "__main__":
    main()
