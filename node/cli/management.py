"""What `rkv auth`, `rkv user` and `rkv role` share: their common flags, running a
call with a blocking client, the exit status of a refusal, and reading a new
password without echoing it or putting it in argv.

Exit status (the client commands' convention, node/cli/common.py): 0 ok, 1
refused by the server (401 no or bad credentials, 403 a missing permission, 404,
409, 429), 2 usage error, 3 cluster unreachable or unable to serve. A refusal is
one line on stderr: ``rkv user add alice: <the server's message> [<code>]``.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from http_api.client import (
    AuthenticationError,
    ClusterUnreachableError,
    RkvClient,
    RkvClientError,
    TooManyRequestsError,
    UnavailableError,
)
from http_api.client.credentials import Credentials
from node.cli.common import (
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    add_urls_argument,
    node_urls,
    positive_float,
)
from node.cli.credential_flags import add_credentials_arguments, credentials_from

EPILOG = (
    "exit status: 0 ok, 1 refused by the server (401 credentials, 403 permission, "
    "404 no such user or role, 409 conflict, 429 too many failed logins or a limit), "
    "2 usage error, 3 cluster unreachable or unable to serve"
)


class UsageError(Exception):
    """Bad input found after argument parsing (exit 2)."""


def common_parent() -> argparse.ArgumentParser:
    """--url, --timeout, --json and the TLS and credentials flags."""
    common = argparse.ArgumentParser(add_help=False)
    add_urls_argument(common, "; changes are sent on to the leader")
    common.add_argument(
        "--timeout", type=positive_float, default=10.0, help="seconds per request (default 10)"
    )
    common.add_argument("--json", action="store_true", help="print the answer as JSON")
    add_credentials_arguments(common)
    return common


def command_group(
    sub: Any, name: str, help_text: str, run: Callable[[argparse.Namespace], int]
) -> Callable[[str, str], argparse.ArgumentParser]:
    """``rkv NAME ACTION ...``: adds the group, and returns a function adding one action
    (a parser with the common flags, whose ``run`` is the group's)."""
    group = sub.add_parser(name, help=help_text)
    actions = group.add_subparsers(dest=f"{name}_command", required=True)
    common = common_parent()
    common.set_defaults(run=run)

    def action(action_name: str, action_help: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(
            action_name, parents=[common], help=action_help, epilog=EPILOG
        )
        return parser

    return action


def add_new_password_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--new-password-file",
        metavar="FILE",
        help="read the user's password from FILE's first line (- for stdin); default: "
        "ask twice on the terminal, never echoed (--password-file is --user's own)",
    )


def read_new_password(
    args: argparse.Namespace,
    name: str,
    ask: Callable[[str], str] = getpass.getpass,
    interactive: bool | None = None,
) -> str:
    """The new password for ``name``: --new-password-file, else asked twice on the
    terminal. Raises UsageError (never showing the password)."""
    path: str | None = args.new_password_file
    if path is not None:
        try:
            if path == "-":
                line = sys.stdin.readline()
            else:
                with open(path, encoding="utf-8") as f:
                    line = f.readline()
        except OSError as exc:
            raise UsageError(
                f"--new-password-file {path}: cannot read it: {exc.strerror}"
            ) from None
        except UnicodeDecodeError:
            raise UsageError(f"--new-password-file {path}: not UTF-8 text") from None
        password = line.rstrip("\r\n")
        if not password:
            raise UsageError(f"--new-password-file {path}: the first line is empty")
        return password
    if interactive is None:
        interactive = sys.stdin is not None and sys.stdin.isatty()
    if not interactive:
        raise UsageError(
            f"no password for {name}: give --new-password-file FILE (or - for stdin); "
            "there is no terminal to ask on"
        )
    password = ask(f"new password for {name}: ")
    if not password:
        raise UsageError("the password is empty")
    if ask(f"new password for {name} again: ") != password:
        raise UsageError("the two passwords differ")
    return password


def refusal(where: str, exc: RkvClientError) -> int:
    """Print a refusal as one line; the exit status it means (1, or 3 unreachable)."""
    message = f"{where}: {exc.message} [{exc.code}]"
    if isinstance(exc, AuthenticationError) and exc.code == "unauthenticated":
        message += " (give --user NAME, --token TOKEN or a client certificate)"
    if isinstance(exc, TooManyRequestsError) and exc.retry_after is not None:
        message += f" (retry in {exc.retry_after:g}s)"
    print(message, file=sys.stderr)
    if isinstance(exc, ClusterUnreachableError | UnavailableError):
        return EXIT_UNREACHABLE
    return EXIT_REFUSED


def run_call(
    where: str,
    args: argparse.Namespace,
    call: Callable[[RkvClient, Credentials], Any],
    show: Callable[[Any], None],
    *,
    anonymous: bool = False,
) -> int:
    """Run ``call`` with a client made from the flags (and those credentials) and print
    its answer, JSON-able, with ``show`` (or as JSON with --json). ``anonymous``: the
    client sends no user or token (the TLS files only), as asking for a token does."""
    try:
        urls = node_urls(args.url)
        credentials = credentials_from(args)
        sent = anonymous_of(credentials) if anonymous else credentials
        with RkvClient(urls, timeout=args.timeout, credentials=sent) as client:
            answer = call(client, credentials)
    except RkvClientError as exc:
        return refusal(where, exc)
    except (UsageError, ValueError, TypeError) as exc:
        print(f"{where}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{where}: interrupted", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(answer, indent=2))
    else:
        show(answer)
    sys.stdout.flush()
    return 0


def anonymous_of(credentials: Credentials) -> Credentials:
    """The same TLS trust and client certificate, without a user or token."""
    return replace(credentials, user=None, password=None, token=None)
