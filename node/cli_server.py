"""The `rkv up`, `rkv node` and `rkv check` commands (composition root).

These import the server stack (raft and pysyncobj, LMDB, aiohttp's server);
node/cli.py imports this module only when one of them runs.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from node.cluster_runner import RAFT_PORT_OFFSET, run_cluster
from node.errors import ConfigError
from node.join import discover
from node.recovery import open_storage
from node.server import run_node
from node.settings import node_config
from node.storage_config import StorageConfig


def run(args: argparse.Namespace) -> int:
    """Run ``args.command``; returns the exit status."""
    return _COMMANDS[args.command](args)


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
        discovery = None
        if config.join_url is not None:
            # The running cluster's members become this node's peers.
            discovery = discover(config.join_url)
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
    run_node(config, discovery)
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


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "up": _cmd_up,
    "node": _cmd_node,
    "check": _cmd_check,
}
