"""The `rkv` client commands: put, get, delete, incr, append, scan, txn,
status, producer init and cluster members/add/remove (composition root).
They use the blocking :class:`http_api.client.RkvClient` (cluster: plain
urllib) and never import the server stack.

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
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from http_api.client import (
    DEFAULT_URL,
    ClusterUnreachableError,
    Item,
    KeyNotFoundError,
    Producer,
    RkvClient,
    RkvClientError,
    UnavailableError,
    UnknownOutcomeError,
    VersionConflictError,
    parse_urls,
)
from node.cli import BASE64_MARK, URL_ENV

EXIT_REFUSED = 1  # the server said no: not found, version conflict, invalid request
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3  # no node answered, or the cluster could not serve the request
PRODUCER_DEADLINE = 15.0  # seconds a --producer write is resent at least (or --timeout)


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
        version = writer.put(
            _text_arg(args.key),
            _value_arg(args.value),
            if_version=args.if_version,
            create_only=args.create_only,
        )
    print(version)
    return 0


def _client_cmd_incr(client: RkvClient, args: argparse.Namespace) -> int:
    with _writer(client, args) as writer:
        value = writer.incr(_text_arg(args.key), args.by)
    print(value)
    return 0


def _client_cmd_append(client: RkvClient, args: argparse.Namespace) -> int:
    with _writer(client, args) as writer:
        size = writer.append(_text_arg(args.key), _value_arg(args.value))
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
        version = writer.delete(_text_arg(args.key), if_version=args.if_version)
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
    with _writer(client, args) as writer:
        result = writer.txn_raw(body, encoding="utf-8" if args.utf_8 else "base64")
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


def _client_cmd_compact(client: RkvClient, args: argparse.Namespace) -> int:
    """POST /v1/admin/compact on every node named by --url, one after the other."""
    results = {}
    for url in parse_urls(args.url or [os.environ.get(URL_ENV) or DEFAULT_URL]):
        request = urllib.request.Request(f"{url}/v1/admin/compact", data=b"", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=max(args.timeout, 600)) as response:
                results[url] = json.load(response)
        except urllib.error.HTTPError as exc:
            print(f"rkv compact: {url}: HTTP {exc.code}: {exc.read()[:300]!r}", file=sys.stderr)
            return EXIT_UNREACHABLE if exc.code >= 500 else EXIT_REFUSED
        except OSError as exc:
            print(f"rkv compact: {url}: unreachable: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
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


def cluster_request(
    urls: list[str], method: str, path: str, body: Any, timeout: float
) -> tuple[int, Any]:
    """One request to the first node that answers, following 307s to the leader by
    hand (urllib follows none for POST or DELETE). Returns (status, JSON answer);
    status 0: no node answered."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    data = None if body is None else json.dumps(body).encode()
    last: Any = {"message": "no URL given"}
    for base in urls:
        target = f"{base}{path}"
        for _ in range(5):  # redirects
            request = urllib.request.Request(
                target, data=data, method=method, headers={"Content-Type": "application/json"}
            )
            try:
                with opener.open(request, timeout=timeout) as response:
                    return response.status, json.load(response)
            except urllib.error.HTTPError as exc:
                try:
                    answer = json.loads(exc.read() or b"{}")
                except ValueError:
                    answer = {"code": f"http_{exc.code}", "message": exc.reason}
                location = exc.headers.get("Location")
                if exc.code == 307 and location:
                    target = location
                    continue
                return exc.code, answer
            except (OSError, ValueError) as exc:  # ValueError: http.client.InvalidURL
                last = {"code": "unreachable", "message": f"{base}: {exc}"}
                break
    return 0, last


def run_cluster(args: argparse.Namespace) -> int:
    """rkv cluster members | add | remove."""
    action: str = args.cluster_command
    try:
        urls = parse_urls(args.url or [os.environ.get(URL_ENV) or DEFAULT_URL])
    except ValueError as exc:
        print(f"rkv cluster {action}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if action == "members":
        status, answer = cluster_request(urls, "GET", "/v1/cluster/members", None, args.timeout)
    elif action == "add":
        body = {"id": args.id, "raft_address": args.raft_address, "url": args.member_url}
        status, answer = cluster_request(urls, "POST", "/v1/cluster/members", body, args.timeout)
    else:
        path = "/v1/cluster/members/" + urllib.parse.quote(args.id, safe="")
        status, answer = cluster_request(urls, "DELETE", path, None, args.timeout)
    if status != 200:
        answer = answer if isinstance(answer, dict) else {}
        print(
            f"rkv cluster {action}: {answer.get('message', 'failed')} "
            f"[{answer.get('code', status)}]",
            file=sys.stderr,
        )
        return EXIT_UNREACHABLE if status == 0 or status >= 500 else EXIT_REFUSED
    if args.json:
        print(json.dumps(answer, indent=2))
    elif action == "members":
        for member in answer.get("members", []):
            print(f"{member['id']}\t{member['raft_address']}\t{member['url']}")
    else:
        member = answer.get("member") or {}
        done = "added" if action == "add" else "removed"
        changed = answer.get("added", answer.get("removed"))
        print(f"{member.get('id')} {done if changed else 'was already a member'}")
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


def run(args: argparse.Namespace) -> int:
    """Run a client command with a blocking client; returns the exit status."""
    command: str = args.command
    run_command = _COMMANDS[command]
    if command == "producer":
        command = f"producer {args.producer_command}"
    try:
        urls = parse_urls(args.url or [os.environ.get(URL_ENV) or DEFAULT_URL])
        with RkvClient(urls, timeout=args.timeout) as client:
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
    "status": _client_cmd_status,
    "compact": _client_cmd_compact,
    "producer": _client_cmd_producer,
}
