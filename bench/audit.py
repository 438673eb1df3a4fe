"""Consistency-audit benchmark (not a test): both engines on N replicas x K keys.

Run from the repository root::

    python -m bench.audit [--keys 1000000] [--replicas 3] [--buckets 16] [--quick]

The exports are built with tests/spark/exports.py (node's own writers) under
--work (kept between runs with the same parameters). Replica n2 holds some
divergent keys, all in the first bucket (missing, another value, and keys its
log does not produce), so phase two compares one bucket of 16. Prints a table
and writes bench/results/audit.{json,html}.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spark_tools.audit_run import run_audit
from spark_tools.svg_charts import grouped_bars
from tests.spark.exports import State, even_splits, put, write_export

AUDIT = "bench"
VALUE_BYTES = 100
WORK = Path(tempfile.gettempdir()) / "rkv-bench-audit"
REWRITTEN_EVERY = 10  # one key in 10 was written twice: the log has 1.1 records per key


def _value(i: int, generation: int = 0) -> bytes:
    return (b"%d:%d:" % (generation, i)).ljust(VALUE_BYTES, b".")


def build(root: Path, keys: int, replicas: int, buckets: int, divergent: int) -> Path:
    """The exports under root/<AUDIT>, built unless a previous run left the same ones."""
    params = {"keys": keys, "replicas": replicas, "buckets": buckets, "divergent": divergent}
    stamp = root / "params.json"
    if stamp.exists() and json.loads(stamp.read_text()) == params:
        return root / AUDIT
    began = time.monotonic()
    names = [b"key-%09d" % i for i in range(keys)]
    log = [put(i + 1, key, _value(i)) for i, key in enumerate(names)]
    offset = keys
    state: State = {}
    for i, key in enumerate(names):
        if i % REWRITTEN_EVERY == 0:
            offset += 1
            log.append(put(offset, key, _value(i, 1)))
            state[key] = (offset, _value(i, 1))
        else:
            state[key] = (i + 1, _value(i))
    splits = even_splits(names, buckets)
    for r in range(replicas):
        mine = state
        if r == 1:  # n2: divergent keys at the start of the first bucket
            mine = dict(state)
            for i in range(0, divergent, 2):
                mine[names[i]] = (state[names[i]][0], b"diverged")
            for i in range(1, divergent, 2):
                del mine[names[i]]
        write_export(
            root / AUDIT / f"n{r + 1}",
            AUDIT,
            f"n{r + 1}",
            mine,
            log,
            raft_index=offset + 10,
            applied_offset=offset,
            split_points=splits,
        )
        print(f"built n{r + 1} ({time.monotonic() - began:.0f} s)", file=sys.stderr)
    stamp.write_text(json.dumps(params))
    return root / AUDIT


def run(exports: Path, out: Path, engine: str, master: str) -> dict[str, Any]:
    began = time.monotonic()
    code = run_audit(exports, out / engine, engine=engine, master=master)
    wall = time.monotonic() - began
    report = json.loads((out / engine / "report.json").read_text())
    timings = report["timings"]
    session = timings.get("session_seconds", 0.0)
    keys = sum(r["key_count"] for r in report["replicas"])
    return {
        "engine": engine,
        "exit": code,
        "status": report["status"],
        "state_keys": keys,
        "log_records": sum(r["log_records"] or 0 for r in report["replicas"]),
        "wall_seconds": round(wall, 2),
        "session_seconds": round(session, 2),
        "audit_seconds": round(wall - session, 2),
        "keys_per_second": round(keys / max(wall - session, 1e-9)),
        "phases": {k: v for k, v in timings.items() if k not in ("total_seconds",)},
        "divergent_keys": report["totals"]["divergent_keys"],
        "differing_buckets": len(report["buckets"]["differing"]),
    }


HEAD = ("engine", "wall s", "session s", "audit s", "keys/s", "status", "divergent")


def _cells(r: dict[str, Any]) -> list[str]:
    return [
        r["engine"],
        f"{r['wall_seconds']:.1f}",
        f"{r['session_seconds']:.1f}",
        f"{r['audit_seconds']:.1f}",
        f"{r['keys_per_second']:,}",
        r["status"],
        str(r["divergent_keys"]),
    ]


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["  ".join(f"{h:>10}" for h in HEAD)]
    lines.extend("  ".join(f"{v:>10}" for v in _cells(r)) for r in rows)
    return "\n".join(lines)


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    def row(cells: list[str], tag: str) -> str:
        return "<tr>" + "".join(f"<{tag}>{html.escape(c)}</{tag}>" for c in cells) + "</tr>"

    return "<table>" + row(head, "th") + "".join(row(r, "td") for r in rows) + "</table>"


def write_html(path: Path, params: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    values = {
        (r["engine"], series): r[key]
        for r in rows
        for series, key in (("wall (with session)", "wall_seconds"), ("audit", "audit_seconds"))
    }
    chart = grouped_bars(
        "Audit wall time, seconds",
        [r["engine"] for r in rows],
        ["wall (with session)", "audit"],
        {k: round(v) for k, v in values.items()},
    )
    phases = sorted({p for r in rows for p in r["phases"]})
    summary = _html_table(list(HEAD), [_cells(r) for r in rows])
    per_phase = _html_table(
        ["engine", *phases],
        [[r["engine"], *(f"{r['phases'].get(p, 0):.1f}" for p in phases)] for r in rows],
    )
    path.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>rkv audit benchmark</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:2em}"
        "td,th{padding:2px 10px;text-align:right}</style>"
        f"</head><body><h1>rkv audit benchmark</h1><p>{html.escape(json.dumps(params))}</p>"
        f"{summary}<h2>Seconds per phase</h2>{per_phase}{chart}</body></html>\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--buckets", type=int, default=16)
    parser.add_argument("--divergent", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="100 000 keys")
    parser.add_argument("--engines", default="python,spark")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    keys = 100_000 if args.quick else args.keys
    exports = build(args.work, keys, args.replicas, args.buckets, args.divergent)
    rows = [run(exports, args.work / "reports", e, args.master) for e in args.engines.split(",")]
    params = {
        "keys_per_replica": keys,
        "replicas": args.replicas,
        "buckets": args.buckets,
        "divergent": args.divergent,
        "master": args.master,
    }
    print(table(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "audit.json").write_text(json.dumps({"params": params, "runs": rows}, indent=2))
    write_html(args.out / "audit.html", params, rows)
    print(f"wrote {args.out / 'audit.json'} and {args.out / 'audit.html'}")


if __name__ == "__main__":
    main()
