"""OpenAPI paths of users, roles, permissions and tokens (http_api/routes_auth.py), and
the security each operation needs, derived from THE table (http_api/permissions.py)."""

from __future__ import annotations

from typing import Any

from http_api.openapi_common import ENCODING, errors, json_content
from http_api.permissions import Need, need_of
from node.service.passwords import MAX_PASSWORD_CHARS

_NAME = {"type": "string", "pattern": "^[A-Za-z0-9._@-]{1,128}$"}
_PASSWORD = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_PASSWORD_CHARS,
    "description": f"1 to {MAX_PASSWORD_CHARS} characters",
}
_REVISION = json_content(
    {"type": "object", "properties": {"revision": {"type": "integer"}}},
    "Done: the auth revision after the change (every change invalidates every token)",
)
_KINDS = {"type": "string", "enum": ["read", "write", "readwrite"]}
_TARGETS = {
    "key": {
        "type": "string",
        "minLength": 1,
        "description": "one key (base64, or text with encoding=utf-8)",
    },
    "prefix": {"type": "string", "description": "every key starting with it"},
    "checkpoint": {
        "type": "string",
        "pattern": "^[A-Za-z0-9._:/@-]{1,200}$",
        "description": "a replicator checkpoint's name (input only: listed as its internal key)",
    },
}
_PERMISSION = {
    "oneOf": [
        {
            "type": "object",
            "required": ["permission"],
            "properties": {"permission": {"const": "admin"}},
            "additionalProperties": False,
        },
        *(
            {
                "type": "object",
                "required": ["permission", target],
                "properties": {"permission": _KINDS, target: schema},
                "additionalProperties": False,
            }
            for target, schema in _TARGETS.items()
        ),
    ],
    "description": "admin takes no target; the others exactly one of key, prefix, checkpoint",
}
_ROLE = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "permissions": {"type": "array", "items": _PERMISSION},
        "built_in": {"type": "boolean"},
    },
}
_USER = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "roles": {"type": "array", "items": _NAME}},
}


def _path(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": _NAME,
        "description": description,
    }


USER, ROLE, ROLE_OF_USER = (
    _path("name", "The user"),
    _path("name", "The role"),
    _path("role", "The role"),
)


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _change(summary: str, *statuses: int, **extra: Any) -> dict[str, Any]:
    return {
        "summary": summary,
        "responses": {"200": _REVISION, **errors(400, *statuses, 503)},
        **extra,
    }


def auth_paths() -> dict[str, Any]:
    user_body = {
        "type": "object",
        "required": ["name", "password"],
        "properties": {
            "name": _NAME,
            "password": _PASSWORD,
            "roles": {"type": "array", "items": _NAME},
        },
    }
    return {
        "/v1/auth/token": {
            "post": {
                "summary": "Exchange a user's password for a signed bearer token",
                "description": "Open. The token is valid on every member until expires_in "
                "seconds (--auth-token-ttl) pass or users or roles change; send it as "
                "Authorization: Bearer TOKEN. Failed attempts are limited per user and "
                "address and per address (429 with Retry-After).",
                "requestBody": _body(
                    {
                        "type": "object",
                        "required": ["user", "password"],
                        "properties": {"user": _NAME, "password": _PASSWORD},
                    }
                ),
                "responses": {
                    "200": json_content(
                        {
                            "type": "object",
                            "properties": {
                                "token": {"type": "string"},
                                "expires_in": {"type": "number"},
                            },
                        },
                        "The token",
                    ),
                    **errors(400, 401, 409, 429, 503),
                },
            }
        },
        "/v1/auth/status": {
            "get": {
                "summary": "Whether auth is enabled, and the auth revision",
                "responses": {
                    "200": json_content(
                        {
                            "type": "object",
                            "properties": {
                                "enabled": {"type": "boolean"},
                                "revision": {"type": "integer"},
                            },
                        },
                        "Status",
                    ),
                    **errors(503),
                },
            }
        },
        "/v1/auth/enable": {
            "post": _change(
                "Enable authentication (needs the user root with the role root, and a cluster "
                "secret)",
                409,
            )
        },
        "/v1/auth/disable": {"post": _change("Disable authentication")},
        "/v1/auth/users": {
            "post": _change(
                "Add a user (the password is hashed with scrypt on this node)",
                404,
                409,
                429,
                requestBody=_body(user_body),
            ),
            "get": {
                "summary": "Every user: names and roles (never a password or its hash)",
                "responses": {
                    "200": json_content(
                        {
                            "type": "object",
                            "properties": {"users": {"type": "array", "items": _USER}},
                        },
                        "Users",
                    ),
                    **errors(503),
                },
            },
        },
        "/v1/auth/users/{name}": {
            "get": {
                "summary": "One user's roles",
                "parameters": [USER],
                "responses": {"200": json_content(_USER, "The user"), **errors(400, 404, 503)},
            },
            "delete": _change("Delete a user", 404, 409, parameters=[USER]),
        },
        "/v1/auth/users/{name}/password": {
            "put": _change(
                "Change a user's password",
                404,
                parameters=[USER],
                requestBody=_body(
                    {
                        "type": "object",
                        "required": ["password"],
                        "properties": {"password": _PASSWORD},
                    }
                ),
            )
        },
        "/v1/auth/users/{name}/roles/{role}": {
            "put": _change("Grant a role to a user", 404, parameters=[USER, ROLE_OF_USER]),
            "delete": _change(
                "Revoke a role from a user", 404, 409, parameters=[USER, ROLE_OF_USER]
            ),
        },
        "/v1/auth/roles": {
            "post": _change(
                "Add a role (no permissions yet)",
                409,
                429,
                requestBody=_body(
                    {"type": "object", "required": ["name"], "properties": {"name": _NAME}}
                ),
            ),
            "get": {
                "summary": "Every role and its permissions (root is built in: everything)",
                "parameters": [ENCODING],
                "responses": {
                    "200": json_content(
                        {
                            "type": "object",
                            "properties": {"roles": {"type": "array", "items": _ROLE}},
                        },
                        "Roles",
                    ),
                    **errors(400, 503),
                },
            },
        },
        "/v1/auth/roles/{name}": {
            "get": {
                "summary": "One role's permissions",
                "parameters": [ROLE, ENCODING],
                "responses": {"200": json_content(_ROLE, "The role"), **errors(400, 404, 503)},
            },
            "delete": _change(
                "Delete a role (taken from every user holding it)", 404, 409, parameters=[ROLE]
            ),
        },
        "/v1/auth/roles/{name}/permissions": {
            "post": _change(
                "Grant a permission (on a target the role has, it replaces the kind)",
                404,
                409,
                413,
                parameters=[ROLE, ENCODING],
                requestBody=_body(_PERMISSION),
            ),
            "delete": _change(
                "Revoke the role's permission on a target",
                404,
                409,
                parameters=[ROLE, ENCODING],
                requestBody=_body(_PERMISSION),
            ),
        },
    }


SECURITY_SCHEMES = {
    "basic": {"type": "http", "scheme": "basic"},
    "bearer": {"type": "http", "scheme": "bearer", "description": "From POST /v1/auth/token"},
    "mtls": {"type": "mutualTLS", "description": "The client certificate's CN names the user"},
}

_NEED_TEXT = {
    Need.AUTHENTICATED: "any user",
    Need.READ_KEY: "read on the key",
    Need.WRITE_KEY: "write on the key",
    Need.READWRITE_KEY: "readwrite on the key",
    Need.READ_PREFIX: "read on the prefix (a prefix permission at or above it)",
    Need.READ_ALARMS: "read on the alarms' internal prefix \\x00rkv/alarms/ (a prefix "
    "permission at or above it covers it)",
    Need.READ_LOCK: "read on the lock's internal key \\x00rkv/locks/NAME (a prefix "
    "permission at or above it covers it)",
    Need.WRITE_LOCK: "write on the lock's internal key \\x00rkv/locks/NAME (a prefix "
    "permission at or above it covers it)",
    Need.TXN: "compares and gets: read, puts and deletes: write, incr and append: "
    "readwrite, on every key of both branches",
    Need.WRITE_EACH_KEY: "write on each line's key",
    Need.ADMIN: "admin",
}


def secure(paths: dict[str, Any]) -> dict[str, Any]:
    """Each operation's security, from the permission table: open ones say
    ``security: []``; the others document 401 (and 403 when a permission is needed)
    and what they need once auth is enabled."""
    for path, item in paths.items():
        for method, operation in item.items():
            need = need_of(method.upper(), path)
            if need is Need.OPEN:
                operation["security"] = []
                continue
            statuses = (401,) if need is Need.AUTHENTICATED else (401, 403)
            operation["responses"] = {**errors(*statuses), **operation["responses"]}
            operation["x-rkv-permission"] = need.value
            note = f"With auth enabled, needs: {_NEED_TEXT[need]}."
            operation["description"] = (operation.get("description", "") + " " + note).strip()
    return paths
