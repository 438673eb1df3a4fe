"""`rkv redis-replicate` and `rkv redis-dump` (docs/REDIS.md).

Exit status: 0 stopped on request (SIGINT/SIGTERM) or dump written, 1 the
replicator stopped (a command it cannot reproduce, a bound of its settings
crossed, a snapshot it cannot parse, another replicator owns the prefix),
2 usage error, 3 rkv or Redis unreachable.

The master's password comes from ``--source-password-file``, else from
``$RKV_REDIS_PASSWORD``, else from the ``--source`` URL (which every user of
the machine can read in ``ps``: a warning says so). A ``redis-cluster://``
source (replication/redis/cluster/) takes its nodes' password the same way.
With a ``redis-sentinel://`` source the URL's login is the sentinels': their
password comes from ``--sentinel-password-file``, else
``$RKV_REDIS_SENTINEL_PASSWORD``, else the URL (with the same warning).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import stat
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

from node.cli.common import (
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    default_url_help,
    node_urls,
    positive_int,
)
from node.cli.credential_flags import add_credentials_arguments, credentials_from

if TYPE_CHECKING:
    from http_api.client import Fencing, RkvClient
    from replication.redis.cluster.source import ClusterSource
    from replication.redis.cluster.supervisor import ClusterReplicator
    from replication.redis.link.master_link import MasterAddress
    from replication.redis.sources import Source
    from replication.redis.standby import Standby

T = TypeVar("T")

EXIT_STOPPED = 1  # the replicator stopped: rkv refused a write, a bound was crossed
PASSWORD_ENV = "RKV_REDIS_PASSWORD"
"""The environment variable holding the master's password (when no file is given)."""
SENTINEL_PASSWORD_ENV = "RKV_REDIS_SENTINEL_PASSWORD"
"""The environment variable holding the sentinels' password (when no file is given)."""
MIB = 1024 * 1024
# Kept here (not imported) so that `rkv --help` need not import the replicator;
# tests/unit checks they equal the replicator's own defaults.
DEFAULT_MAX_COMMAND_BYTES = 64 * MIB
DEFAULT_MAX_SPOOL_BYTES = 4096 * MIB
DEFAULT_MAX_RDB_VALUE_BYTES = 256 * MIB
DEFAULT_LOCK_TTL = 10


def _at_least(minimum: int) -> Any:
    def parse(text: str) -> int:
        value = positive_int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}")
        return value

    return parse


def listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) for ``--metrics-listen``."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"must be HOST:PORT, not {text!r}")
    return host, int(port)


def add_commands(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url",
        default=None,
        help=f"rkv node URL(s), comma-separated (default: {default_url_help()})",
    )
    common.set_defaults(run=run)
    add_credentials_arguments(common)
    common.add_argument(
        "--prefix", default="redis/", help="rkv key prefix of the replicated data (redis/)"
    )
    replicate = sub.add_parser(
        "redis-replicate",
        parents=[common],
        help="replicate a Redis master into rkv (poses as a replica; exactly once, resumable)",
    )
    add = replicate.add_argument
    add(
        "--source",
        default=None,
        help="the master: redis://[user@]host:port; the master Redis Sentinel names, "
        "followed across failovers: redis-sentinel://[user@]host:port[,host:port...]/NAME "
        "(the user is the sentinels'); or a Redis Cluster: "
        "redis-cluster://host:port[,host:port...]. A password in the URL shows in ps: prefer "
        f"--source-password-file or ${PASSWORD_ENV} (the master's or the cluster nodes'), "
        f"--sentinel-password-file or ${SENTINEL_PASSWORD_ENV} (the sentinels'). Required "
        "unless --status",
    )
    add(
        "--status",
        action="store_true",
        help="print who replicates --prefix (the lock's holder, since when) and its "
        "checkpoint, then exit",
    )
    add(
        "--lock-ttl",
        type=positive_int,
        default=DEFAULT_LOCK_TTL,
        help="seconds of the lease behind the prefix's lock: a standby takes over this "
        f"long after the active replicator vanished ({DEFAULT_LOCK_TTL})",
    )
    add(
        "--source-password-file",
        metavar="PATH",
        default=None,
        help=f"file holding the master's password (one line); else ${PASSWORD_ENV}",
    )
    add(
        "--sentinel-password-file",
        metavar="PATH",
        default=None,
        help="redis-sentinel:// source: file holding the sentinels' password (one line); "
        f"else ${SENTINEL_PASSWORD_ENV}",
    )
    add("--spool-dir", default=None, help="where the stream is buffered on disk (a temp dir)")
    add("--status-interval", type=float, default=5.0, help="seconds between status lines (5)")
    add(
        "--metrics-listen",
        metavar="HOST:PORT",
        type=listen_address,
        default=None,
        help="serve Prometheus metrics at http://HOST:PORT/metrics (off by default; "
        "docs/OBSERVABILITY.md)",
    )
    add(
        "--max-command-bytes",
        type=_at_least(64 * 1024),
        default=DEFAULT_MAX_COMMAND_BYTES,
        help="most bytes one replicated command may take (its arguments plus 64 each); "
        "a larger one stops the replicator (64 MiB)",
    )
    add(
        "--max-spool-bytes",
        type=_at_least(MIB),
        default=DEFAULT_MAX_SPOOL_BYTES,
        help="most bytes received from the master and not yet processed that may wait "
        "in --spool-dir; the snapshot's transfer waits, a longer command backlog stops "
        "the replicator (4 GiB)",
    )
    add(
        "--max-rdb-value-bytes",
        type=_at_least(MIB),
        default=DEFAULT_MAX_RDB_VALUE_BYTES,
        help="most memory one key of the master's snapshot (RDB) may take once decoded "
        "(its strings plus 64 bytes per element); a bigger one stops the full sync (256 MiB)",
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
        if args.status:
            return _status(args)
        if args.source is None:
            raise ValueError("--source is required (unless --status)")
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
    with RkvClient(_urls(args), credentials=credentials_from(args)) as client:
        view = BatchView(RkvStore(client, checkpoint_name(prefix)))
        try:
            dump(view, prefix, sys.stdout, args.db)
        except NothingReplicated as exc:
            print(f"rkv redis-dump: {exc}", file=sys.stderr)
            return EXIT_STOPPED
    sys.stdout.flush()
    return EXIT_OK


def _status(args: argparse.Namespace) -> int:
    from http_api.client import RkvClient  # noqa: PLC0415
    from replication.redis.standby import lock_name  # noqa: PLC0415
    from replication.redis.status import read_checkpoints, status_lines  # noqa: PLC0415

    prefix = _prefix(args)
    name = lock_name(prefix)
    with RkvClient(_urls(args), credentials=credentials_from(args)) as client:
        leader = client.leader(name)
        checkpoints = read_checkpoints(client, prefix)
    for line in status_lines(prefix, name, leader, checkpoints):
        print(line)
    sys.stdout.flush()
    return EXIT_OK


def _read_password_file(path: str, flag: str = "--source-password-file") -> str:
    try:
        with open(path, "rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            raw = file.read(64 * 1024 + 1)
    except OSError as exc:
        raise ValueError(f"cannot read {flag}: {exc}") from None
    if len(raw) > 64 * 1024:
        raise ValueError(f"{flag} {path}: more than 64 KiB, not a password")
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise ValueError(f"{flag} {path}: not UTF-8 text") from None
    password = text[:-1] if text.endswith("\n") else text
    password = password[:-1] if password.endswith("\r") else password
    if not password:
        raise ValueError(f"{flag} {path} is empty")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        _warn(f"{flag} {path} can be read by other users (chmod 600 it)")
    return password


def _warn(message: str) -> None:
    print(f"rkv redis-replicate: warning: {message}", file=sys.stderr, flush=True)


def _parse_source(
    parse: Callable[[str, str | None], T],
    url: str,
    password_file: str | None,
    environ: Mapping[str, str] | None,
) -> T:
    env = os.environ if environ is None else environ
    if password_file is not None:
        return parse(url, _read_password_file(password_file))
    if env.get(PASSWORD_ENV):
        return parse(url, env[PASSWORD_ENV])
    address = parse(url, None)
    if getattr(address, "password", None) is not None:
        _warn(
            "the password in --source can be read by every user of this machine (ps, "
            f"/proc); put it in a file (--source-password-file) or in ${PASSWORD_ENV}"
        )
    return address


def source_address(
    url: str, password_file: str | None, environ: Mapping[str, str] | None = None
) -> MasterAddress:
    """The master's address and login: the password from ``password_file``, else
    $RKV_REDIS_PASSWORD, else the URL (with a warning: ps shows it). ValueError
    for a problem (never showing the password)."""
    from replication.redis.link.master_link import MasterAddress  # noqa: PLC0415

    return _parse_source(MasterAddress.parse, url, password_file, environ)


def cluster_source(
    url: str, password_file: str | None, environ: Mapping[str, str] | None = None
) -> ClusterSource:
    """A ``redis-cluster://`` source: its seeds, and the login of every node, the
    password found as for a master (:func:`source_address`)."""
    from replication.redis.cluster.source import ClusterSource  # noqa: PLC0415

    return _parse_source(ClusterSource.parse, url, password_file, environ)


def _build(
    args: argparse.Namespace,
    make_client: Callable[[], RkvClient],
    status: Callable[[str], None],
) -> Standby:
    """A standby that replicates a master, or a Redis Cluster's masters, while it
    holds the prefix's lock."""
    from replication.redis.cluster.source import SCHEME  # noqa: PLC0415
    from replication.redis.cluster.supervisor import ClusterReplicator  # noqa: PLC0415
    from replication.redis.replicator import ReplicatorConfig  # noqa: PLC0415
    from replication.redis.standby import Standby  # noqa: PLC0415

    cluster = None
    master: Source
    if str(args.source).startswith(SCHEME + "://"):
        if args.sentinel_password_file is not None:
            raise ValueError("--sentinel-password-file is for a redis-sentinel:// --source")
        cluster = cluster_source(args.source, args.source_password_file)
        master = cluster.seeds[0]
    else:
        master = replication_source(
            args.source, args.source_password_file, args.sentinel_password_file
        )
    config = ReplicatorConfig(
        master,
        _prefix(args),
        spool_dir=Path(args.spool_dir) if args.spool_dir else None,
        status_interval=args.status_interval,
        max_command_bytes=args.max_command_bytes,
        max_spool_bytes=args.max_spool_bytes,
        max_rdb_value_bytes=args.max_rdb_value_bytes,
    )
    standby = Standby(
        config, make_client, status, lock_ttl=args.lock_ttl, shards=cluster is not None
    )
    if cluster is not None:
        found = cluster

        def build_cluster(client: RkvClient, fencing: Fencing) -> ClusterReplicator:
            return ClusterReplicator(
                found, config, client, make_client, status, metrics=standby.metrics, fencing=fencing
            )

        standby.build = build_cluster
    return standby


def replication_source(
    url: str,
    password_file: str | None,
    sentinel_password_file: str | None,
    environ: Mapping[str, str] | None = None,
) -> Source:
    """What ``--source`` names, with its passwords (see the module docstring).
    ValueError for a problem (never showing a password)."""
    from replication.redis.link.sentinel import SCHEME, SentinelSource  # noqa: PLC0415

    env = os.environ if environ is None else environ
    if not url.startswith(f"{SCHEME}:"):
        if sentinel_password_file is not None:
            raise ValueError(f"--sentinel-password-file is for a {SCHEME}:// --source")
        return source_address(url, password_file, env)
    if password_file is not None:
        master_password: str | None = _read_password_file(password_file)
    else:
        master_password = env.get(PASSWORD_ENV) or None
    if sentinel_password_file is not None:
        given = _read_password_file(sentinel_password_file, "--sentinel-password-file")
        return SentinelSource.parse(url, given, master_password)
    if env.get(SENTINEL_PASSWORD_ENV):
        return SentinelSource.parse(url, env[SENTINEL_PASSWORD_ENV], master_password)
    source = SentinelSource.parse(url, None, master_password)
    if source.password is not None:
        _warn(
            "the sentinels' password in --source can be read by every user of this machine "
            "(ps, /proc); put it in a file (--sentinel-password-file) or in "
            f"${SENTINEL_PASSWORD_ENV}"
        )
    return source


def _replicate(args: argparse.Namespace) -> int:
    from http_api.client import RkvClient  # noqa: PLC0415
    from replication.redis.batch import CheckpointConflict  # noqa: PLC0415
    from replication.redis.commands.dispatch import ReplicationStop  # noqa: PLC0415
    from replication.redis.link.master_link import LimitExceeded, RedisLinkError  # noqa: PLC0415
    from replication.redis.standby import StopRequested  # noqa: PLC0415

    urls = _urls(args)

    def status(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    credentials = credentials_from(args)

    def make_client() -> RkvClient:
        return RkvClient(urls, credentials=credentials)

    _prefix(args)  # a bad prefix is a usage error before anything connects
    standby = _build(args, make_client, status)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        status(f"redis-replicate: signal {signum}: stopping after the current batch")
        standby.stop_from_signal()

    metrics_server = None
    if args.metrics_listen is not None:
        from prometheus_client import start_http_server  # noqa: PLC0415

        host, port = args.metrics_listen
        try:
            metrics_server, _ = start_http_server(port, host, registry=standby.metrics.registry)
        except OSError as exc:
            print(f"rkv redis-replicate: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        status(f"redis-replicate: metrics at http://{host}:{port}/metrics")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        standby.run()
    except StopRequested:
        pass  # a signal ended the wait for the lock
    except (ReplicationStop, CheckpointConflict, LimitExceeded) as exc:
        print(f"rkv redis-replicate: stopped: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    except RedisLinkError as exc:
        print(f"rkv redis-replicate: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()
    logging.getLogger(__name__).info("stopped")
    return EXIT_OK
