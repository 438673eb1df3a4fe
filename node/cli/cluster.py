"""`rkv cluster members | add | remove | set-url`: the voting members, one change at a time.

Changes go to any node and are sent on to the leader (control-plane calls,
http_api/client/control.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from http_api.client.control import ControlClient
from node.cli.common import (
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    add_urls_argument,
    node_urls,
    positive_float,
)
from node.cli.credential_flags import add_credentials_arguments, credentials_from


def add_commands(sub: Any) -> None:
    cluster = sub.add_parser(
        "cluster",
        help="list, add or remove voting members (one change at a time)",
        epilog="exit status: 0 ok, 1 refused by the server (unknown id, change in "
        "progress, last member), 2 usage error, 3 cluster unreachable or unable to serve",
    )
    actions = cluster.add_subparsers(dest="cluster_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    add_urls_argument(common, "; changes are sent on to the leader")
    common.add_argument(
        "--timeout", type=positive_float, default=30.0, help="seconds per request (default 30)"
    )
    common.add_argument("--json", action="store_true", help="print the raw answer")
    add_credentials_arguments(common)
    common.set_defaults(run=run)
    actions.add_parser("members", parents=[common], help="the voting members")
    add = actions.add_parser(
        "add",
        parents=[common],
        help="add a member (its node must be running: rkv node --join does this itself)",
    )
    add.add_argument("id")
    add.add_argument("raft_address", metavar="RAFT_HOST:PORT")
    add.add_argument("member_url", metavar="HTTP_URL")
    remove = actions.add_parser("remove", parents=[common], help="remove a member by id")
    remove.add_argument("id")
    set_url = actions.add_parser(
        "set-url",
        parents=[common],
        help="change a member's HTTP URL (refused by a node serving beyond loopback)",
    )
    set_url.add_argument("id")
    set_url.add_argument("member_url", metavar="HTTP_URL")


def run(args: argparse.Namespace) -> int:
    """rkv cluster members | add | remove | set-url."""
    action: str = args.cluster_command
    try:
        urls = node_urls(args.url)
        credentials = credentials_from(args)
    except ValueError as exc:
        print(f"rkv cluster {action}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    control = ControlClient(urls, args.timeout, credentials)
    if action == "members":
        status, answer = control.members()
    elif action == "add":
        status, answer = control.add_member(args.id, args.raft_address, args.member_url)
    elif action == "set-url":
        status, answer = control.set_member_url(args.id, args.member_url)
    else:
        status, answer = control.remove_member(args.id)
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
    elif action == "set-url":
        member = answer.get("member") or {}
        print(f"{member.get('id')} is at {member.get('url')}")
    else:
        member = answer.get("member") or {}
        done = "added" if action == "add" else "removed"
        changed = answer.get("added", answer.get("removed"))
        print(f"{member.get('id')} {done if changed else 'was already a member'}")
    return 0
