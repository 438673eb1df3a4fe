"""The `rkv` command line (composition root: nothing imports this module)."""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from http_api.client import (
    CONSISTENCY_LEVELS,
    DEFAULT_URL,
    ClusterUnreachableError,
    Item,
    KeyNotFoundError,
    RkvClient,
    RkvClientError,
    UnavailableError,
    VersionConflictError,
    parse_urls,
)
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


# -- client commands (put, get, delete, scan, txn, status) ---------------------------------

EXIT_REFUSED = 1  # the server said no: not found, version conflict, invalid request
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3  # no node answered, or the cluster could not serve the request
BASE64_MARK = "base64:"
URL_ENV = "RKV_URL"


class _UsageError(Exception):
    """Bad input found after argument parsing (exit 2)."""


def _text_arg(text: str) -> bytes:
    """A command-line argument as the bytes the user typed (undecodable bytes kept)."""
    return os.fsencode(text)


def _value_arg(text: str) -> bytes:
    return sys.stdin.buffer.read() if text == "-" else _text_arg(text)


def _shown(data: bytes) -> str:
    """Text when it is printable UTF-8, else ``base64:<base64>``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.isprintable() and not text.startswith(BASE64_MARK):
        return text
    return BASE64_MARK + base64.b64encode(data).decode("ascii")


def _json_bytes(data: bytes, utf8: bool) -> str:
    if not utf8:
        return base64.b64encode(data).decode("ascii")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _UsageError("a key or value is not UTF-8: leave out --utf-8") from None


def _client_cmd_put(client: RkvClient, args: argparse.Namespace) -> int:
    version = client.put(
        _text_arg(args.key),
        _value_arg(args.value),
        if_version=args.if_version,
        create_only=args.create_only,
    )
    print(version)
    return 0


def _client_cmd_get(client: RkvClient, args: argparse.Namespace) -> int:
    item = client.get(_text_arg(args.key), args.consistency, args.min_version)
    sys.stdout.buffer.write(item.value)
    sys.stdout.flush()
    if args.show_version or args.verbose:
        print(f"version {item.version} create_version {item.create_version}", file=sys.stderr)
    return 0


def _client_cmd_delete(client: RkvClient, args: argparse.Namespace) -> int:
    print(client.delete(_text_arg(args.key), if_version=args.if_version))
    return 0


def _client_cmd_scan(client: RkvClient, args: argparse.Namespace) -> int:
    remaining: int | None = args.limit
    cursor: str | None = args.start_after
    items: list[Item] = []
    while remaining is None or remaining > 0:
        size = args.page_size if remaining is None else min(args.page_size, remaining)
        page = client.scan_page(
            _text_arg(args.prefix),
            limit=size,
            start_after=cursor,
            consistency=args.consistency,
            min_version=args.min_version,
        )
        if remaining is not None:
            remaining -= len(page.items)
        if args.json:
            items.extend(page.items)
        else:
            for item in page.items:
                print(f"{_shown(item.key)}\t{item.version}\t{_shown(item.value)}")
        cursor = page.next
        if cursor is None:
            break
    if args.json:
        rendered = [
            {
                "key": _json_bytes(item.key, args.utf_8),
                "value": _json_bytes(item.value, args.utf_8),
                "version": item.version,
                "create_version": item.create_version,
            }
            for item in items
        ]
        print(json.dumps({"items": rendered, "next": cursor}, indent=2))
    return 0


def _client_cmd_txn(client: RkvClient, args: argparse.Namespace) -> int:
    try:
        text = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as exc:
        raise _UsageError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    try:
        body: Any = json.loads(text)
    except ValueError as exc:
        raise _UsageError(f"{args.file} is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _UsageError(
            'a transaction is a JSON object: {"compare": [...], "success": [...], "failure": [...]}'
        )
    result = client.txn_raw(body, encoding="utf-8" if args.utf_8 else "base64")
    print(json.dumps(result, indent=2))
    return 0


def _client_cmd_status(client: RkvClient, args: argparse.Namespace) -> int:
    status = client.status()
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    members = status.get("members") or [{"id": status.get("id"), "url": status.get("url")}]
    members = sorted(members, key=lambda member: str(member.get("id")))
    rows = [("ID", "URL", "ROLE", "REACHABLE", "LEADER")]
    for member in members:
        url = str(member.get("url"))
        seen: dict[str, Any] | None = status if member.get("self") else None
        if seen is None:
            try:
                seen = client.status(url, timeout=min(args.timeout, 2.0))
            except RkvClientError:
                seen = None
        leader = (seen or {}).get("leader") or {}
        rows.append(
            (
                str(member.get("id")),
                url,
                str(seen.get("role", "?")) if seen else "?",
                "yes" if seen else "no",
                str(leader.get("id", "-")) if seen else "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return 0


def _client_error_exit(command: str, key: str | None, exc: RkvClientError) -> int:
    where = f"rkv {command}" if key is None else f"rkv {command} {key}"
    if isinstance(exc, KeyNotFoundError):
        message = f"{where}: not found"
    elif isinstance(exc, VersionConflictError):
        current = f"current version {exc.current_version}" if exc.current_version >= 0 else ""
        message = f"{where}: version conflict: {current or exc.message}"
    else:
        message = f"{where}: {exc.message} [{exc.code}]"
    print(message, file=sys.stderr)
    if isinstance(exc, ClusterUnreachableError | UnavailableError):
        return EXIT_UNREACHABLE
    return EXIT_REFUSED


def _run_client_command(args: argparse.Namespace) -> int:
    command: str = args.command
    try:
        urls = parse_urls(args.url or [os.environ.get(URL_ENV) or DEFAULT_URL])
        with RkvClient(urls, timeout=args.timeout) as client:
            code: int = args.client_func(client, args)
        sys.stdout.flush()
        return code
    except RkvClientError as exc:
        return _client_error_exit(command, getattr(args, "key", None), exc)
    except (_UsageError, ValueError, TypeError) as exc:
        print(f"rkv {command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"rkv {command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (rkv scan | head): not worth a message.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as exc:
        logging.getLogger(__name__).info("unexpected error", exc_info=True)
        print(f"rkv {command}: unexpected error: {exc!r} (-v shows details)", file=sys.stderr)
        return 1


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
    epilog = (
        "exit status: 0 ok, 1 refused by the server (not found, conflict, invalid), "
        "2 usage error, 3 cluster unreachable or unable to serve"
    )

    def command(name: str, help_text: str, func: Any, *parents: argparse.ArgumentParser) -> Any:
        parser = sub.add_parser(name, help=help_text, parents=[common, *parents], epilog=epilog)
        parser.set_defaults(func=_run_client_command, client_func=func)
        return parser

    put = command("put", "set a key; prints the new version", _client_cmd_put)
    put.add_argument("key")
    put.add_argument("value", help="the value, or - to read it from stdin")
    condition = put.add_mutually_exclusive_group()
    condition.add_argument(
        "--if-version", type=_non_negative_int, metavar="N", help="only if the version is N"
    )
    condition.add_argument(
        "--create-only", action="store_true", help="only if the key does not exist"
    )

    get = command("get", "print a key's value (raw bytes) on stdout", _client_cmd_get, reads)
    get.add_argument("key")
    get.add_argument(
        "-v", "--show-version", action="store_true", help="print the version on stderr"
    )

    delete = command("delete", "delete a key; prints the tombstone's version", _client_cmd_delete)
    delete.add_argument("key")
    delete.add_argument(
        "--if-version", type=_non_negative_int, metavar="N", help="only if the version is N"
    )

    scan = command(
        "scan",
        "list keys with a prefix: key<TAB>version<TAB>value lines "
        f"(non-text shown as {BASE64_MARK}...)",
        _client_cmd_scan,
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
        _client_cmd_txn,
    )
    txn.add_argument("file", help="a JSON file, or - for stdin")
    txn.add_argument(
        "--utf-8", action="store_true", help="keys and values are text (default base64)"
    )

    status = command("status", "the cluster's members, roles and leader", _client_cmd_status)
    status.add_argument("--json", action="store_true", help="the raw /v1/status of one node")


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
    _add_client_commands(sub)
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
