"""Users, roles and permissions: the replicated records of authentication.

They are ordinary records under :data:`AUTH_PREFIX` (node/keyspace.py), written
only by :class:`node.state.commands.AuthChange` entries, so replay, compaction,
snapshots, rebuilds and the audit carry them like producer sessions::

    AUTH_META_KEY            -> msgpack [1, enabled: bool, revision: int]
    AUTH_USERS_PREFIX + name -> msgpack [1, password_hash: str, [role, ...]]
    AUTH_ROLES_PREFIX + name -> msgpack [1, [[kind, target: bytes, is_prefix: bool], ...]]

The model is etcd's: a role grants ``read``, ``write`` or ``readwrite`` on one
key or on every key under a prefix, and ``admin`` (no target) for the cluster
endpoints. The role ``root`` is built in: it holds every permission, is never
stored, and cannot be changed or deleted. The revision goes up by one with
every auth change, whatever it is; tokens carry the revision they were issued
at (node/service/auth_tokens.py), which is how a change revokes them.

Password hashes are computed by the node that receives the request
(node/service/passwords.py) and travel in the entry; the state machine never
sees a password.
"""

from __future__ import annotations

import enum
import re
from typing import Any, NamedTuple

import msgpack

from node.errors import EntryDecodeError
from node.keyspace import RESERVED_PREFIX

AUTH_PREFIX = RESERVED_PREFIX + b"auth/"
AUTH_META_KEY = AUTH_PREFIX + b"meta"
AUTH_USERS_PREFIX = AUTH_PREFIX + b"users/"
AUTH_ROLES_PREFIX = AUTH_PREFIX + b"roles/"
ROOT = "root"
"""The user that must exist (holding the role of the same name) before auth is enabled."""
_RECORD_FORMAT = 1

MAX_NAME_CHARS = 128
_NAME = re.compile(r"[A-Za-z0-9._@-]{1,128}")

DEFAULT_MAX_USERS = 10_000
DEFAULT_MAX_ROLES = 10_000
DEFAULT_MAX_ROLE_PERMISSIONS = 1000


def name_problem(name: object, what: str) -> str | None:
    """Why ``name`` cannot name a user or role, or None. ``:`` is excluded because it
    separates the user from the password in HTTP Basic."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return f"a {what} name is 1 to {MAX_NAME_CHARS} characters of A-Z a-z 0-9 . _ @ -"
    return None


class PermissionKind(enum.IntEnum):
    """What a permission allows; values are part of the encoding. READWRITE is both bits."""

    READ = 1
    WRITE = 2
    READWRITE = 3
    ADMIN = 4


class Permission(NamedTuple):
    """``kind`` on the key ``target`` (or, with ``is_prefix``, on every key starting with
    it). An admin permission has an empty target and is no prefix."""

    kind: PermissionKind
    target: bytes = b""
    is_prefix: bool = False

    def covers_key(self, key: bytes) -> bool:
        if self.kind is PermissionKind.ADMIN:
            return False
        return key.startswith(self.target) if self.is_prefix else key == self.target

    def covers_prefix(self, prefix: bytes) -> bool:
        """Whether every key under ``prefix`` is covered (a scan or a watch of it)."""
        return (
            self.kind is not PermissionKind.ADMIN
            and self.is_prefix
            and prefix.startswith(self.target)
        )


ROOT_PERMISSIONS = (
    Permission(PermissionKind.READWRITE, b"", True),
    Permission(PermissionKind.ADMIN),
)
"""What the built-in role ``root`` holds: everything."""


class AuthMeta(NamedTuple):
    enabled: bool = False
    revision: int = 0


class UserRecord(NamedTuple):
    password_hash: str
    roles: tuple[str, ...] = ()


def user_key(name: str) -> bytes:
    return AUTH_USERS_PREFIX + name.encode()


def role_key(name: str) -> bytes:
    return AUTH_ROLES_PREFIX + name.encode()


def _pack(payload: list[Any]) -> bytes:
    packed: bytes = msgpack.packb([_RECORD_FORMAT, *payload], use_bin_type=True)
    return packed


def _unpack(data: bytes, fields: int, what: str) -> list[Any]:
    try:
        raw = msgpack.unpackb(data, raw=False, use_list=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise EntryDecodeError(f"a stored {what} is not valid msgpack: {exc}") from exc
    if not isinstance(raw, list) or len(raw) != fields + 1 or raw[0] != _RECORD_FORMAT:
        raise EntryDecodeError(f"a stored {what} record has an unknown shape")
    return raw[1:]


def encode_meta(meta: AuthMeta) -> bytes:
    return _pack([meta.enabled, meta.revision])


def decode_meta(data: bytes | None) -> AuthMeta:
    if data is None:
        return AuthMeta()
    enabled, revision = _unpack(data, 2, "auth state")
    return AuthMeta(bool(enabled), int(revision))


def encode_user(user: UserRecord) -> bytes:
    return _pack([user.password_hash, list(user.roles)])


def decode_user(data: bytes) -> UserRecord:
    password_hash, roles = _unpack(data, 2, "user")
    return UserRecord(str(password_hash), tuple(str(r) for r in roles))


def encode_permission(permission: Permission) -> list[Any]:
    return [int(permission.kind), permission.target, permission.is_prefix]


def decode_permission(raw: Any) -> Permission:
    if not isinstance(raw, list) or len(raw) != 3:
        raise EntryDecodeError(f"a permission must be [kind, target, is_prefix], not {raw!r:.80}")
    kind, target, is_prefix = raw
    if type(kind) is not int or kind not in PermissionKind.__members__.values():
        raise EntryDecodeError(f"unknown permission kind {kind!r:.40}")
    if type(target) is not bytes or type(is_prefix) is not bool:
        raise EntryDecodeError("a permission's target is bytes and is_prefix a bool")
    permission = Permission(PermissionKind(kind), target, is_prefix)
    if permission.kind is PermissionKind.ADMIN and (target or is_prefix):
        raise EntryDecodeError("an admin permission has no key or prefix")
    return permission


def encode_role(permissions: tuple[Permission, ...]) -> bytes:
    return _pack([[encode_permission(p) for p in permissions]])


def decode_role(data: bytes) -> tuple[Permission, ...]:
    (raw,) = _unpack(data, 1, "role")
    return tuple(decode_permission(p) for p in raw)


def describe_key(key: bytes) -> str:
    """A key as a message shows it: text where it is UTF-8, escapes elsewhere."""
    text = key.decode("utf-8", "backslashreplace")
    return repr(text) if len(text) <= 200 else repr(text[:200]) + "..."
