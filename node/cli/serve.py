"""The `rkv up`, `rkv node` and `rkv check` commands: their arguments and handlers.

The handlers import the server stack (raft and pysyncobj, LMDB, aiohttp's
server) when they run, so that the client commands never load it.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from node.cli.local_cluster import RAFT_PORT_OFFSET, run_cluster
from node.cli.settings import add_node_arguments, node_config
from node.errors import ConfigError


def add_commands(sub: Any) -> None:
    up = sub.add_parser("up", help="run a local cluster on loopback in the foreground")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--data-dir", type=Path, default=Path("rkv-data"))
    up.add_argument("--base-port", type=int, default=8001, help="node i serves HTTP on this + i")
    up.add_argument(
        "--node-arg", dest="node_args", action="append", help="extra flag for every node"
    )
    up.set_defaults(run=_cmd_up)
    node = sub.add_parser("node", help="run one node (flags or RKV_* variables)")
    add_node_arguments(node)
    node.set_defaults(run=_cmd_node)
    worker = sub.add_parser("http-worker", help="(started by `rkv node --http-workers`)")
    worker.add_argument("--link-fd", type=int, required=True)
    worker.add_argument("--parent-pid", type=int, required=True)
    worker.add_argument("--tls", action="store_true")
    worker.set_defaults(run=_cmd_http_worker)
    check = sub.add_parser("check", help="open and recover a data directory, print its state")
    check.add_argument("--data-dir", type=Path, required=True)
    check.set_defaults(run=_cmd_check)


def _cmd_up(args: argparse.Namespace) -> int:
    if not 1 <= args.nodes <= 9:
        print("rkv: --nodes must be between 1 and 9", file=sys.stderr)
        return 2
    if not 1024 <= args.base_port <= 65535 - RAFT_PORT_OFFSET - args.nodes:
        print("rkv: --base-port must leave room for the HTTP and raft ports", file=sys.stderr)
        return 2
    return run_cluster(args.nodes, args.data_dir, args.base_port, list(args.node_args or []))


def _cmd_node(args: argparse.Namespace) -> int:
    from node.cli.join import discover  # noqa: PLC0415 (the server stack: only when it runs)
    from node.cli.json_logs import use_log_format  # noqa: PLC0415
    from node.cli.wiring import run_node  # noqa: PLC0415
    from node.service.auth_tokens import member_headers  # noqa: PLC0415

    try:
        config = node_config(args)
        use_log_format(config.diagnostics.log_format, config.node_id)
        discovery = None
        if config.join_url is not None:
            # The running cluster's members become this node's peers.
            discovery = discover(
                config.join_url,
                credentials=config.tls.peer_credentials,
                headers=member_headers(config.secret, config.node_id),  # auth (issue 16)
            )
            me = config.raft.self_member
            peers = [
                f"{m.node_id},{m.raft_address},{m.http_url}"
                for m in discovery.members
                if m.node_id != me.node_id and m.raft_address != me.raft_address
            ]
            args.peers = peers or None
            config = node_config(args)
    except ConfigError as exc:
        print(f"rkv node: {exc}", file=sys.stderr)
        return 2
    logging.getLogger().setLevel(config.log_level)
    try:
        run_node(config, discovery)
    except ConfigError as exc:  # the checks that need the node's state (node/cli/wiring.py)
        print(f"rkv node: {exc}", file=sys.stderr)
        return 2
    return 0


def _cmd_http_worker(args: argparse.Namespace) -> int:
    from node.cli.http_worker import run_http_worker  # noqa: PLC0415 (the server stack)

    return run_http_worker(args)


def _cmd_check(args: argparse.Namespace) -> int:
    from node.storage.config import StorageConfig  # noqa: PLC0415 (lmdb: only when it runs)
    from node.storage.recovery import open_storage  # noqa: PLC0415

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
