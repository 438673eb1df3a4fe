"""The `rkv` command line: the parser and the dispatch (composition root).

The commands live in node/cli_server.py (up, node, check: the server stack),
node/cli_client.py (put, get, delete, incr, append, scan, txn, compact,
status, producer init: the blocking client) and node/cli_audit_snapshot.py (audit
snapshot); only the one that runs is imported.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from http_api.client import CONSISTENCY_LEVELS, DEFAULT_URL
from node.errors import RkvError
from node.settings import add_node_arguments

SERVER_COMMANDS = ("up", "node", "check")
REDIS_COMMANDS = ("redis-replicate", "redis-dump")
BASE64_MARK = "base64:"  # how the client commands show bytes that are not text
URL_ENV = "RKV_URL"


def _version() -> str:
    try:
        return version("rkv")
    except PackageNotFoundError:
        return "unknown"


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def _non_negative_int(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, not {text!r}")
    return int(text)


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


MAX_INT64 = 2**63 - 1


def _signed_int64(text: str) -> int:
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()):
        raise argparse.ArgumentTypeError(f"must be an integer, not {text!r}")
    value = int(text)
    if not -MAX_INT64 - 1 <= value <= MAX_INT64:
        raise argparse.ArgumentTypeError("must be a signed 64-bit integer")
    return value


def producer_triple(text: str) -> tuple[int, int, int]:
    """``ID:EPOCH:SEQ``, three non-negative integers (what ``--producer`` takes)."""
    parts = text.split(":")
    if len(parts) != 3 or not all(
        p.isascii() and p.isdigit() and len(p) <= 19 and int(p) <= MAX_INT64 for p in parts
    ):
        raise argparse.ArgumentTypeError(
            f"must be ID:EPOCH:SEQ, three non-negative integers (as from "
            f"'rkv producer init' and a sequence counted from 0), not {text!r}"
        )
    producer_id, epoch, sequence = (int(p) for p in parts)
    return producer_id, epoch, sequence


def _add_client_commands(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url",
        action="append",
        metavar="URL",
        help=f"a node URL; repeat it or separate URLs with commas "
        f"(default: ${URL_ENV} or {DEFAULT_URL})",
    )
    common.add_argument(
        "--timeout", type=_positive_float, default=10.0, help="seconds per request (default 10)"
    )
    reads = argparse.ArgumentParser(add_help=False)
    reads.add_argument("--consistency", choices=CONSISTENCY_LEVELS, default="linearizable")
    reads.add_argument(
        "--min-version", type=_non_negative_int, help="wait until the node has applied this"
    )
    producing = argparse.ArgumentParser(add_help=False)
    producing.add_argument(
        "--producer",
        type=producer_triple,
        metavar="ID:EPOCH:SEQ",
        help="write as idempotent producer ID (from 'rkv producer init') at EPOCH with "
        "sequence SEQ (0, 1, 2... per epoch): the server applies each sequence once, so "
        "retrying with the same triple is safe; a repeat prints its original answer and "
        "a note on stderr. The write is resent on unknown outcomes for max(15 s, --timeout)",
    )
    epilog = (
        "exit status: 0 ok, 1 refused by the server (not found, conflict, invalid), "
        "2 usage error, 3 cluster unreachable or unable to serve"
    )

    def command(name: str, help_text: str, *parents: argparse.ArgumentParser) -> Any:
        return sub.add_parser(name, help=help_text, parents=[common, *parents], epilog=epilog)

    put = command("put", "set a key; prints the new version", producing)
    put.add_argument("key")
    put.add_argument("value", help="the value, or - to read it from stdin")
    condition = put.add_mutually_exclusive_group()
    condition.add_argument(
        "--if-version", type=_non_negative_int, metavar="N", help="only if the version is N"
    )
    condition.add_argument(
        "--create-only", action="store_true", help="only if the key does not exist"
    )

    get = command("get", "print a key's value (raw bytes) on stdout", reads)
    get.add_argument("key")
    get.add_argument(
        "-v", "--show-version", action="store_true", help="print the version on stderr"
    )

    delete = command("delete", "delete a key; prints the tombstone's version", producing)
    delete.add_argument("key")
    delete.add_argument(
        "--if-version", type=_non_negative_int, metavar="N", help="only if the version is N"
    )

    incr = command(
        "incr", "add to the decimal integer at a key (absent: 0); prints the new value", producing
    )
    incr.add_argument("key")
    incr.add_argument(
        "--by", type=_signed_int64, default=1, metavar="N", help="signed 64-bit (default 1)"
    )

    append = command(
        "append", "append to a key's value (absent: create it); prints the new size", producing
    )
    append.add_argument("key")
    append.add_argument("value", help="the bytes to append, or - to read them from stdin")

    scan = command(
        "scan",
        "list keys with a prefix: key<TAB>version<TAB>value lines "
        f"(non-text shown as {BASE64_MARK}...)",
        reads,
    )
    scan.add_argument("prefix", nargs="?", default="")
    scan.add_argument("--limit", type=_positive_int, help="at most this many keys (default all)")
    scan.add_argument("--page-size", type=_positive_int, default=500, help="keys per request")
    scan.add_argument("--start-after", metavar="CURSOR", help="a next cursor from --json")
    scan.add_argument("--json", action="store_true", help="one JSON document (base64 bytes)")
    scan.add_argument("--utf-8", action="store_true", help="with --json: keys and values as text")

    txn = command(
        "txn",
        "run a transaction given as the API's JSON (compare / success / failure)",
        producing,
    )
    txn.add_argument("file", help="a JSON file, or - for stdin")
    txn.add_argument(
        "--utf-8", action="store_true", help="keys and values are text (default base64)"
    )

    compact = command(
        "compact",
        "force a compaction of the commit log on each node named by --url "
        "(every node compacts its own log)",
    )
    compact.add_argument("--json", action="store_true", help="the raw results")

    status = command("status", "the cluster's members, roles and leader")
    status.add_argument("--json", action="store_true", help="the raw /v1/status of one node")

    producer = sub.add_parser("producer", help="idempotent producers (see --producer)")
    actions = producer.add_subparsers(dest="producer_command", required=True)
    init = actions.add_parser(
        "init",
        parents=[common],
        epilog=epilog,
        help="register a producer; prints 'ID EPOCH' (its first write is --producer ID:EPOCH:0)",
    )
    init.add_argument(
        "--transactional-id",
        metavar="T",
        help="the same T again keeps the producer id with the next epoch, "
        "which fences the older epochs",
    )
    init.add_argument("--json", action="store_true", help='{"producer_id": ..., "epoch": ...}')


def _add_cluster_commands(sub: Any) -> None:
    cluster = sub.add_parser(
        "cluster",
        help="list, add or remove voting members (one change at a time)",
        epilog="exit status: 0 ok, 1 refused by the server (unknown id, change in "
        "progress, last member), 2 usage error, 3 cluster unreachable or unable to serve",
    )
    actions = cluster.add_subparsers(dest="cluster_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url",
        action="append",
        metavar="URL",
        help=f"a node URL; repeat it or separate URLs with commas "
        f"(default: ${URL_ENV} or {DEFAULT_URL}); changes are sent on to the leader",
    )
    common.add_argument(
        "--timeout", type=_positive_float, default=30.0, help="seconds per request (default 30)"
    )
    common.add_argument("--json", action="store_true", help="print the raw answer")
    actions.add_parser("members", parents=[common], help="the voting members")
    add = actions.add_parser(
        "add",
        parents=[common],
        help="add a member (its node must be running: rkv node --join does this itself)",
    )
    add.add_argument("id")
    add.add_argument("raft_address", metavar="RAFT_HOST:PORT")
    add.add_argument("member_url", metavar="HTTP_URL")
    remove = actions.add_parser("remove", parents=[common], help="remove a member by id")
    remove.add_argument("id")


def _add_snapshot_commands(sub: Any) -> None:
    snapshot = sub.add_parser("snapshot", help="save a node's consistent export, or restore one")
    actions = snapshot.add_subparsers(dest="snapshot_command", required=True)
    save = actions.add_parser("save", help="download GET /v1/snapshot from a node to FILE")
    save.add_argument("file", type=Path)
    save.add_argument(
        "--url", default=None, help=f"the node (default: ${URL_ENV} or {DEFAULT_URL})"
    )
    save.add_argument("--timeout", type=_positive_float, default=600.0)
    restore = actions.add_parser(
        "restore", help="seed a new, empty data directory from a snapshot FILE"
    )
    restore.add_argument("file", type=Path)
    restore.add_argument("--data-dir", type=Path, required=True)
    restore.add_argument(
        "--keep-raft-index",
        action="store_true",
        help="rebuild a lost member of the same cluster in place (default: a new cluster)",
    )
    restore.add_argument("--max-value-bytes", type=_positive_int, default=None)


def _run_snapshot(args: argparse.Namespace) -> int:
    from node.cli_snapshot import restore_snapshot_command, save_snapshot  # noqa: PLC0415

    if args.snapshot_command == "save":
        url = args.url or os.environ.get(URL_ENV) or DEFAULT_URL
        return save_snapshot(url, args.file, timeout=args.timeout)
    options = {} if args.max_value_bytes is None else {"max_value_bytes": args.max_value_bytes}
    return restore_snapshot_command(
        args.file, args.data_dir, keep_raft_index=args.keep_raft_index, **options
    )


def _add_audit_commands(sub: Any) -> None:
    """``rkv audit``: the consistency audit (DESIGN.md section 10). ``snapshot`` takes the
    cut (node/cli_audit_snapshot.py); ``run`` compares exports (spark_tools/, through
    node/cli_audit.py); ``rkv audit --url URL`` with no action does both, downloading the
    exports (node/cli_audit_all.py). Each module is imported lazily: the client
    commands never import the audit (pyarrow, pyspark)."""
    from node.cli_audit_all import add_audit_all_arguments  # noqa: PLC0415

    audit = sub.add_parser(
        "audit",
        help="consistency audit across replicas",
        description="With --url and no action: take a cut, wait for every member's export, "
        "download them and compare them (node/cli_audit_all.py, docs/AUDIT.md).",
        epilog="exit status: 0 consistent, 1 divergent, 2 usage error, "
        "3 inconsistent or incomplete cut, 4 the audit failed",
    )
    add_audit_all_arguments(audit, DEFAULT_URL, URL_ENV)
    actions = audit.add_subparsers(dest="audit_command", metavar="ACTION")
    snapshot = actions.add_parser(
        "snapshot",
        help="take a consistent cut through the raft log: every node exports its state "
        "and log at the same raft index; prints the audit id and the raft index",
        epilog="exit status: 0 ok, 1 refused by the server, 2 usage error, "
        "3 cluster unreachable, unable to serve, an export failed, or --wait timed out",
    )
    snapshot.add_argument(
        "--url",
        action="append",
        metavar="URL",
        help=f"a node URL; repeat it or separate URLs with commas (default: ${URL_ENV} or "
        f"{DEFAULT_URL}); the audit is started on the leader",
    )
    snapshot.add_argument(
        "--buckets", type=_positive_int, default=None, help="key-range buckets, 1..1024 (16)"
    )
    snapshot.add_argument("--id", dest="audit_id", metavar="ID", help="the audit id (default: new)")
    snapshot.add_argument(
        "--wait",
        action="store_true",
        help="poll every node until its export is done; print each node's manifest summary",
    )
    snapshot.add_argument(
        "--timeout",
        type=_positive_float,
        default=600.0,
        help="seconds: the longest --wait, and at most 30 per request (default 600)",
    )
    snapshot.add_argument("--json", action="store_true", help="print the raw answers")
    # `rkv audit run` (the comparison, spark_tools/). node.cli_audit imports only the
    # light spark_tools.audit_args here; the audit itself (pyspark) only when it runs.
    from node.cli_audit import add_audit_run_arguments  # noqa: PLC0415

    run = actions.add_parser(
        "run",
        help="compare the replicas' exports of one audit and write a report (docs/AUDIT.md)",
        epilog="exit status: 0 consistent, 1 divergent, 2 usage error, "
        "3 inconsistent or incomplete cut, 4 the audit failed",
    )
    add_audit_run_arguments(run)


def _run_audit(args: argparse.Namespace) -> int:
    if args.audit_command == "snapshot":
        from node.cli_audit_snapshot import run_audit_snapshot  # noqa: PLC0415

        return run_audit_snapshot(args)
    if args.audit_command == "run":
        from node.cli_audit import run_audit_command  # noqa: PLC0415

        return run_audit_command(args)
    from node.cli_audit_all import run_audit_all  # noqa: PLC0415

    return run_audit_all(args)


def _add_redis_commands(sub: Any) -> None:
    # The parsers are small; the replicator itself is imported only when it runs.
    from node.cli_redis import add_redis_commands  # noqa: PLC0415

    add_redis_commands(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rkv", description="rkv: a Raft-replicated KV store")
    parser.add_argument("--version", action="version", version=f"rkv {_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="run a local cluster on loopback in the foreground")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--data-dir", type=Path, default=Path("rkv-data"))
    up.add_argument("--base-port", type=int, default=8001, help="node i serves HTTP on this + i")
    up.add_argument(
        "--node-arg", dest="node_args", action="append", help="extra flag for every node"
    )
    node = sub.add_parser("node", help="run one node (flags or RKV_* variables)")
    add_node_arguments(node)
    check = sub.add_parser("check", help="open and recover a data directory, print its state")
    check.add_argument("--data-dir", type=Path, required=True)
    _add_client_commands(sub)
    _add_cluster_commands(sub)
    _add_snapshot_commands(sub)
    _add_audit_commands(sub)
    _add_redis_commands(sub)
    return parser


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command ``args`` names; returns the exit status."""
    # Imported here, not at the top, so that the client commands (put, get, ...) do not
    # import the server stack node.cli_server needs (pysyncobj, lmdb, aiohttp.web).
    if args.command in SERVER_COMMANDS:
        from node.cli_server import run  # noqa: PLC0415
    elif args.command == "snapshot":
        run = _run_snapshot
    elif args.command == "audit":
        run = _run_audit
    elif args.command in REDIS_COMMANDS:
        from node.cli_redis import run_redis as run  # noqa: PLC0415
    elif args.command == "cluster":
        from node.cli_client import run_cluster as run  # noqa: PLC0415
    else:
        from node.cli_client import run  # noqa: PLC0415
    return run(args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose or args.command in ("node", "up") else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code = _dispatch(args)
    except RkvError as exc:
        print(f"rkv: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
