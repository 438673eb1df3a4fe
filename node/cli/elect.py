"""`rkv elect NAME VALUE [--ttl S]` and `rkv elect --observe NAME`: elections
(docs/LEASES.md, "Elections").

``rkv elect NAME VALUE`` campaigns with VALUE under a lease of ``--ttl``
seconds kept alive meanwhile, waits until it leads, prints the leader line
(``leader NAME: VALUE (token T, lease L)``), and holds the leadership until
Ctrl-C, SIGTERM or SIGHUP; then it resigns and exits 0. If the leadership is
lost (the lease could not be kept alive), it says so and exits 3.
``--observe`` prints the leader now and each new one (``no leader of NAME``
when nobody leads) until interrupted. ``--json``: one JSON object per line.

Exit status: 0 ok (stopped by a signal), 1 refused, 2 usage error, 3 the
leadership was lost or the cluster is unreachable.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from http_api.client import LockHolder, LockLost, RkvClient, RkvClientError
from node.cli.common import EXIT_USAGE, node_urls, positive_int
from node.cli.credential_flags import credentials_from
from node.cli.holding import EXIT_LOST, Stopped, holder_json, leader_line, stop_on_signals
from node.cli.management import EPILOG, common_parent, refusal


def add_commands(sub: Any) -> None:
    parser = sub.add_parser(
        "elect",
        parents=[common_parent()],
        help="campaign in an election and lead until stopped, or --observe its leaders",
        epilog=EPILOG,
    )
    parser.add_argument("name", help="the election: 1-200 of A-Z a-z 0-9 . _ : / @ -")
    parser.add_argument("value", nargs="?", help="what this candidate announces when leading")
    parser.add_argument(
        "--ttl", type=positive_int, default=10, help="seconds of the candidate's lease (default 10)"
    )
    parser.add_argument(
        "--observe", action="store_true", help="print the leader and each new one; no campaign"
    )
    parser.set_defaults(run=run)


def _show(args: argparse.Namespace, holder: LockHolder | None) -> None:
    if args.json:
        print(json.dumps(holder_json(args.name, holder)), flush=True)
    else:
        print(leader_line(args.name, holder), flush=True)


def _observe(client: RkvClient, args: argparse.Namespace) -> int:
    for holder in client.observe(args.name):
        _show(args, holder)
    return 0


def _lead(client: RkvClient, args: argparse.Namespace) -> int:
    election = client.election(args.name, ttl=args.ttl)
    try:
        _show(args, election.campaign(args.value))
        while not election.lost.wait(0.5):
            pass
        election.resign()  # raises LockLost, which says why
    except (KeyboardInterrupt, Stopped):
        election.resign()
        return 0
    return EXIT_LOST


def run(args: argparse.Namespace) -> int:
    where = f"rkv elect {args.name}"
    if not args.observe and args.value is None:
        print(f"{where}: give the VALUE to campaign with, or --observe", file=sys.stderr)
        return EXIT_USAGE
    if args.observe and args.value is not None:
        print(f"{where}: --observe takes no VALUE", file=sys.stderr)
        return EXIT_USAGE
    try:
        urls = node_urls(args.url)
        credentials = credentials_from(args)
        with (
            RkvClient(urls, timeout=args.timeout, credentials=credentials) as client,
            stop_on_signals(),
        ):
            return _observe(client, args) if args.observe else _lead(client, args)
    except LockLost as exc:
        print(f"{where}: {exc.message}", file=sys.stderr)
        return EXIT_LOST
    except RkvClientError as exc:
        return refusal(where, exc)
    except ValueError as exc:
        print(f"{where}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (KeyboardInterrupt, Stopped):
        return 0
