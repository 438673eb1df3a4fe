"""`rkv user add | delete | passwd | grant-role | revoke-role | list | get`: the
cluster's users (admin once auth is on; open while it is off, so that root can
be created first).

A new password is never an argument: it is asked twice on the terminal (not
echoed) or read from ``--new-password-file FILE`` (``-``: stdin).
"""

from __future__ import annotations

import argparse
from typing import Any

from http_api.client import RkvClient, User
from http_api.client.credentials import Credentials
from node.cli.management import (
    add_new_password_arguments,
    command_group,
    read_new_password,
    run_call,
)


def add_commands(sub: Any) -> None:
    action = command_group(sub, "user", "add, delete or change users", run)

    add = action("add", "add a user (its password asked on the terminal, or a file)")
    add.add_argument("name")
    add.add_argument(
        "--role",
        dest="roles",
        action="append",
        default=[],
        metavar="ROLE",
        help="give the user this role (repeat for several)",
    )
    add_new_password_arguments(add)
    action("delete", "delete a user (its tokens stop working)").add_argument("name")
    passwd = action("passwd", "change a user's password (its tokens stop working)")
    passwd.add_argument("name")
    add_new_password_arguments(passwd)
    for name, verb in (("grant-role", "give"), ("revoke-role", "take")):
        parser = action(name, f"{verb} a user a role")
        parser.add_argument("name")
        parser.add_argument("role")
    action("list", "every user and its roles")
    action("get", "one user's roles").add_argument("name")


def _user_json(user: User) -> dict[str, Any]:
    return {"name": user.name, "roles": list(user.roles)}


def _show_user(answer: dict[str, Any]) -> None:
    print(f"{answer['name']}\t{','.join(answer['roles'])}")


def _show_users(answer: dict[str, Any]) -> None:
    for user in answer["users"]:
        _show_user(user)


def run(args: argparse.Namespace) -> int:
    action: str = args.user_command
    where = f"rkv user {action} {args.name}" if hasattr(args, "name") else f"rkv user {action}"

    def changed(text: str) -> Any:
        return lambda answer: print(f"{text} (auth revision {answer['revision']})")

    if action == "add":

        def add(client: RkvClient, _: Credentials) -> dict[str, Any]:
            password = read_new_password(args, args.name)
            return {"revision": client.user_add(args.name, password, args.roles)}

        return run_call(where, args, add, changed(f"user {args.name} added"))
    if action == "passwd":

        def passwd(client: RkvClient, _: Credentials) -> dict[str, Any]:
            password = read_new_password(args, args.name)
            return {"revision": client.user_passwd(args.name, password)}

        return run_call(where, args, passwd, changed(f"password of {args.name} changed"))
    if action == "delete":
        return run_call(
            where,
            args,
            lambda c, _: {"revision": c.user_delete(args.name)},
            changed(f"user {args.name} deleted"),
        )
    if action in ("grant-role", "revoke-role"):
        grant = action == "grant-role"
        where = f"{where} {args.role}"

        def role(client: RkvClient, _: Credentials) -> dict[str, Any]:
            change = client.user_grant_role if grant else client.user_revoke_role
            return {"revision": change(args.name, args.role)}

        done = f"role {args.role} {'granted to' if grant else 'revoked from'} {args.name}"
        return run_call(where, args, role, changed(done))
    if action == "list":
        return run_call(
            where, args, lambda c, _: {"users": [_user_json(u) for u in c.users()]}, _show_users
        )
    return run_call(where, args, lambda c, _: _user_json(c.user(args.name)), _show_user)
