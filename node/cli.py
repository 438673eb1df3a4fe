"""The `rkv` command line (composition root: nothing imports this module)."""

from __future__ import annotations

import argparse
import logging
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from node.errors import RkvError
from node.recovery import open_storage
from node.storage_config import StorageConfig


def _version() -> str:
    try:
        return version("rkv")
    except PackageNotFoundError:
        return "unknown"


def _cmd_up(args: argparse.Namespace) -> int:
    print(
        "rkv: the local cluster (`rkv up`: raft replication, the REST API, the client)\n"
        "arrives with the next issue. The storage core is here today:\n"
        "  rkv check --data-dir DIR    open a data directory, recover it, print its state"
    )
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
    up = sub.add_parser("up", help="run a local cluster (arrives with the cluster issue)")
    up.set_defaults(func=_cmd_up)
    check = sub.add_parser("check", help="open and recover a data directory, print its state")
    check.add_argument("--data-dir", type=Path, required=True)
    check.set_defaults(func=_cmd_check)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
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
