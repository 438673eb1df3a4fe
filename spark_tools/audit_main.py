"""The audit as a Spark application::

    spark-submit --master spark://host:7077 spark_tools/audit_main.py --exports DIR [...]
    python spark_tools/audit_main.py --exports DIR            # local[*]

The master is never chosen here: spark-submit's (or spark-defaults.conf's)
wins, and only a run with none configured uses local[*]. Exit statuses are
run_audit's (spark_tools/audit_run.py).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def _ensure_importable() -> None:
    # spark-submit runs this file as a script, with spark_tools/ (not the source
    # root) first on sys.path: put the tree holding this file first, so that it
    # is this tree's audit that runs (an installed rkv is then found the same).
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)


def main(argv: list[str] | None = None) -> int:
    _ensure_importable()
    from spark_tools.audit_args import add_audit_arguments, run_options  # noqa: PLC0415
    from spark_tools.audit_run import run_audit  # noqa: PLC0415

    parser = argparse.ArgumentParser(
        prog="audit_main.py", description="rkv consistency audit of replicas' exports"
    )
    add_audit_arguments(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return run_audit(out=args.out, **run_options(args))


if __name__ == "__main__":
    sys.exit(main())
