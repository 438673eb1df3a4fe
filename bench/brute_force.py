"""Brute-force benchmark (not a test): a well-behaved client's throughput on a cluster
with TLS and auth on, alone and while a stranger guesses root's password (issue 16).

A fresh 3-node cluster with TLS and auth (bench/rkv_secure.py); the well-behaved client
(bench/limits_client.py: 16 keep-alive connections from 127.0.0.1, PUT then GET, with a
bearer token) is measured for ``--seconds`` alone, then again while a guesser in a
process of its own (threads bound to 127.0.0.2, each on a keep-alive connection) sends
wrong passwords for root as fast as the node answers, half as HTTP Basic on GET
/v1/status, half to POST /v1/auth/token. Reported: the client's ops/s and share of the
undisturbed, the guesser's tally (401 wrong password, 429 too_many_failed_logins), and
how many guesses the node hashed at most (the failed-login limits: 10 per user and
address and 100 per address a minute, checked before any scrypt). Target (printed, never
asserted): >= 90 % of the undisturbed ops/s, and every guess past the limits refused 429.

Run from the repository root: ``python -m bench.brute_force [--seconds 15]``. Every node
and process is stopped by PID, also on errors and Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import multiprocessing
import ssl
import tempfile
import threading
from collections import Counter
from multiprocessing.queues import Queue
from pathlib import Path
from urllib.parse import urlsplit

from bench import rkv_secure
from bench.limits_client import CONNECTIONS, Served, WellBehavedClient
from bench.procs import Processes, interrupt_on_signals
from bench.support import BenchError, progress

GUESSER = "127.0.0.2"
GUESS_THREADS = 4
TARGET_SHARE = 0.9


def _guess(url: str, cafile: str, stop: threading.Event, tally: Counter[str]) -> None:
    import http.client  # noqa: PLC0415 - in the guesser's own process

    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    context = ssl.create_default_context(cafile=cafile)
    connection = http.client.HTTPSConnection(
        parts.hostname, parts.port, timeout=30, context=context, source_address=(GUESSER, 0)
    )
    n = 0
    try:
        while not stop.is_set():
            n += 1
            password = f"guess-{n}"
            if n % 2:
                pair = base64.b64encode(f"root:{password}".encode()).decode()
                connection.request("GET", "/v1/status", headers={"Authorization": f"Basic {pair}"})
            else:
                body = json.dumps({"user": "root", "password": password})
                headers = {"Content-Type": "application/json"}
                connection.request("POST", "/v1/auth/token", body=body, headers=headers)
            answer = connection.getresponse()
            data = answer.read()
            try:
                code = json.loads(data).get("code", "-")
            except ValueError:
                code = "-"
            tally[f"{answer.status} {code}"] += 1
            if answer.getheader("Connection", "").lower() == "close":
                connection.close()
    except OSError as error:
        tally[f"socket: {type(error).__name__}"] += 1
    finally:
        connection.close()


def _guesser(url: str, cafile: str, stop: object, out: Queue[dict[str, int]]) -> None:
    tallies = [Counter[str]() for _ in range(GUESS_THREADS)]
    flag = threading.Event()
    threads = [
        threading.Thread(target=_guess, args=(url, cafile, flag, t), daemon=True) for t in tallies
    ]
    for thread in threads:
        thread.start()
    stop.wait()  # type: ignore[attr-defined]  # a multiprocessing Event
    flag.set()
    for thread in threads:
        thread.join(30)
    out.put(dict(sum(tallies, Counter())))


async def _measure(cluster: rkv_secure.SecureCluster, seconds: float, prefix: str) -> Served:
    headers = (("Authorization", f"Bearer {cluster.token}"),)
    async with WellBehavedClient(
        cluster.leader_url, prefix, headers=headers, cafile=cluster.cafile
    ) as client:
        await asyncio.sleep(1.0)
        client.start_counting()
        await asyncio.sleep(seconds)
        client.stop_counting()
    return client.served


def run(seconds: float) -> None:
    with Processes() as procs:
        scratch = Path(tempfile.mkdtemp(prefix="rkv-bench-brute-"))
        progress(f"starting a 3-node cluster with TLS and auth in {scratch}")
        cluster = rkv_secure.start(procs, scratch)
        progress(f"undisturbed: {seconds:g} s against {cluster.leader_url}")
        alone = asyncio.run(_measure(cluster, seconds, "brute/alone/"))
        context = multiprocessing.get_context("spawn")
        stop = context.Event()
        out: Queue[dict[str, int]] = context.Queue()
        guesser = context.Process(
            target=_guesser, args=(cluster.leader_url, cluster.cafile, stop, out)
        )
        guesser.start()
        try:
            progress(f"under brute force: {seconds:g} s")
            attacked = asyncio.run(_measure(cluster, seconds, "brute/attacked/"))
        finally:
            stop.set()
            tally = out.get(timeout=90)
            guesser.join(30)
    share = attacked.ops_per_s / alone.ops_per_s if alone.ops_per_s else 0.0
    guesses = sum(v for k, v in tally.items() if k[:3].isdigit())
    refused = sum(v for k, v in tally.items() if k.startswith("429"))
    wrong = sum(v for k, v in tally.items() if k.startswith("401"))
    print(f"{'phase':<14}{'ops/s':>8}{'p99 ms':>9}  other errors")
    for name, served in (("undisturbed", alone), ("brute force", attacked)):
        errors = sum(served.errors.values())
        print(f"{name:<14}{served.ops_per_s:>8,.0f}{served.percentile_ms(99):>9.1f}  {errors}")
    print(f"the client kept {share:.0%} of its undisturbed ops/s ({CONNECTIONS} connections)")
    print(f"the guesser sent {guesses:,} wrong passwords: {wrong:,} answered 401, {refused:,} 429")
    print(f"its tally: {dict(tally)}")
    met = share >= TARGET_SHARE and refused >= guesses - wrong and wrong <= 100 * (1 + seconds / 60)
    print(f"target: >= {TARGET_SHARE:.0%} of the undisturbed ops/s, guesses past the limits "
          f"refused 429: {'MET' if met else 'MISSED'}")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=15.0, help="per phase (default 15)")
    args = parser.parse_args(argv)
    interrupt_on_signals()
    try:
        run(args.seconds)
    except BenchError as error:
        raise SystemExit(f"brute-force benchmark failed: {error}") from None


if __name__ == "__main__":
    main()
