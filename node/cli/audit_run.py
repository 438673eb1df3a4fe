"""`rkv audit run`: the consistency audit of replicas' exports (docs/AUDIT.md).

Composition root: node/cli/main.py adds these options to its ``audit run`` parser
and calls :func:`run_audit_command`. The audit itself (spark_tools/) is
imported only when it runs, and pyspark only by its Spark engine.
Exit status: 0 consistent, 1 divergent beyond the threshold, 2 usage error,
3 inconsistent or incomplete cut, 4 the audit failed.
"""

from __future__ import annotations

import argparse


def add_audit_run_arguments(parser: argparse.ArgumentParser) -> None:
    from spark_tools.audit_args import add_audit_arguments  # noqa: PLC0415

    add_audit_arguments(parser)


def run_audit_command(args: argparse.Namespace) -> int:
    from spark_tools.audit_args import run_options  # noqa: PLC0415
    from spark_tools.audit_run import run_audit  # noqa: PLC0415

    return run_audit(out=args.out, **run_options(args))
