"""`rkv auth enable | disable | status | token`: turn authentication on and off, and
get a token for scripts.

``enable`` is refused (409 ``root_required``) until the user ``root`` exists with
the role ``root`` (`rkv user add root --role root`); ``token`` prints a bearer
token for the user given with ``--user`` (its password from ``--password-file``,
RKV_PASSWORD or the terminal), to pass on as ``--token`` or ``RKV_TOKEN``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from http_api.client import RkvClient
from http_api.client.credentials import Credentials
from node.cli.management import UsageError, command_group, run_call


def add_commands(sub: Any) -> None:
    action = command_group(sub, "auth", "turn authentication on or off; get a token", run)

    action("enable", "require credentials from now on (the user root must have the role root)")
    action("disable", "stop requiring credentials (admin)")
    action("status", "whether authentication is on, and the auth revision")
    action(
        "token",
        "print a bearer token for --user (for --token / RKV_TOKEN); valid for the "
        "cluster's --auth-token-ttl and until users or roles change",
    )


def _token(client: RkvClient, credentials: Credentials) -> dict[str, Any]:
    if credentials.user is None or credentials.password is None:
        raise UsageError("a token is given for a user: --user NAME[:PASSWORD] (RKV_USER)")
    return {"token": client.token(credentials.user, credentials.password)}


def _changed(what: str) -> Any:
    def show(answer: dict[str, Any]) -> None:
        print(f"authentication {what} (auth revision {answer['revision']})")

    return show


def _show_status(answer: dict[str, Any]) -> None:
    state = "enabled" if answer["enabled"] else "disabled"
    print(f"authentication {state} (auth revision {answer['revision']})")


def run(args: argparse.Namespace) -> int:
    action: str = args.auth_command
    where = f"rkv auth {action}"
    if action == "enable":
        return run_call(
            where, args, lambda c, _: {"revision": c.auth_enable()}, _changed("enabled")
        )
    if action == "disable":
        return run_call(
            where, args, lambda c, _: {"revision": c.auth_disable()}, _changed("disabled")
        )
    if action == "status":

        def status(client: RkvClient, _: Credentials) -> dict[str, Any]:
            found = client.auth_status()
            return {"enabled": found.enabled, "revision": found.revision}

        return run_call(where, args, status, _show_status)
    return run_call(
        where, args, _token, lambda answer: print(answer["token"], file=sys.stdout), anonymous=True
    )
