"""The audit's command-line options, shared by `rkv audit run` and spark_tools/audit_main.py.

Light on purpose: node/cli/main.py builds these options on every `rkv` invocation,
so nothing here imports the audit itself (pyarrow, pyspark).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ENGINES = ("spark", "python")
DEFAULT_SAMPLES = 20
DEFAULT_OUT = Path("audit-report")


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def _paths(text: str) -> list[Path]:
    return [Path(p) for p in text.split(",") if p]


def add_audit_arguments(parser: argparse.ArgumentParser, *, default_engine: str = "spark") -> None:
    parser.add_argument(
        "--exports",
        required=True,
        nargs="+",
        type=_paths,
        metavar="DIR",
        help="an audit's export directory (<root>/<audit id>, one subdirectory per replica) "
        "or the replicas' export directories (space- or comma-separated)",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"where the report goes ({DEFAULT_OUT})"
    )
    parser.add_argument("--engine", choices=ENGINES, default=default_engine)
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master URL (default: spark-submit's, else local[*])",
    )
    parser.add_argument(
        "--samples",
        type=_count,
        default=DEFAULT_SAMPLES,
        help=f"divergent keys shown in the report ({DEFAULT_SAMPLES})",
    )
    parser.add_argument(
        "--max-divergence-rate",
        type=_rate,
        default=0.0,
        help="divergent keys / distinct keys tolerated before FAIL (0: any divergence fails)",
    )
    parser.add_argument(
        "--replicas",
        type=_count,
        default=None,
        metavar="N",
        help="INCONCLUSIVE unless exactly N replicas' exports are found",
    )
    parser.add_argument(
        "--skip-log-check",
        action="store_true",
        help="do not check the states against the logs, nor the logs against each other",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def export_paths(args: argparse.Namespace) -> list[Path]:
    return [path for group in args.exports for path in group]


def run_options(args: argparse.Namespace) -> dict[str, Any]:
    """run_audit's keyword arguments from parsed options (all but ``out``)."""
    return {
        "exports": export_paths(args),
        "engine": args.engine,
        "master": args.master,
        "samples": args.samples,
        "max_divergence_rate": args.max_divergence_rate,
        "check_logs": not args.skip_log_check,
        "expected_replicas": args.replicas,
        "progress": None if args.quiet else sys.stderr,
    }
