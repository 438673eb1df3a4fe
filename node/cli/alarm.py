"""`rkv alarm list | disarm`: the cluster's alarms (a member whose disk is full or over
--quota-bytes raises a nospace alarm; writes that add data are refused until an
operator frees space and disarms it: docs/OPERATIONS.md, "Disk full")."""

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
from node.state.alarm_commands import AlarmKind


def add_commands(sub: Any) -> None:
    alarm = sub.add_parser(
        "alarm",
        help="list or disarm the cluster's alarms (nospace: a member's disk is full)",
        epilog="exit status: 0 ok, 1 refused by the server (not admin, bad member id), "
        "2 usage error, 3 cluster unreachable or unable to serve",
    )
    actions = alarm.add_subparsers(dest="alarm_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    add_urls_argument(common, "; a disarm is sent on to the leader")
    common.add_argument(
        "--timeout", type=positive_float, default=30.0, help="seconds per request (default 30)"
    )
    common.add_argument("--json", action="store_true", help="print the raw answer")
    add_credentials_arguments(common)
    common.set_defaults(run=run)
    actions.add_parser("list", parents=[common], help="the raised alarms")
    disarm = actions.add_parser(
        "disarm",
        parents=[common],
        help="disarm an alarm once space is freed (needs admin when auth is on)",
    )
    disarm.add_argument(
        "--member", help="the member whose alarm to disarm (default: every member's)"
    )
    disarm.add_argument(
        "--kind",
        choices=[kind.value for kind in AlarmKind],
        default=AlarmKind.NOSPACE.value,
        help="the alarm's kind (default nospace)",
    )


def run(args: argparse.Namespace) -> int:
    """rkv alarm list | disarm."""
    action: str = args.alarm_command
    try:
        urls = node_urls(args.url)
        credentials = credentials_from(args)
    except ValueError as exc:
        print(f"rkv alarm {action}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    control = ControlClient(urls, args.timeout, credentials)
    if action == "list":
        status, answer = control.alarms()
    else:
        status, answer = control.disarm_alarms(args.member, args.kind)
    if status != 200:
        answer = answer if isinstance(answer, dict) else {}
        print(
            f"rkv alarm {action}: {answer.get('message', 'failed')} [{answer.get('code', status)}]",
            file=sys.stderr,
        )
        return EXIT_UNREACHABLE if status == 0 or status >= 500 else EXIT_REFUSED
    if args.json:
        print(json.dumps(answer, indent=2))
        return 0
    alarms = answer.get("alarms", [])
    if action == "disarm":
        print("disarmed; " + (f"{len(alarms)} alarm(s) left" if alarms else "no alarm left"))
    for found in alarms:
        print(f"{found['member']}\t{found['kind']}\t{found['reason']}")
    return 0
