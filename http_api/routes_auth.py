"""Users, roles, permissions and tokens: /v1/auth/*.

``POST /v1/auth/token`` is open (it checks a password); the rest needs admin
while auth is enabled and is open while it is disabled, so that the root user
can be created before auth is turned on (as etcd does). Keys and prefixes of
permissions are base64 in JSON unless ``?encoding=utf-8``; a permission's
target is ``"key"``, ``"prefix"`` or ``"checkpoint"`` (a replicator checkpoint's
name: its internal key, which txn checkpoint ops are checked against).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from http_api.authn import AUTH
from http_api.bodies import read_json
from http_api.encoding import decode_bytes, encode_bytes, encoding_param, raw_query
from http_api.errors import json_response
from node.errors import InvalidRequest, Unavailable
from node.keyspace import checkpoint_key, checkpoint_name_problem, key_length_problem
from node.state.auth_records import Permission, PermissionKind

PERMISSION_KINDS = {
    "read": PermissionKind.READ,
    "write": PermissionKind.WRITE,
    "readwrite": PermissionKind.READWRITE,
    "admin": PermissionKind.ADMIN,
}
_KIND_NAMES = {kind: name for name, kind in PERMISSION_KINDS.items()}
TARGETS = ("key", "prefix", "checkpoint")


def render_permission(permission: Permission, encoding: str) -> dict[str, Any]:
    rendered: dict[str, Any] = {"permission": _KIND_NAMES[permission.kind]}
    if permission.kind is not PermissionKind.ADMIN:
        field = "prefix" if permission.is_prefix else "key"
        rendered[field] = encode_bytes(permission.target, encoding, field)
    return rendered


def parse_permission(body: Any, encoding: str) -> Permission:
    shape = '{"permission": read|write|readwrite|admin, "key"|"prefix"|"checkpoint": ...}'
    if not isinstance(body, dict):
        raise InvalidRequest(f"the body must be a JSON object: {shape}")
    name = body.get("permission")
    kind = PERMISSION_KINDS.get(name) if isinstance(name, str) else None
    targets = [name for name in TARGETS if name in body]
    unknown = set(body) - {"permission", *TARGETS}
    if kind is None or unknown or len(targets) > 1:
        raise InvalidRequest(f"the body must be {shape}", code="invalid_permission")
    if kind is PermissionKind.ADMIN:
        if targets:
            raise InvalidRequest("admin takes no key or prefix", code="invalid_permission")
        return Permission(kind)
    if not targets:
        raise InvalidRequest(f"{shape}: a key, prefix or checkpoint", code="invalid_permission")
    target = targets[0]
    if target == "checkpoint":
        name = body["checkpoint"]
        problem = checkpoint_name_problem(name) if isinstance(name, str) else "a name is a string"
        if problem is not None:
            raise InvalidRequest(problem, code="invalid_permission")
        return Permission(kind, checkpoint_key(name), False)
    data = decode_bytes(body[target], encoding, target)
    problem = key_length_problem(data) if target == "key" or data else None
    if problem is not None:
        raise InvalidRequest(f"{target}: {problem}", code="invalid_permission")
    return Permission(kind, data, target == "prefix")


def _render_role(role: dict[str, Any], encoding: str) -> dict[str, Any]:
    return {
        **role,
        "permissions": [render_permission(p, encoding) for p in role["permissions"]],
    }


class _NoAuth:
    """Stands in when the node was built without an auth service (tests)."""

    def __getattr__(self, name: str) -> Any:
        raise Unavailable("this node serves no authentication", code="auth_unavailable")


async def _object(request: web.Request, shape: str) -> dict[str, Any]:
    body = await read_json(request, shape)
    if not isinstance(body, dict):
        raise InvalidRequest(f"the body must be a JSON object: {shape}")
    return body


def add_routes(app: web.Application) -> None:
    def auth(request: web.Request) -> Any:
        return request.app.get(AUTH) or _NoAuth()

    async def token(request: web.Request) -> web.Response:
        body = await _object(request, '{"user", "password"}')
        answer = await auth(request).issue_token(
            body.get("user"), body.get("password"), request.remote or "?"
        )
        return json_response(answer)

    async def status(request: web.Request) -> web.Response:
        return json_response(auth(request).status())

    async def enable(request: web.Request) -> web.Response:
        return json_response(await auth(request).enable())

    async def disable(request: web.Request) -> web.Response:
        return json_response(await auth(request).disable())

    async def add_user(request: web.Request) -> web.Response:
        body = await _object(request, '{"name", "password", "roles"?}')
        answer = await auth(request).add_user(
            body.get("name"), body.get("password"), body.get("roles", [])
        )
        return json_response(answer)

    async def users(request: web.Request) -> web.Response:
        return json_response({"users": auth(request).users()})

    async def user(request: web.Request) -> web.Response:
        return json_response(auth(request).user(request.match_info["name"]))

    async def delete_user(request: web.Request) -> web.Response:
        return json_response(await auth(request).delete_user(request.match_info["name"]))

    async def set_password(request: web.Request) -> web.Response:
        body = await _object(request, '{"password"}')
        name = request.match_info["name"]
        return json_response(await auth(request).set_password(name, body.get("password")))

    async def grant_role(request: web.Request) -> web.Response:
        name, role = request.match_info["name"], request.match_info["role"]
        return json_response(await auth(request).grant_role(name, role, request.method == "PUT"))

    async def add_role(request: web.Request) -> web.Response:
        body = await _object(request, '{"name"}')
        return json_response(await auth(request).add_role(body.get("name")))

    async def roles(request: web.Request) -> web.Response:
        encoding = encoding_param(raw_query(request))
        rendered = [_render_role(role, encoding) for role in auth(request).roles()]
        return json_response({"roles": rendered})

    async def role(request: web.Request) -> web.Response:
        encoding = encoding_param(raw_query(request))
        return json_response(_render_role(auth(request).role(request.match_info["name"]), encoding))

    async def delete_role(request: web.Request) -> web.Response:
        return json_response(await auth(request).delete_role(request.match_info["name"]))

    async def change_permission(request: web.Request) -> web.Response:
        encoding = encoding_param(raw_query(request))
        permission = parse_permission(await read_json(request), encoding)
        answer = await auth(request).change_permission(
            request.match_info["name"], permission, request.method == "POST"
        )
        return json_response(answer)

    add = app.router.add_route
    add("POST", "/v1/auth/token", token)
    add("GET", "/v1/auth/status", status)
    add("POST", "/v1/auth/enable", enable)
    add("POST", "/v1/auth/disable", disable)
    add("POST", "/v1/auth/users", add_user)
    add("GET", "/v1/auth/users", users)
    add("GET", "/v1/auth/users/{name}", user)
    add("DELETE", "/v1/auth/users/{name}", delete_user)
    add("PUT", "/v1/auth/users/{name}/password", set_password)
    add("PUT", "/v1/auth/users/{name}/roles/{role}", grant_role)
    add("DELETE", "/v1/auth/users/{name}/roles/{role}", grant_role)
    add("POST", "/v1/auth/roles", add_role)
    add("GET", "/v1/auth/roles", roles)
    add("GET", "/v1/auth/roles/{name}", role)
    add("DELETE", "/v1/auth/roles/{name}", delete_role)
    add("POST", "/v1/auth/roles/{name}/permissions", change_permission)
    add("DELETE", "/v1/auth/roles/{name}/permissions", change_permission)
