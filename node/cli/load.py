"""`rkv load FILE`: a bulk load of JSON Lines or CSV through POST /v1/kv:load.

- JSON Lines (``--format jsonl``, the default unless FILE ends in .csv): one
  ``{"key": K, "value": V}`` per line, sent as it is; keys and values are text
  (``--encoding utf-8``, the default here) or base64 (``--encoding base64``).
- CSV (``--format csv``): two columns, key and value. A first row that is
  exactly ``key,value`` is a header and skipped (``--no-header``: never skip
  it). With ``--encoding base64`` each cell is base64.

Progress goes to stderr (lines committed of the total, keys/s). After each
committed chunk the number of input units committed (JSON Lines: lines, blank
ones included; CSV: data rows) is written to a small state file, FILE.rkv-load
next to the input or ``--state PATH``; ``--resume`` skips that many and loads
the rest. The state file is removed once the whole input is loaded. Sending a
chunk again is harmless: a put of the same value leaves the same value (only
the version moves), so a resume from a state a little behind is safe.

Exit status: 0 loaded, 1 refused by the server (a bad line: the message names
its line, everything before it is committed and recorded), 2 usage error,
3 cluster unreachable or unable to serve (resume with --resume).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import csv
import io
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from http_api.client import (
    ClusterUnreachableError,
    LoadInterrupted,
    LoadProgress,
    RkvClient,
    RkvClientError,
    UnavailableError,
)
from node.cli.common import (
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    add_urls_argument,
    node_urls,
    positive_float,
)
from node.cli.credential_flags import add_credentials_arguments, credentials_from

STATE_SUFFIX = ".rkv-load"
PROGRESS_EVERY = 1.0  # seconds between progress lines on stderr


class _UsageError(Exception):
    """Bad input found after argument parsing (exit 2)."""


def add_commands(sub: Any) -> None:
    parser = sub.add_parser(
        "load",
        help="bulk load a JSON Lines or CSV file of keys and values (resumable)",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="exit status: 0 loaded, 1 refused (a bad line), 2 usage error, "
        "3 cluster unreachable or unable to serve (then --resume)",
    )
    parser.add_argument("file", type=Path, help="the input file")
    parser.add_argument(
        "--format", choices=("jsonl", "csv"), help="default: csv for *.csv, else jsonl"
    )
    parser.add_argument(
        "--encoding",
        choices=("utf-8", "base64"),
        default="utf-8",
        help="how keys and values are written in the file (default utf-8: text)",
    )
    parser.add_argument(
        "--no-header", action="store_true", help="CSV: the first row is data even if key,value"
    )
    parser.add_argument(
        "--resume", action="store_true", help="skip what the state file says is committed"
    )
    parser.add_argument("--state", type=Path, help=f"the state file (default FILE{STATE_SUFFIX})")
    parser.add_argument(
        "--quiet", action="store_true", help="no progress on stderr, only the summary"
    )
    add_urls_argument(parser)
    parser.add_argument(
        "--timeout", type=positive_float, default=10.0, help="seconds to connect (default 10)"
    )
    add_credentials_arguments(parser)
    parser.set_defaults(run=run)


# -- the state file ------------------------------------------------------------------


def state_path(args: argparse.Namespace) -> Path:
    state: Path | None = args.state
    return state if state is not None else args.file.with_name(args.file.name + STATE_SUFFIX)


def read_state(path: Path, source: Path) -> int:
    """How many input units the state file says are committed (0 without one)."""
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return 0
    except (OSError, ValueError) as exc:
        raise _UsageError(f"cannot read the state file {path}: {exc}") from None
    if not isinstance(state, dict) or not isinstance(state.get("committed"), int):
        raise _UsageError(f"{path} is not an rkv load state file")
    if state.get("input") != str(source.resolve()):
        raise _UsageError(f"{path} records a load of {state.get('input')}, not of {source}")
    return int(state["committed"])


def write_state(path: Path, source: Path, committed: int, loaded: int) -> None:
    """Record progress atomically (a crash leaves the old state or the new one)."""
    temporary = path.with_name(path.name + ".tmp")
    body = {"input": str(source.resolve()), "committed": committed, "loaded": loaded}
    temporary.write_text(json.dumps(body) + "\n")
    os.replace(temporary, path)


# -- the input -----------------------------------------------------------------------


def count_lines(path: Path) -> int:
    """The lines of ``path`` (a last line without a newline counts)."""
    count = 0
    last = b"\n"
    with path.open("rb") as source:
        while block := source.read(1 << 20):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def _cell(text: str, encoding: str, row: int, what: str) -> bytes:
    if encoding == "utf-8":
        return text.encode()
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _UsageError(f"row {row}: the {what} is not base64") from None


def csv_pairs(path: Path, encoding: str, header: bool) -> Iterator[tuple[bytes, bytes]]:
    """The data rows of a CSV file as (key, value); a usage error names a bad row."""
    with path.open(newline="", encoding="utf-8") as source:
        for row_number, row in enumerate(csv.reader(source), 1):
            if row_number == 1 and header and [c.strip().lower() for c in row] == ["key", "value"]:
                continue
            if len(row) != 2:
                raise _UsageError(f"row {row_number}: {len(row)} columns, not key,value")
            yield (
                _cell(row[0], encoding, row_number, "key"),
                _cell(row[1], encoding, row_number, "value"),
            )


def _has_header(path: Path) -> bool:
    with path.open(newline="", encoding="utf-8") as source:
        first = next(csv.reader(io.StringIO(source.readline())), [])
    return [c.strip().lower() for c in first] == ["key", "value"]


# -- running -------------------------------------------------------------------------


class _Progress:
    """Progress on stderr and in the state file after each committed chunk."""

    def __init__(self, args: argparse.Namespace, total: int, skipped: int) -> None:
        self.args = args
        self.total = total
        self.skipped = skipped
        self.started = time.monotonic()
        self.shown = 0.0
        self.last = LoadProgress(0, skipped, 0)

    def __call__(self, progress: LoadProgress) -> None:
        self.last = progress
        write_state(state_path(self.args), self.args.file, progress.lines, progress.loaded)
        now = time.monotonic()
        if not self.args.quiet and now - self.shown >= PROGRESS_EVERY:
            self.shown = now
            rate = progress.loaded / max(now - self.started, 1e-9)
            print(
                f"rkv load: {progress.lines:,}/{self.total:,} committed ({rate:,.0f} keys/s)",
                file=sys.stderr,
            )


def _load(client: RkvClient, args: argparse.Namespace) -> int:
    path: Path = args.file
    if not path.is_file():
        raise _UsageError(f"{path}: no such file")
    kind = args.format or ("csv" if path.suffix.lower() == ".csv" else "jsonl")
    state = state_path(args)
    skip = read_state(state, path) if args.resume else 0
    if not args.resume and state.exists() and not args.quiet:
        print(
            f"rkv load: {state} records an earlier load; loading from the start "
            "(--resume skips what it records)",
            file=sys.stderr,
        )
    if kind == "csv":
        header = not args.no_header and _has_header(path)
        total = max(0, count_lines(path) - header)
        pairs = csv_pairs(path, args.encoding, header)
        meter = _Progress(args, total, skip)
        result = client.load(pairs, skip=skip, progress=meter)
    else:
        total = count_lines(path)
        meter = _Progress(args, total, skip)
        result = client.load(path, skip=skip, encoding=args.encoding, progress=meter)
    state.unlink(missing_ok=True)
    seconds = time.monotonic() - meter.started
    unit = "rows" if kind == "csv" else "lines"
    resumed = f", {skip:,} {unit} skipped (committed before)" if skip else ""
    print(
        f"rkv load: {result.loaded:,} keys loaded from {result.lines - skip:,} {unit} "
        f"in {seconds:.1f} s ({result.loaded / max(seconds, 1e-9):,.0f} keys/s){resumed}; "
        f"version {result.version}",
        file=sys.stderr,
    )
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        with RkvClient(
            node_urls(args.url), timeout=args.timeout, credentials=credentials_from(args)
        ) as client:
            return _load(client, args)
    except LoadInterrupted as exc:
        state = state_path(args)
        write_state(state, args.file, exc.progress.lines, exc.progress.loaded)
        print(
            f"rkv load: {exc.message} [{exc.code}]; {exc.progress.lines:,} committed, recorded "
            f"in {state} (fix the input if need be and run again with --resume)",
            file=sys.stderr,
        )
        if isinstance(exc.cause, ClusterUnreachableError | UnavailableError) or (
            exc.code == "unreachable"
        ):
            return EXIT_UNREACHABLE
        return EXIT_REFUSED
    except RkvClientError as exc:
        print(f"rkv load: {exc.message} [{exc.code}]", file=sys.stderr)
        if isinstance(exc, ClusterUnreachableError | UnavailableError):
            return EXIT_UNREACHABLE
        return EXIT_REFUSED
    except (_UsageError, ValueError, UnicodeDecodeError, csv.Error) as exc:
        print(f"rkv load: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"rkv load: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(
            f"rkv load: interrupted; what is committed is recorded in {state_path(args)} "
            "(run again with --resume)",
            file=sys.stderr,
        )
        return 130
