"""The values the auth management calls take and return: users, roles, permissions.

A :class:`Permission` is etcd's: ``read``, ``write`` or ``readwrite`` on one
key, on every key under a prefix, or on a replicator checkpoint (by name), or
``admin`` (the cluster endpoints and users and roles). Keys and prefixes are
bytes on the wire (base64 in the JSON). Nothing here does I/O.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from http_api.client.errors import RkvClientError
from http_api.client.model import BytesLike, to_bytes

PERMISSIONS = ("read", "write", "readwrite", "admin")
CHECKPOINT_KEY_PREFIX = b"\x00rkv/checkpoints/"
"""Where a checkpoint's permission lives: the server lists it as that internal key
(node/keyspace.py's CHECKPOINTS_PREFIX; the client imports no server code)."""


@dataclass(frozen=True, slots=True)
class Permission:
    """``permission`` on exactly one of ``key``, ``prefix`` or ``checkpoint``, or
    ``admin`` on none of them. Build with :meth:`of`."""

    permission: str
    key: bytes | None = None
    prefix: bytes | None = None
    checkpoint: str | None = None

    def __post_init__(self) -> None:
        if self.permission not in PERMISSIONS:
            raise ValueError(f"permission must be one of {', '.join(PERMISSIONS)}")
        targets = [t for t in (self.key, self.prefix, self.checkpoint) if t is not None]
        if self.permission == "admin" and targets:
            raise ValueError("admin takes no key, prefix or checkpoint")
        if self.permission != "admin" and len(targets) != 1:
            raise ValueError(f"{self.permission} needs exactly one of key, prefix or checkpoint")

    @classmethod
    def of(
        cls,
        permission: str,
        *,
        key: BytesLike | None = None,
        prefix: BytesLike | None = None,
        checkpoint: str | None = None,
    ) -> Permission:
        return cls(
            permission,
            None if key is None else to_bytes(key, "key"),
            None if prefix is None else to_bytes(prefix, "prefix"),
            checkpoint,
        )

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"permission": self.permission}
        if self.key is not None:
            body["key"] = base64.b64encode(self.key).decode("ascii")
        elif self.prefix is not None:
            body["prefix"] = base64.b64encode(self.prefix).decode("ascii")
        elif self.checkpoint is not None:
            body["checkpoint"] = self.checkpoint
        return body

    @classmethod
    def from_json(cls, raw: Any) -> Permission:
        """A permission as the server lists it (base64 keys; a checkpoint appears as
        its internal key and is given back by name)."""
        if not isinstance(raw, dict) or raw.get("permission") not in PERMISSIONS:
            raise RkvClientError("the server sent a malformed permission", code="bad_response")
        kind = str(raw["permission"])
        if kind == "admin":
            return cls(kind)
        if "prefix" in raw:
            return cls(kind, prefix=_unb64(raw["prefix"]))
        key = _unb64(raw.get("key"))
        if key.startswith(CHECKPOINT_KEY_PREFIX):
            name = key[len(CHECKPOINT_KEY_PREFIX) :].decode("utf-8", "replace")
            return cls(kind, checkpoint=name)
        return cls(kind, key=key)


@dataclass(frozen=True, slots=True)
class User:
    name: str
    roles: tuple[str, ...]

    @classmethod
    def from_json(cls, raw: Any) -> User:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise RkvClientError("the server sent a malformed user", code="bad_response")
        roles = raw.get("roles")
        if not isinstance(roles, list):
            raise RkvClientError("the server sent a malformed user", code="bad_response")
        return cls(raw["name"], tuple(str(role) for role in roles))


@dataclass(frozen=True, slots=True)
class Role:
    name: str
    permissions: tuple[Permission, ...]
    built_in: bool = False
    """The role ``root``: every permission, cannot be changed or deleted."""

    @classmethod
    def from_json(cls, raw: Any) -> Role:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise RkvClientError("the server sent a malformed role", code="bad_response")
        permissions = raw.get("permissions")
        if not isinstance(permissions, list):
            raise RkvClientError("the server sent a malformed role", code="bad_response")
        return cls(
            raw["name"],
            tuple(Permission.from_json(p) for p in permissions),
            bool(raw.get("built_in", False)),
        )


@dataclass(frozen=True, slots=True)
class AuthStatus:
    enabled: bool
    revision: int
    """Raised by every change of users, roles or permissions (older tokens stop working)."""


def _unb64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise RkvClientError("the server sent a malformed permission", code="bad_response")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise RkvClientError(
            "the server sent a permission that is not base64", code="bad_response"
        ) from None
