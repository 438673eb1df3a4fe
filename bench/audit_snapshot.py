"""Audit snapshot benchmark (not a test): the cut and the exports on a real cluster.

    python -m bench.audit_snapshot [--keys 1000000] [--quick] [--engines python,spark]

Starts a 3-node cluster (`rkv up`), loads K keys of 100 bytes through the leader,
then, with a writer putting keys the whole time, takes an audit cut
(POST /v1/audit) and waits until every node's export is finished. Reports the
cut's latency, each node's export time (its manifest's ``seconds``), the time
until the last export was done, and the writes acknowledged while the exports
ran (writes do not stop). Then audits the real exports in place with each
engine (the Spark session start apart), as `rkv audit --exports-dir` would.
Table on stdout, JSON and HTML in --out.
"""

from __future__ import annotations

import argparse
import html
import json
import shutil
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.audit import run as run_engine
from bench.procs import Processes, interrupt_on_signals
from bench.rebuild import load
from bench.rkv_cluster import find_leader, start
from bench.support import http_request, progress, wait_until
from node.cli.audit_cut import Exports, wait_for_exports

WORK = Path(tempfile.gettempdir()) / "rkv-bench-audit-snapshot"


class Writer(threading.Thread):
    """Puts keys one by one until stopped; counts the acknowledged ones."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.acked = 0

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            request = urllib.request.Request(
                f"{self.url}/v1/kv/bench-writer%2F{n}", data=b"x" * 100, method="PUT"
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    self.acked += response.status == 200
            except OSError:
                time.sleep(0.1)


def current_leader(urls: tuple[str, ...]) -> str:
    """The leader now (it may have changed during the load)."""
    found: list[str] = []
    wait_until("a leader in /v1/status", lambda: find_leader(urls, found), 30)
    return found[0]


def exports_done(urls: tuple[str, ...], audit_id: str, cut: int) -> tuple[Exports, float]:
    """Every node's export (node/cli/audit_cut.py's waiter: a node that caught up
    past the cut without applying it is reported, not waited for) and when the last
    one was seen done."""
    members = {f"n{i}": url for i, url in enumerate(urls)}  # rkv up's ids
    exports = wait_for_exports(audit_id, members, total=1800, per_request=30, cut_index=cut)
    return exports, time.monotonic()


def measure(work: Path, keys: int, engines: list[str], master: str) -> dict[str, Any]:
    interrupt_on_signals()
    with Processes() as procs:
        cluster = start(procs, work)
        progress(f"loading {keys:,} keys through {cluster.leader_url}")
        load_s = load(cluster.leader_url, keys)
        leader = current_leader(cluster.urls)
        writer = Writer(leader)
        writer.start()
        time.sleep(2)
        before = writer.acked
        began = time.monotonic()
        code, body = http_request(f"{leader}/v1/audit", "POST", {"audit_id": "bench"}, timeout=30)
        cut_s = time.monotonic() - began
        if code != 200:
            raise SystemExit(f"POST /v1/audit answered {code}: {body[:300]!r}")
        started = json.loads(body)
        progress(f"cut at raft index {started['raft_index']} in {cut_s * 1000:.0f} ms")
        exports, last = exports_done(cluster.urls, "bench", int(started["raft_index"]))
        manifests = exports.done
        if not exports.complete:
            progress(
                f"exports not done: failed {exports.failed}, pending {sorted(exports.pending)}"
            )
        writes_during = writer.acked - before
        writer.stop.set()
        writer.join(10)
    export_s = last - began
    root = work / "exports"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for node in manifests:  # rkv up: node i keeps its data in <dir>/rkv/n<i>
        (root / node).symlink_to(work / "rkv" / node / "audit" / "bench" / node)
    runs = [run_engine(root, work / "reports", engine, master) for engine in engines]
    return {
        "keys": keys,
        "load_seconds": round(load_s, 1),
        "cut_ms": round(cut_s * 1000, 1),
        "exports_done_seconds": round(export_s, 2),
        "writes_acked_during_exports": writes_during,
        "writes_per_second_during_exports": round(writes_during / max(export_s, 1e-9)),
        "missed": exports.failed,
        "nodes": [
            {
                "replica": m["replica"],
                "seconds": m["seconds"],
                "keys": m["key_count"],
                "log_records": m["log_records"],
                "keys_per_second": round(m["key_count"] / max(m["seconds"], 1e-9)),
            }
            for m in manifests.values()
        ],
        "audits": runs,
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        f"keys {result['keys']:,}; cut {result['cut_ms']} ms; every export done "
        f"{result['exports_done_seconds']} s after the cut; "
        f"{result['writes_acked_during_exports']:,} writes acknowledged meanwhile "
        f"({result['writes_per_second_during_exports']:,}/s, one client)",
        f"{'node':>6} {'export s':>10} {'keys':>11} {'log records':>12} {'keys/s':>10}",
    ]
    for n in result["nodes"]:
        lines.append(
            f"{n['replica']:>6} {n['seconds']:>10.1f} {n['keys']:>11,} "
            f"{n['log_records']:>12,} {n['keys_per_second']:>10,}"
        )
    lines.append(f"{'engine':>6} {'audit s':>10} {'session s':>11} {'status':>12} {'keys/s':>10}")
    for r in result["audits"]:
        lines.append(
            f"{r['engine']:>6} {r['audit_seconds']:>10.1f} {r['session_seconds']:>11.1f} "
            f"{r['status']:>12} {r['keys_per_second']:>10,}"
        )
    return "\n".join(lines)


def write_html(path: Path, result: dict[str, Any]) -> None:
    body = html.escape(table(result))
    path.write_text(
        "<!doctype html><meta charset=utf-8><title>rkv audit snapshot benchmark</title>"
        f"<h1>Audit snapshot on a 3-node cluster</h1><pre>{body}</pre>"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="100 000 keys")
    parser.add_argument("--engines", default="python,spark")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    keys = 100_000 if args.quick else args.keys
    engines = [e for e in args.engines.split(",") if e]
    result = measure(args.work, keys, engines, args.master)
    print(table(result))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "audit_snapshot.json").write_text(json.dumps(result, indent=2))
    write_html(args.out / "audit_snapshot.html", result)
    print(f"wrote {args.out / 'audit_snapshot.json'} and {args.out / 'audit_snapshot.html'}")


if __name__ == "__main__":
    main()
