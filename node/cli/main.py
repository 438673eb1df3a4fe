"""The `rkv` command line: one parser built from the command families, and the dispatch.

Each family keeps its arguments and its handler together in its own module
(serve: up, node, check; client: put, get, delete, incr, append, scan, txn,
compact, status, producer init; cluster; alarm; auth; user; role; lease; lock; elect;
snapshot; audit; redis; certs), registers
its handler with ``set_defaults(run=...)``, and imports what only its handler
needs (the server stack, the audit engines, the replicator) when it runs.
"""

from __future__ import annotations

import argparse
import logging
import sys

from node.cli import (
    alarm,
    audit,
    auth,
    certs,
    client,
    cluster,
    elect,
    lease,
    load,
    lock,
    redis,
    role,
    serve,
    snapshot,
    user,
)
from node.cli.common import rkv_version
from node.errors import RkvError

FAMILIES = (
    serve,
    client,
    load,
    cluster,
    alarm,
    auth,
    user,
    role,
    lease,
    lock,
    elect,
    snapshot,
    audit,
    redis,
    certs,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rkv", description="rkv: a Raft-replicated KV store")
    parser.add_argument("--version", action="version", version=f"rkv {rkv_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    for family in FAMILIES:
        family.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO
        if args.verbose or args.command in ("node", "up", "http-worker")
        else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code: int = args.run(args)
    except RkvError as exc:
        print(f"rkv: {exc}", file=sys.stderr)
        return 1
    return code
