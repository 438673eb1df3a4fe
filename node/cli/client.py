"""The `rkv` client commands: put, get, delete, incr, append, scan, txn, compact,
status and producer init: their arguments and handlers. They use the blocking
:class:`http_api.client.RkvClient` (compact: the control-plane calls) and
never import the server stack.

With ``--producer ID:EPOCH:SEQ`` a write (put, delete, incr, append, txn) goes
through :meth:`RkvClient.resume_producer`: it carries the three producer
headers, is resent with them on unknown outcomes, and a repeat of a sequence
already applied prints the original answer plus a note on stderr. A script
that reruns a failed command with the same triple gets exactly-once.

Exit status: 0 ok, 1 refused by the server (not found, conflict, invalid),
2 usage error, 3 cluster unreachable or unable to serve.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from http_api.client import (
    CONSISTENCY_LEVELS,
    ClusterUnreachableError,
    Item,
    KeyNotFoundError,
    Producer,
    RkvClient,
    RkvClientError,
    UnavailableError,
    UnknownOutcomeError,
    VersionConflictError,
)
from http_api.client.control import ControlClient
from node.cli.common import (
    BASE64_MARK,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    add_urls_argument,
    fencing_pair,
    node_urls,
    non_negative_int,
    positive_float,
    positive_int,
    producer_triple,
    shown_bytes,
    signed_int64,
)
from node.cli.credential_flags import add_credentials_arguments, credentials_from
from node.cli.status import add_status_arguments, run_status

PRODUCER_DEADLINE = 15.0  # seconds a --producer write is resent at least (or --timeout)


class _UsageError(Exception):
    """Bad input found after argument parsing (exit 2)."""


def _text_arg(text: str) -> bytes:
    """A command-line argument as the bytes the user typed (undecodable bytes kept)."""
    return os.fsencode(text)


def _value_arg(text: str) -> bytes:
    return sys.stdin.buffer.read() if text == "-" else _text_arg(text)


def _json_bytes(data: bytes, utf8: bool) -> str:
    if not utf8:
        return base64.b64encode(data).decode("ascii")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _UsageError("a key or value is not UTF-8: leave out --utf-8") from None


@contextmanager
def _writer(client: RkvClient, args: argparse.Namespace) -> Iterator[RkvClient | Producer]:
    """The plain client, or with --producer the producer it names; a duplicate
    answer (success or refusal) gets a note on stderr."""
    if getattr(args, "producer", None) is None:
        yield client
        return
    producer_id, epoch, sequence = args.producer
    producer = client.resume_producer(
        producer_id, epoch, sequence, deadline=max(PRODUCER_DEADLINE, args.timeout)
    )
    try:
        yield producer
    except UnknownOutcomeError as exc:
        # A pending write dies with this process: the way to settle it is to run the
        # same command again with the same triple.
        raise UnknownOutcomeError(
            f"producer {producer_id} epoch {epoch} sequence {sequence}: no answer within "
            f"{producer.deadline:g}s; the write may or may not have been applied: run the "
            "same command with the same --producer again to settle it",
            code=exc.code,
            url=exc.url,
        ) from None
    finally:
        if producer.last_was_duplicate:
            print(
                f"rkv {args.command}: note: producer {producer_id} epoch {epoch} sequence "
                f"{sequence} was applied before; this is its original answer "
                "(nothing was applied again)",
                file=sys.stderr,
            )


def _client_cmd_put(client: RkvClient, args: argparse.Namespace) -> int:
    with _writer(client, args) as writer:
        if args.ttl is not None and args.producer is not None:
            raise _UsageError("--ttl grants a new lease: it does not go with --producer")
        extra = {} if args.ttl is None else {"ttl": args.ttl}
        version = writer.put(
            _text_arg(args.key),
            _value_arg(args.value),
            if_version=args.if_version,
            create_only=args.create_only,
            lease=args.lease,
            fencing=args.fencing,
            **extra,
        )
    print(version)
    return 0


def _client_cmd_incr(client: RkvClient, args: argparse.Namespace) -> int:
    with _writer(client, args) as writer:
        value = writer.incr(_text_arg(args.key), args.by, fencing=args.fencing)
    print(value)
    return 0


def _client_cmd_append(client: RkvClient, args: argparse.Namespace) -> int:
    with _writer(client, args) as writer:
        size = writer.append(_text_arg(args.key), _value_arg(args.value), fencing=args.fencing)
    print(size)
    return 0


def _client_cmd_producer(client: RkvClient, args: argparse.Namespace) -> int:
    """rkv producer init: POST /v1/producers; prints "ID EPOCH" (or JSON)."""
    producer = client.producer(args.transactional_id, deadline=max(PRODUCER_DEADLINE, args.timeout))
    if args.json:
        print(json.dumps({"producer_id": producer.producer_id, "epoch": producer.epoch}))
    else:
        print(f"{producer.producer_id} {producer.epoch}")
    return 0


def _client_cmd_get(client: RkvClient, args: argparse.Namespace) -> int:
    item = client.get(_text_arg(args.key), args.consistency, args.min_version)
    sys.stdout.buffer.write(item.value)
    sys.stdout.flush()
    if args.show_version or args.verbose:
        print(f"version {item.version} create_version {item.create_version}", file=sys.stderr)
    return 0


def _client_cmd_delete(client: RkvClient, args: argparse.Namespace) -> int:
    with _writer(client, args) as writer:
        version = writer.delete(
            _text_arg(args.key), if_version=args.if_version, fencing=args.fencing
        )
    print(version)
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
                print(f"{shown_bytes(item.key)}\t{item.version}\t{shown_bytes(item.value)}")
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
    with _writer(client, args) as writer:
        result = writer.txn_raw(
            body, encoding="utf-8" if args.utf_8 else "base64", fencing=args.fencing
        )
    print(json.dumps(result, indent=2))
    return 0


def _client_cmd_compact(client: RkvClient, args: argparse.Namespace) -> int:
    """POST /v1/admin/compact on every node named by --url, one after the other."""
    results = {}
    for url in node_urls(args.url):
        control = ControlClient([url], max(args.timeout, 600), client.credentials)
        status, answer = control.compact(url)
        if status == 0:
            print(f"rkv compact: {url}: unreachable: {answer['message']}", file=sys.stderr)
            return EXIT_UNREACHABLE
        if status != 200:
            print(f"rkv compact: {url}: HTTP {status}: {answer!r:.300}", file=sys.stderr)
            return EXIT_UNREACHABLE if status >= 500 else EXIT_REFUSED
        results[url] = answer
        if not args.json:
            r = results[url]
            print(
                f"{url}: {r['records_before']} -> {r['records_kept']} records "
                f"({r['records_dropped']} dropped, {r['tombstones_kept']} tombstones kept), "
                f"{r['bytes_before']} -> {r['bytes_after']} bytes in {r['seconds']:.2f}s"
            )
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


def _common_arguments() -> argparse.ArgumentParser:
    """--url, --timeout and the TLS and credentials flags of every client command."""
    common = argparse.ArgumentParser(add_help=False)
    add_urls_argument(common)
    common.add_argument(
        "--timeout", type=positive_float, default=10.0, help="seconds per request (default 10)"
    )
    add_credentials_arguments(common)
    return common


def _write_arguments() -> argparse.ArgumentParser:
    """--producer and --fencing: what every write command takes."""
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
    producing.add_argument(
        "--fencing",
        type=fencing_pair,
        metavar="NAME=TOKEN",
        help="apply the write only while lock NAME is held with fencing token TOKEN "
        "(under 'rkv lock': --fencing \"$RKV_FENCING\"); else refused (fenced)",
    )
    return producing


def add_commands(sub: Any) -> None:
    common = _common_arguments()
    reads = argparse.ArgumentParser(add_help=False)
    reads.add_argument("--consistency", choices=CONSISTENCY_LEVELS, default="linearizable")
    reads.add_argument(
        "--min-version", type=non_negative_int, help="wait until the node has applied this"
    )
    producing = _write_arguments()
    epilog = (
        "exit status: 0 ok, 1 refused by the server (not found, conflict, invalid), "
        "2 usage error, 3 cluster unreachable or unable to serve"
    )

    def command(name: str, help_text: str, *parents: argparse.ArgumentParser) -> Any:
        parser = sub.add_parser(name, help=help_text, parents=[common, *parents], epilog=epilog)
        parser.set_defaults(run=run)
        return parser

    put = command("put", "set a key; prints the new version", producing)
    put.add_argument("key")
    put.add_argument("value", help="the value, or - to read it from stdin")
    condition = put.add_mutually_exclusive_group()
    condition.add_argument(
        "--if-version", type=non_negative_int, metavar="N", help="only if the version is N"
    )
    condition.add_argument(
        "--create-only", action="store_true", help="only if the key does not exist"
    )
    leased = put.add_mutually_exclusive_group()
    leased.add_argument(
        "--lease", type=positive_int, metavar="ID", help="attach the key to lease ID"
    )
    leased.add_argument(
        "--ttl",
        type=positive_int,
        metavar="S",
        help="a new lease of S seconds for this key alone: the key goes when it expires",
    )

    get = command("get", "print a key's value (raw bytes) on stdout", reads)
    get.add_argument("key")
    get.add_argument(
        "-v", "--show-version", action="store_true", help="print the version on stderr"
    )

    delete = command("delete", "delete a key; prints the tombstone's version", producing)
    delete.add_argument("key")
    delete.add_argument(
        "--if-version", type=non_negative_int, metavar="N", help="only if the version is N"
    )

    incr = command(
        "incr", "add to the decimal integer at a key (absent: 0); prints the new value", producing
    )
    incr.add_argument("key")
    incr.add_argument(
        "--by", type=signed_int64, default=1, metavar="N", help="signed 64-bit (default 1)"
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
    scan.add_argument("--limit", type=positive_int, help="at most this many keys (default all)")
    scan.add_argument("--page-size", type=positive_int, default=500, help="keys per request")
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

    status = command(
        "status",
        "one table for the cluster: each member's role, leader, term, applied index, lag, "
        "LMDB entries, log bytes, last compaction and version (exit 3 if a member is unreachable)",
    )
    add_status_arguments(status)

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
    init.set_defaults(run=run)


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


def run(args: argparse.Namespace) -> int:
    """Run a client command with a blocking client; returns the exit status."""
    command: str = args.command
    run_command = _COMMANDS[command]
    if command == "producer":
        command = f"producer {args.producer_command}"
    try:
        urls = node_urls(args.url)
        credentials = credentials_from(args)
        with RkvClient(urls, timeout=args.timeout, credentials=credentials) as client:
            code: int = run_command(client, args)
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


_COMMANDS: dict[str, Callable[[RkvClient, argparse.Namespace], int]] = {
    "put": _client_cmd_put,
    "get": _client_cmd_get,
    "delete": _client_cmd_delete,
    "incr": _client_cmd_incr,
    "append": _client_cmd_append,
    "scan": _client_cmd_scan,
    "txn": _client_cmd_txn,
    "status": run_status,
    "compact": _client_cmd_compact,
    "producer": _client_cmd_producer,
}
