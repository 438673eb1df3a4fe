"""`rkv role add | delete | grant | revoke | list | get`: roles and their permissions
(admin once auth is on).

``grant NAME (--exact KEY | --prefix P | --checkpoint C | --lock NAME |
--lock-prefix P) --permission read|write|readwrite``, or ``grant NAME
--permission admin`` (no target); granting on a target the role has replaces its
permission there. ``revoke NAME`` takes the same targets or ``--admin``.
``--lock NAME`` is the lock's internal key ``\x00rkv/locks/NAME`` (which a
command line cannot type), ``--lock-prefix P`` the internal prefix of every lock
under P (docs/LEASES.md, Permissions), ``--checkpoint-prefix C`` that of every
checkpoint whose name starts with C. (One key is ``--exact``:
``--key`` is every command's client-certificate key file.) Keys and prefixes are the
bytes typed; listed ones that are not printable text show as ``base64:...``.
A permission prints as ``PERMISSION<TAB>key|prefix|checkpoint<TAB>TARGET``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from http_api.client import Permission, RkvClient, Role
from http_api.client.auth_model import PERMISSIONS
from http_api.client.credentials import Credentials
from node.cli.common import shown_bytes
from node.cli.management import UsageError, command_group, run_call
from node.keyspace import CHECKPOINTS_PREFIX
from node.state.leases import LOCKS_PREFIX


def add_commands(sub: Any) -> None:
    group_action = command_group(
        sub, "role", "add or delete roles, grant or revoke their permissions", run
    )

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = group_action(name, help_text)
        parser.add_argument("name", help="the role")
        return parser

    action("add", "add a role (with no permission)")
    action("delete", "delete a role (and take it from every user)")
    grant = action("grant", "give a role a permission on a key, a prefix or a checkpoint")
    _targets(grant, admin=False)
    grant.add_argument(
        "--permission",
        required=True,
        choices=PERMISSIONS,
        help="admin: the cluster endpoints and users and roles (takes no target)",
    )
    revoke = action("revoke", "take a role's permission on a target (or its admin) away")
    _targets(revoke, admin=True)
    group_action("list", "every role and its permissions")
    action("get", "one role's permissions")


def _targets(parser: argparse.ArgumentParser, *, admin: bool) -> None:
    group = parser.add_mutually_exclusive_group(required=admin)
    group.add_argument(
        "--exact",
        dest="exact_key",
        metavar="KEY",
        help="exactly this key (not --key: that is the client certificate's key file)",
    )
    group.add_argument("--prefix", metavar="P", help="every key starting with P")
    group.add_argument(
        "--checkpoint", metavar="C", help="a replicator's checkpoint (the Redis one: redis:PREFIX)"
    )
    group.add_argument(
        "--checkpoint-prefix",
        metavar="C",
        help="every checkpoint whose name starts with C (a Redis Cluster's shards: redis:PREFIX@)",
    )
    group.add_argument(
        "--lock",
        metavar="NAME",
        help="a lock or election (its internal key \\x00rkv/locks/NAME; the Redis "
        "replicator's: redis-replicate:PREFIX without its last /)",
    )
    group.add_argument(
        "--lock-prefix",
        metavar="P",
        help="every lock or election whose name starts with P",
    )
    if admin:
        group.add_argument("--admin", action="store_true", help="the admin permission")


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else os.fsencode(text)


def _key(args: argparse.Namespace) -> bytes | None:
    """``--exact KEY``, or ``--lock NAME``'s internal key."""
    if args.lock is not None:
        return LOCKS_PREFIX + os.fsencode(args.lock)
    return _bytes(args.exact_key)


def _prefix(args: argparse.Namespace) -> bytes | None:
    """``--prefix P``, or the internal prefix of ``--lock-prefix P`` or
    ``--checkpoint-prefix C``."""
    if args.lock_prefix is not None:
        return LOCKS_PREFIX + os.fsencode(args.lock_prefix)
    if args.checkpoint_prefix is not None:
        return CHECKPOINTS_PREFIX + os.fsencode(args.checkpoint_prefix)
    return _bytes(args.prefix)


def _permission_json(permission: Permission) -> dict[str, Any]:
    found: dict[str, Any] = {"permission": permission.permission}
    if permission.key is not None:
        found["key"] = shown_bytes(permission.key)
    elif permission.prefix is not None:
        found["prefix"] = shown_bytes(permission.prefix)
    elif permission.checkpoint is not None:
        found["checkpoint"] = permission.checkpoint
    return found


def _role_json(role: Role) -> dict[str, Any]:
    permissions = [_permission_json(p) for p in role.permissions]
    return {"name": role.name, "permissions": permissions, "built_in": role.built_in}


def _show_role(answer: dict[str, Any]) -> None:
    print(answer["name"] + ("\t(built in)" if answer["built_in"] else ""))
    for permission in answer["permissions"]:
        target = [(k, v) for k, v in permission.items() if k != "permission"]
        print("\t".join(["", permission["permission"], *(f"{k}\t{v}" for k, v in target)]))


def _show_roles(answer: dict[str, Any]) -> None:
    for role in answer["roles"]:
        _show_role(role)


def run(args: argparse.Namespace) -> int:
    action: str = args.role_command
    where = f"rkv role {action} {args.name}" if hasattr(args, "name") else "rkv role list"

    def changed(text: str) -> Any:
        return lambda answer: print(f"{text} (auth revision {answer['revision']})")

    if action == "add":
        return run_call(
            where,
            args,
            lambda c, _: {"revision": c.role_add(args.name)},
            changed(f"role {args.name} added"),
        )
    if action == "delete":
        return run_call(
            where,
            args,
            lambda c, _: {"revision": c.role_delete(args.name)},
            changed(f"role {args.name} deleted"),
        )
    if action == "grant":

        def grant(client: RkvClient, _: Credentials) -> dict[str, Any]:
            targets = (_key(args), _prefix(args), args.checkpoint)
            if args.permission == "admin" and any(targets):
                raise UsageError("--permission admin takes no target (--exact, --prefix...)")
            if args.permission != "admin" and not any(targets):
                raise UsageError(
                    f"--permission {args.permission} needs --exact, --prefix, --checkpoint, "
                    "--lock or --lock-prefix"
                )
            revision = client.role_grant(
                args.name,
                permission=args.permission,
                key=_key(args),
                prefix=_prefix(args),
                checkpoint=args.checkpoint,
            )
            return {"revision": revision}

        return run_call(where, args, grant, changed(f"role {args.name}: {args.permission} granted"))
    if action == "revoke":

        def revoke(client: RkvClient, _: Credentials) -> dict[str, Any]:
            revision = client.role_revoke(
                args.name,
                key=_key(args),
                prefix=_prefix(args),
                checkpoint=args.checkpoint,
                admin=args.admin,
            )
            return {"revision": revision}

        return run_call(where, args, revoke, changed(f"role {args.name}: permission revoked"))
    if action == "list":
        return run_call(
            where, args, lambda c, _: {"roles": [_role_json(r) for r in c.roles()]}, _show_roles
        )
    return run_call(where, args, lambda c, _: _role_json(c.role(args.name)), _show_role)
