"""The one command that changes users, roles, permissions and the enabled flag.

Encoded as ``[TAG_AUTH, op, name, role, password_hash, [role, ...], permission | nil,
limit]`` (node/state/commands.py holds the tag and the entry format: an entry
holding one is format 3). Every field is always present, so the form never
depends on the op; fields an op does not use are empty. ``limit`` is the
proposing node's bound for the op (``--max-auth-users`` for ADD_USER,
``--max-auth-roles`` for ADD_ROLE, ``--max-role-permissions`` for
GRANT_PERMISSION): it travels in the entry because it changes what the command
writes, so every replica decides with the same number.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

from node.errors import EntryDecodeError
from node.state.auth_records import (
    ROOT,
    Permission,
    decode_permission,
    encode_permission,
    name_problem,
)

INT64_MAX = 2**63 - 1


class AuthOp(enum.IntEnum):
    """Values are part of the encoding: never renumber."""

    ENABLE = 1
    DISABLE = 2
    ADD_USER = 3
    DELETE_USER = 4
    SET_PASSWORD = 5
    GRANT_ROLE = 6
    REVOKE_ROLE = 7
    ADD_ROLE = 8
    DELETE_ROLE = 9
    GRANT_PERMISSION = 10
    REVOKE_PERMISSION = 11
    BOOTSTRAP_ROOT = 12
    """Once, on a cluster that never set auth up: the user root with the role root,
    and auth enabled, in one entry (--root-password-file)."""


_USER_OPS = frozenset(
    {
        AuthOp.ADD_USER,
        AuthOp.DELETE_USER,
        AuthOp.SET_PASSWORD,
        AuthOp.GRANT_ROLE,
        AuthOp.REVOKE_ROLE,
        AuthOp.BOOTSTRAP_ROOT,
    }
)
_ROLE_OPS = frozenset(
    {AuthOp.ADD_ROLE, AuthOp.DELETE_ROLE, AuthOp.GRANT_PERMISSION, AuthOp.REVOKE_PERMISSION}
)


class AuthChange(NamedTuple):
    """One change of the auth state (node/state/auth_apply.py decides it).

    ``name`` is the user (user ops) or role (role ops) changed; ``role`` the role a
    user is granted or revoked; ``password_hash`` a new user's or new password's
    hash; ``roles`` a new user's roles; ``permission`` what a role is granted or
    revoked; ``limit`` the bound the op is checked against (0: none)."""

    op: AuthOp
    name: str = ""
    role: str = ""
    password_hash: str = ""
    roles: tuple[str, ...] = ()
    permission: Permission | None = None
    limit: int = 0


def _problem(change: AuthChange) -> str | None:
    op = change.op
    if op in _USER_OPS:
        problem = name_problem(change.name, "user")
    elif op in _ROLE_OPS:
        problem = name_problem(change.name, "role")
    else:
        problem = None
    if problem is None and op in (AuthOp.GRANT_ROLE, AuthOp.REVOKE_ROLE):
        problem = name_problem(change.role, "role")
    if problem is None and op is AuthOp.ADD_USER:
        problem = next((p for r in change.roles if (p := name_problem(r, "role"))), None)
    if problem is None and op is AuthOp.BOOTSTRAP_ROOT and change.name != ROOT:
        problem = f"the bootstrap makes the user {ROOT}"
    needs_hash = op in (AuthOp.ADD_USER, AuthOp.SET_PASSWORD, AuthOp.BOOTSTRAP_ROOT)
    if problem is None and needs_hash and not change.password_hash:
        problem = "a password hash is needed"
    needs_permission = op in (AuthOp.GRANT_PERMISSION, AuthOp.REVOKE_PERMISSION)
    if problem is None and needs_permission and change.permission is None:
        problem = "a permission is needed"
    if problem is None and (type(change.limit) is not int or not 0 <= change.limit <= INT64_MAX):
        problem = f"a limit is an integer in 0..{INT64_MAX}"
    return problem


def encode_auth(change: AuthChange, tag: int) -> list[Any]:
    """Raises ValueError for a change decoding would refuse (the proposer's request fails
    alone instead of the group-committed entry)."""
    problem = _problem(change)
    if problem is not None:
        raise ValueError(f"cannot encode an auth change: {problem}")
    permission = None if change.permission is None else encode_permission(change.permission)
    return [
        tag,
        int(change.op),
        change.name,
        change.role,
        change.password_hash,
        list(change.roles),
        permission,
        change.limit,
    ]


def decode_auth(raw: list[Any]) -> AuthChange:
    _, op, name, role, password_hash, roles, permission, limit = raw
    if type(op) is not int or op not in AuthOp.__members__.values():
        raise EntryDecodeError(f"unknown auth op {op!r:.40}")
    if not all(type(text) is str for text in (name, role, password_hash)):
        raise EntryDecodeError("an auth change's name, role and password hash are strings")
    if not isinstance(roles, list) or not all(type(r) is str for r in roles):
        raise EntryDecodeError("an auth change's roles are an array of strings")
    change = AuthChange(
        AuthOp(op),
        name,
        role,
        password_hash,
        tuple(roles),
        None if permission is None else decode_permission(permission),
        limit,
    )
    problem = _problem(change)
    if problem is not None:
        raise EntryDecodeError(f"malformed auth change: {problem}")
    return change
