"""The `rkv` command line (composition root: nothing imports this module)."""

from __future__ import annotations

import argparse
import logging
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from node.cluster_runner import RAFT_PORT_OFFSET, run_cluster
from node.errors import ConfigError, RkvError
from node.recovery import open_storage
from node.server import run_node
from node.settings import add_node_arguments, node_config
from node.storage_config import StorageConfig


def _version() -> str:
    try:
        return version("rkv")
    except PackageNotFoundError:
        return "unknown"


def _cmd_up(args: argparse.Namespace) -> int:
    if not 1 <= args.nodes <= 9:
        print("rkv: --nodes must be between 1 and 9", file=sys.stderr)
        return 2
    if not 1024 <= args.base_port <= 65535 - RAFT_PORT_OFFSET - args.nodes:
        print("rkv: --base-port must leave room for the HTTP and raft ports", file=sys.stderr)
        return 2
    return run_cluster(args.nodes, args.data_dir, args.base_port, list(args.node_args or []))


def _cmd_node(args: argparse.Namespace) -> int:
    try:
        config = node_config(args)
    except ConfigError as exc:
        print(f"rkv node: {exc}", file=sys.stderr)
        return 2
    logging.getLogger().setLevel(config.log_level)
    run_node(config)
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    data_dir: Path = args.data_dir
    if not data_dir.is_dir():
        print(f"rkv: {data_dir} is not a directory", file=sys.stderr)
        return 1
    storage = open_storage(data_dir, StorageConfig())
    try:
        log, store = storage.commit_log, storage.store
        with store.reader() as view:
            keys = view.count()
            internal = view.count(include_internal=True) - keys
        rows = [
            ("data directory", str(data_dir)),
            ("log segments", str(log.segment_count)),
            ("log bytes", str(log.size_bytes)),
            ("first offset", str(log.first_offset)),
            ("last offset", str(log.last_offset)),
            ("applied raft index", str(store.applied_index)),
            ("applied offset", str(store.applied_offset)),
            ("keys", str(keys)),
            ("internal keys", str(internal)),
            ("records replayed on open", str(storage.replayed_records)),
        ]
        width = max(len(name) for name, _ in rows)
        for name, value in rows:
            print(f"{name:<{width}}  {value}")
    finally:
        storage.close()
    return 0


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
    up.set_defaults(func=_cmd_up)
    node = sub.add_parser("node", help="run one node (flags or RKV_* variables)")
    add_node_arguments(node)
    node.set_defaults(func=_cmd_node)
    check = sub.add_parser("check", help="open and recover a data directory, print its state")
    check.add_argument("--data-dir", type=Path, required=True)
    check.set_defaults(func=_cmd_check)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose or args.command in ("node", "up") else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code: int = args.func(args)
    except RkvError as exc:
        print(f"rkv: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
