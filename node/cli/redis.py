"""`rkv redis-replicate` and `rkv redis-dump` (docs/REDIS.md).

Exit status: 0 stopped on request (SIGINT/SIGTERM) or dump written, 1 the
replicator stopped on a command it cannot reproduce or another replicator
owns the prefix, 2 usage error, 3 rkv or Redis unreachable.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from node.cli.common import EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, default_url_help, node_urls

EXIT_STOPPED = 1  # the replicator stopped: rkv refused a write


def add_commands(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url",
        default=None,
        help=f"rkv node URL(s), comma-separated (default: {default_url_help()})",
    )
    common.set_defaults(run=run)
    common.add_argument(
        "--prefix", default="redis/", help="rkv key prefix of the replicated data (redis/)"
    )
    replicate = sub.add_parser(
        "redis-replicate",
        parents=[common],
        help="replicate a Redis master into rkv (poses as a replica; exactly once, resumable)",
    )
    replicate.add_argument(
        "--source", required=True, help="the master: redis://[user:password@]host:port"
    )
    replicate.add_argument(
        "--spool-dir", default=None, help="where the stream is buffered on disk (a temp dir)"
    )
    replicate.add_argument(
        "--status-interval", type=float, default=5.0, help="seconds between status lines (5)"
    )
    dumper = sub.add_parser(
        "redis-dump", parents=[common], help="print replicated Redis data as JSON Lines"
    )
    dumper.add_argument("--db", type=int, default=None, help="only this Redis db")


def _urls(args: argparse.Namespace) -> list[str]:
    return node_urls(args.url)


def _prefix(args: argparse.Namespace) -> bytes:
    from replication.redis.checkpoint import prefix_problem  # noqa: PLC0415

    prefix = str(args.prefix).encode()
    problem = prefix_problem(prefix)
    if problem is not None:
        raise ValueError(problem)
    return prefix


def run(args: argparse.Namespace) -> int:
    # Imported only when a Redis command runs: every other rkv command starts faster.
    from http_api.client.errors import (  # noqa: PLC0415
        ClusterUnreachableError,
        RkvClientError,
        UnavailableError,
    )

    name = args.command
    try:
        if name == "redis-dump":
            return _dump(args)
        return _replicate(args)
    except ValueError as exc:
        print(f"rkv {name}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (ClusterUnreachableError, UnavailableError) as exc:
        print(f"rkv {name}: rkv unreachable: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except RkvClientError as exc:
        print(f"rkv {name}: rkv refused: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    except KeyboardInterrupt:
        return 130


def _dump(args: argparse.Namespace) -> int:
    from http_api.client import RkvClient  # noqa: PLC0415
    from replication.redis.batch import BatchView, RkvStore  # noqa: PLC0415
    from replication.redis.checkpoint import checkpoint_name  # noqa: PLC0415
    from replication.redis.dump import NothingReplicated, dump  # noqa: PLC0415

    prefix = _prefix(args)
    with RkvClient(_urls(args)) as client:
        view = BatchView(RkvStore(client, checkpoint_name(prefix)))
        try:
            dump(view, prefix, sys.stdout, args.db)
        except NothingReplicated as exc:
            print(f"rkv redis-dump: {exc}", file=sys.stderr)
            return EXIT_STOPPED
    sys.stdout.flush()
    return EXIT_OK


def _replicate(args: argparse.Namespace) -> int:
    from http_api.client import RkvClient  # noqa: PLC0415
    from replication.redis.batch import CheckpointConflict  # noqa: PLC0415
    from replication.redis.commands.dispatch import ReplicationStop  # noqa: PLC0415
    from replication.redis.link.master_link import MasterAddress, RedisLinkError  # noqa: PLC0415
    from replication.redis.replicator import Replicator, ReplicatorConfig  # noqa: PLC0415

    prefix = _prefix(args)
    config = ReplicatorConfig(
        MasterAddress.parse(args.source),
        prefix,
        spool_dir=Path(args.spool_dir) if args.spool_dir else None,
        status_interval=args.status_interval,
    )
    urls = _urls(args)

    def status(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    client = RkvClient(urls)
    replicator = Replicator(config, client, lambda: RkvClient(urls), status)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        status(f"redis-replicate: signal {signum}: stopping after the current batch")
        threading.Thread(target=replicator.stop, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        replicator.run()
    except (ReplicationStop, CheckpointConflict) as exc:
        print(f"rkv redis-replicate: stopped: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    except RedisLinkError as exc:
        print(f"rkv redis-replicate: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    finally:
        client.close()
    logging.getLogger(__name__).info("stopped")
    return EXIT_OK
