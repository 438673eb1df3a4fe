"""The auth calls (``/v1/auth/*``) as I/O-free plans, which both clients run.

Changes (enable, disable, users, roles, permissions) go to the leader and are
retried only when certainly not applied, as any write; they answer the auth
revision they made. Lists go to the leader too (a follower may not have applied
the last change yet). A token is asked of the first node that answers: any
member signs and checks them, and asking needs no credentials, so no leader
discovery (``GET /v1/status`` needs a user once auth is on) comes first.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from http_api.client.auth_model import AuthStatus, Permission, Role, User
from http_api.client.errors import RkvClientError
from http_api.client.model import BytesLike
from http_api.client.operations import _Core
from http_api.client.wire import _Plan

_JSON = {"Content-Type": "application/json"}


def _segment(name: str, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"a {what} name is a non-empty string")
    return quote(name, safe="")


def _object(body: Any, what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise RkvClientError(f"the server sent a malformed {what}", code="bad_response")
    return body


class _AuthPlans:
    """Every auth call as a plan over a client's core (leader and retry rules)."""

    def __init__(self, core: _Core) -> None:
        self._core = core

    def _change(self, method: str, target: str, body: Any = None) -> _Plan[int]:
        data = None if body is None else json.dumps(body).encode()
        reply = yield from self._core.call(
            method, target, data, _JSON if data is not None else None, write=True
        )
        revision = _object(reply.json(), "answer").get("revision")
        return revision if isinstance(revision, int) else 0

    def _read(self, target: str) -> _Plan[Any]:
        reply = yield from self._core.call("GET", target, write=False)
        return reply.json()

    def token(self, user: str, password: str) -> _Plan[str]:
        data = json.dumps({"user": user, "password": password}).encode()
        reply = yield from self._core.call(
            "POST", "/v1/auth/token", data, _JSON, write=False, stale=True
        )
        token = _object(reply.json(), "token").get("token")
        if not isinstance(token, str) or not token:
            raise RkvClientError("the server sent no token", code="bad_response")
        return token

    def status(self) -> _Plan[AuthStatus]:
        body = _object((yield from self._read("/v1/auth/status")), "auth status")
        revision = body.get("revision")
        return AuthStatus(bool(body.get("enabled")), revision if isinstance(revision, int) else 0)

    def enable(self) -> _Plan[int]:
        return self._change("POST", "/v1/auth/enable")

    def disable(self) -> _Plan[int]:
        return self._change("POST", "/v1/auth/disable")

    # -- users ---------------------------------------------------------------------------

    def user_add(self, name: str, password: str, roles: tuple[str, ...]) -> _Plan[int]:
        if isinstance(roles, str):
            raise TypeError("roles is a sequence of role names, not one string")
        body = {"name": name, "password": password, "roles": list(roles)}
        return self._change("POST", "/v1/auth/users", body)

    def user_delete(self, name: str) -> _Plan[int]:
        return self._change("DELETE", "/v1/auth/users/" + _segment(name, "user"))

    def user_passwd(self, name: str, password: str) -> _Plan[int]:
        target = f"/v1/auth/users/{_segment(name, 'user')}/password"
        return self._change("PUT", target, {"password": password})

    def user_role(self, name: str, role: str, grant: bool) -> _Plan[int]:
        target = f"/v1/auth/users/{_segment(name, 'user')}/roles/{_segment(role, 'role')}"
        return self._change("PUT" if grant else "DELETE", target)

    def users(self) -> _Plan[list[User]]:
        body = _object((yield from self._read("/v1/auth/users")), "user list")
        listed = body.get("users")
        if not isinstance(listed, list):
            raise RkvClientError("the server sent a malformed user list", code="bad_response")
        return [User.from_json(raw) for raw in listed]

    def user(self, name: str) -> _Plan[User]:
        return User.from_json((yield from self._read("/v1/auth/users/" + _segment(name, "user"))))

    # -- roles ---------------------------------------------------------------------------

    def role_add(self, name: str) -> _Plan[int]:
        return self._change("POST", "/v1/auth/roles", {"name": name})

    def role_delete(self, name: str) -> _Plan[int]:
        return self._change("DELETE", "/v1/auth/roles/" + _segment(name, "role"))

    def role_permission(self, name: str, permission: Permission, grant: bool) -> _Plan[int]:
        target = f"/v1/auth/roles/{_segment(name, 'role')}/permissions"
        return self._change("POST" if grant else "DELETE", target, permission.to_json())

    def roles(self) -> _Plan[list[Role]]:
        body = _object((yield from self._read("/v1/auth/roles")), "role list")
        listed = body.get("roles")
        if not isinstance(listed, list):
            raise RkvClientError("the server sent a malformed role list", code="bad_response")
        return [Role.from_json(raw) for raw in listed]

    def role(self, name: str) -> _Plan[Role]:
        return Role.from_json((yield from self._read("/v1/auth/roles/" + _segment(name, "role"))))


def revoked_target(
    key: BytesLike | None, prefix: BytesLike | None, checkpoint: str | None, admin: bool
) -> Permission:
    """What ``role_revoke`` removes: the role's permission on one target, whatever its
    kind (the server matches on the target; the kind sent is only a placeholder)."""
    if admin:
        if key is not None or prefix is not None or checkpoint is not None:
            raise ValueError("revoke admin, or a key, prefix or checkpoint: not both")
        return Permission("admin")
    return Permission.of("read", key=key, prefix=prefix, checkpoint=checkpoint)
