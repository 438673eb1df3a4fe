"""`rkv audit`: the consistency audit's command family (DESIGN.md section 10).

``rkv audit snapshot`` (or ``rkv audit cut``) takes the cut (node/cli/audit_cut.py);
``rkv audit run`` compares exports (spark_tools/, through node/cli/audit_run.py);
``rkv audit --url URL`` with no action does both, downloading the exports
(node/cli/audit_all.py). The audit engines (pyarrow, pyspark) load only when a
comparison runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from node.cli.audit_all import add_audit_all_arguments, run_audit_all
from node.cli.audit_cut import run_audit_cut
from node.cli.audit_run import add_audit_run_arguments, run_audit_command
from node.cli.common import add_urls_argument, positive_float, positive_int
from node.cli.credential_flags import add_credentials_arguments


def add_commands(sub: Any) -> None:
    audit = sub.add_parser(
        "audit",
        help="consistency audit across replicas",
        description="With --url and no action: take a cut, wait for every member's export, "
        "download them and compare them (node/cli/audit_all.py, docs/AUDIT.md).",
        epilog="exit status: 0 consistent, 1 divergent, 2 usage error, "
        "3 inconsistent or incomplete cut, 4 the audit failed",
    )
    audit.set_defaults(run=run)
    add_audit_all_arguments(audit)
    add_credentials_arguments(audit)
    actions = audit.add_subparsers(dest="audit_command", metavar="ACTION")
    snapshot = actions.add_parser(
        "snapshot",
        aliases=["cut"],
        help="take a consistent cut through the raft log: every node exports its state "
        "and log at the same raft index; prints the audit id and the raft index",
        epilog="exit status: 0 ok, 1 refused by the server, 2 usage error, "
        "3 cluster unreachable, unable to serve, an export failed, or --wait timed out",
    )
    add_urls_argument(snapshot, "; the audit is started on the leader")
    snapshot.add_argument(
        "--buckets", type=positive_int, default=None, help="key-range buckets, 1..1024 (16)"
    )
    snapshot.add_argument("--id", dest="audit_id", metavar="ID", help="the audit id (default: new)")
    snapshot.add_argument(
        "--wait",
        action="store_true",
        help="poll every node until its export is done; print each node's manifest summary",
    )
    snapshot.add_argument(
        "--timeout",
        type=positive_float,
        default=600.0,
        help="seconds: the longest --wait, and at most 30 per request (default 600)",
    )
    snapshot.add_argument("--json", action="store_true", help="print the raw answers")
    add_credentials_arguments(snapshot)
    # `rkv audit run` (the comparison, spark_tools/): node.cli.audit_run imports only the
    # light spark_tools.audit_args here; the audit itself (pyspark) only when it runs.
    comparison = actions.add_parser(
        "run",
        help="compare the replicas' exports of one audit and write a report (docs/AUDIT.md)",
        epilog="exit status: 0 consistent, 1 divergent, 2 usage error, "
        "3 inconsistent or incomplete cut, 4 the audit failed",
    )
    add_audit_run_arguments(comparison)


def run(args: argparse.Namespace) -> int:
    if args.audit_command in ("snapshot", "cut"):
        return run_audit_cut(args)
    if args.audit_command == "run":
        return run_audit_command(args)
    return run_audit_all(args)
