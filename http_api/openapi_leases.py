"""OpenAPI paths of leases (http_api/routes_leases.py, routes_lease_stream.py) and the
parameters and errors the lock, election and key-write paths share with them."""

from __future__ import annotations

from typing import Any

from http_api.lease_input import (
    DEFAULT_PAGE,
    FENCING_HEADER,
    FENCING_PATTERN,
    MAX_LEASE_ID,
    MAX_PAGE,
)
from http_api.openapi_common import BYTES, ENCODING, ERROR, json_content
from node.state.leases import DEFAULT_MAX_LEASE_TTL, MAX_KEEPALIVE_IDS

LEASE_ID = {"type": "integer", "minimum": 1, "maximum": MAX_LEASE_ID}
TTL = {
    "type": "integer",
    "minimum": 1,
    "maximum": DEFAULT_MAX_LEASE_TTL,
    "description": "Seconds, 1 to --max-lease-ttl (2,592,000 by default: 30 days); "
    "otherwise 400 invalid_ttl",
}
NO_LEASES = "leases_unavailable: this node serves no leases"
FENCING: dict[str, Any] = {
    "name": FENCING_HEADER,
    "in": "header",
    "schema": {"type": "string", "pattern": FENCING_PATTERN},
    "description": "NAME=TOKEN: apply the write only while lock NAME is held with exactly "
    "that fencing token; otherwise nothing is written and the answer is 409 fenced with "
    '"token": the current holder\'s (null when nobody holds it). Malformed: 400 '
    "invalid_fencing.",
}
LEASE_PARAM: dict[str, Any] = {
    "name": "lease",
    "in": "query",
    "schema": LEASE_ID,
    "description": "Attach the key to this lease (deleted when it ends). Not with ttl. "
    "Unknown: 404 lease_not_found; another user's: 403 lease_not_owned; full: 429 "
    "too_many_lease_attachments (--max-lease-attachments).",
}
TTL_PARAM: dict[str, Any] = {
    "name": "ttl",
    "in": "query",
    "schema": TTL,
    "description": 'A new lease of ttl seconds for this key alone (the answer has "lease": '
    "its id; nothing keeps it alive unless the client does). Not with lease. 429 "
    "too_many_leases (--max-leases).",
}


def error(text: str) -> dict[str, Any]:
    """One error response with its own text (the shared table's is too general here)."""
    return json_content(ERROR, text)


def ids_body() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["ids"],
        "additionalProperties": False,
        "properties": {
            "ids": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_KEEPALIVE_IDS,
                "items": LEASE_ID,
            }
        },
    }


_GRANTED = {
    "type": "object",
    "required": ["id", "ttl"],
    "properties": {"id": LEASE_ID, "ttl": {"type": "integer"}},
}
_RENEWALS = {
    "type": "object",
    "required": ["leases"],
    "properties": {
        "leases": {
            "type": "array",
            "items": {
                "oneOf": [
                    _GRANTED,
                    {
                        "type": "object",
                        "required": ["id", "code"],
                        "properties": {
                            "id": LEASE_ID,
                            "code": {
                                "enum": ["lease_expired", "lease_not_found", "lease_not_owned"]
                            },
                        },
                    },
                ]
            },
        }
    },
}
_LEASE_FIELDS: dict[str, Any] = {
    "id": LEASE_ID,
    "ttl": {"type": "integer"},
    "remaining": {
        "type": "number",
        "description": "Seconds before this node would consider it expired (its clock)",
    },
    "owner": {"type": "string", "description": 'The user who granted it ("" without auth)'},
}
_LEASE = {"type": "object", "required": list(_LEASE_FIELDS), "properties": _LEASE_FIELDS}
_DETAIL_FIELDS: dict[str, Any] = {
    **_LEASE_FIELDS,
    "keys": {"type": "array", "items": BYTES, "description": "At most 1000"},
    "locks": {"type": "array", "items": {"type": "string"}},
    "truncated": {"type": "boolean", "description": "More keys than listed"},
}
_LEASE_DETAIL = {"type": "object", "required": list(_DETAIL_FIELDS), "properties": _DETAIL_FIELDS}
_GONE = error(
    "lease_expired (it ended: expired or revoked, and this node remembers it) or lease_not_found"
)
_NOT_OWNED = error("lease_not_owned: another user's lease")
_PATH_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "schema": LEASE_ID,
    "description": "The lease id",
}
_UNAVAILABLE = error(f"{NO_LEASES}; no_leader, not_applied, unknown_outcome, overloaded")


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def lease_paths() -> dict[str, Any]:
    bad = error("Malformed body or id (invalid_request)")
    return {
        "/v1/leases": {
            "post": {
                "summary": "Grant a lease",
                "description": "A timer the cluster keeps: it ends TTL seconds after its "
                "grant or last keepalive (at most one election timeout + 0.1 s later, see "
                "docs/LEASES.md), and then every key attached to it is deleted and every "
                "lock it holds released.",
                "requestBody": _body(
                    {
                        "type": "object",
                        "required": ["ttl"],
                        "additionalProperties": False,
                        "properties": {"ttl": TTL},
                    }
                ),
                "responses": {
                    "200": json_content(_GRANTED, "Granted"),
                    "400": error("invalid_ttl, or a malformed body (invalid_request)"),
                    "429": error("too_many_leases (--max-leases)"),
                    "503": _UNAVAILABLE,
                },
            },
            "get": {
                "summary": "The caller's leases (every one for an admin), in id order",
                "parameters": [
                    {
                        "name": "after",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 0, "maximum": MAX_LEASE_ID},
                        "description": "Start after this id (a page's next_after)",
                    },
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": MAX_PAGE,
                            "default": DEFAULT_PAGE,
                        },
                    },
                ],
                "responses": {
                    "200": json_content(
                        {
                            "type": "object",
                            "required": ["leases", "next_after"],
                            "properties": {
                                "leases": {"type": "array", "items": _LEASE},
                                "next_after": {"type": ["integer", "null"]},
                            },
                        },
                        "A page; next_after is null on the last",
                    ),
                    "400": error("Bad after or limit (invalid_request)"),
                    "503": error(NO_LEASES),
                },
            },
        },
        "/v1/leases/keepalive": {
            "post": {
                "summary": "Keep many leases alive (one raft entry)",
                "description": "One outcome per id, in order, with 200: the renewed ttl, "
                "or the code a single keepalive would answer.",
                "requestBody": _body(ids_body()),
                "responses": {
                    "200": json_content(_RENEWALS, "Each lease's outcome"),
                    "400": bad,
                    "503": _UNAVAILABLE,
                },
            },
            "get": {
                "summary": "Keep leases alive over a WebSocket (Upgrade: websocket)",
                "description": 'Send text messages {"ids": [...]} (1 to '
                f"{MAX_KEEPALIVE_IDS} ids); each is answered, in order, with "
                '{"leases": [...]} as POST /v1/leases/keepalive answers. A malformed '
                'message answers {"code": "invalid_request", "message"}, a refused '
                'keepalive {"code", "message"}, and the stream goes on; a message above '
                "1 MiB closes it (1009). The server pings every --watch-keepalive seconds "
                "and closes it when the node shuts down (1001).",
                "responses": {
                    "101": {"description": "Switching protocols: the stream is open"},
                    "400": error("websocket_required: a plain GET (no Upgrade)"),
                    "503": error(NO_LEASES),
                },
            },
        },
        "/v1/leases/{id}": {
            "get": {
                "summary": "One lease: its TTL, time left, owner, keys and locks",
                "parameters": [_PATH_ID, ENCODING],
                "responses": {
                    "200": json_content(_LEASE_DETAIL, "The lease"),
                    "400": bad,
                    "403": _NOT_OWNED,
                    "404": _GONE,
                    "503": error(NO_LEASES),
                },
            },
            "delete": {
                "summary": "Revoke a lease: its keys deleted, its locks released (one entry)",
                "parameters": [_PATH_ID],
                "responses": {
                    "200": json_content(
                        {
                            "type": "object",
                            "required": ["id", "revoked", "deleted_keys"],
                            "properties": {
                                "id": LEASE_ID,
                                "revoked": {"const": True},
                                "deleted_keys": {"type": "integer", "minimum": 0},
                            },
                        },
                        "Revoked",
                    ),
                    "400": bad,
                    "403": _NOT_OWNED,
                    "404": _GONE,
                    "503": _UNAVAILABLE,
                },
            },
        },
        "/v1/leases/{id}/keepalive": {
            "post": {
                "summary": "Keep a lease alive: its TTL starts again (acknowledged once committed)",
                "parameters": [_PATH_ID],
                "responses": {
                    "200": json_content(_GRANTED, "Renewed"),
                    "400": bad,
                    "403": _NOT_OWNED,
                    "404": _GONE,
                    "503": _UNAVAILABLE,
                },
            }
        },
    }
