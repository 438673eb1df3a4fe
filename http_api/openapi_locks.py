"""OpenAPI paths of locks and elections (http_api/routes_locks.py, routes_elections.py)."""

from __future__ import annotations

from typing import Any

from http_api.encoding import MAX_VERSION
from http_api.lease_input import DEFAULT_LOCK_WAIT, LOCK_NAME_PATTERN
from http_api.openapi_common import json_content
from http_api.openapi_leases import LEASE_ID, NO_LEASES, error
from node.service.leases import DEFAULT_MAX_LOCK_WAIT
from node.state.leases import MAX_LOCK_NAME_CHARS, MAX_LOCK_VALUE_BYTES

_NAME = {
    "name": "name",
    "in": "path",
    "required": True,
    "schema": {
        "type": "string",
        "pattern": LOCK_NAME_PATTERN,
        "minLength": 1,
        "maxLength": MAX_LOCK_NAME_CHARS,
    },
    "description": "1 to 200 characters of A-Z a-z 0-9 . _ : / @ - in /-separated parts, "
    "none of them empty, . or .. (jobs/compactor); "
    "otherwise 400 invalid_lock_name. Locks and elections share names.",
}
_LEASE_QUERY = {
    "name": "lease",
    "in": "query",
    "required": True,
    "schema": LEASE_ID,
    "description": "The lease that holds the lock (or waits for it)",
}
_TOKEN = {
    "type": "integer",
    "minimum": 0,
    "maximum": MAX_VERSION,
    "description": "The fencing token: strictly increases with each new holder of the name",
}
_TIMEOUT = {
    "type": "number",
    "minimum": 0,
    "maximum": int(DEFAULT_MAX_LOCK_WAIT),
    "default": DEFAULT_LOCK_WAIT,
    "description": "Seconds to wait for it (0: try once), at most --max-lock-wait (300 by "
    "default); above it 400",
}
_VALUE = {
    "type": "string",
    "description": f"Text, at most {MAX_LOCK_VALUE_BYTES} bytes of UTF-8 (more: 400)",
}
_HELD_FIELDS: dict[str, Any] = {
    "name": {"type": "string"},
    "key": {"type": "string", "description": "NAME/LEASE_ID, unique to this holding"},
    "token": _TOKEN,
    "lease": LEASE_ID,
}
_HELD = {"type": "object", "required": list(_HELD_FIELDS), "properties": _HELD_FIELDS}
_LEADING = {
    "type": "object",
    "required": [*_HELD_FIELDS, "value"],
    "properties": {**_HELD_FIELDS, "value": {"type": "string"}},
}
_HOLDER_FIELDS: dict[str, Any] = {
    "lease": LEASE_ID,
    "token": _TOKEN,
    "since_ms": {"type": "integer", "description": "When it got the lock, ms since the epoch"},
    "value": {"type": "string"},
}
_HOLDER = {"type": "object", "required": list(_HOLDER_FIELDS), "properties": _HOLDER_FIELDS}
_LEADER = {
    "type": "object",
    "required": ["name", *_HOLDER_FIELDS],
    "properties": {"name": {"type": "string"}, **_HOLDER_FIELDS},
}
_RELEASED = json_content(
    {
        "type": "object",
        "required": ["name", "released"],
        "properties": {"name": {"type": "string"}, "released": {"const": True}},
    },
    "Released (or left the queue)",
)
_BAD = error("invalid_lock_name, or a malformed body or parameter (invalid_request)")
_NOT_FOUND = error("lease_not_found (or lease_expired): the lease does not exist")
_NOT_HOLDER = error("not_lock_holder: the lease neither holds the lock nor waits for it")
_UNAVAILABLE = error(f"{NO_LEASES}; no_leader, not_applied, unknown_outcome, overloaded")
_WAITERS = error(
    "too_many_lock_waiters (--max-lock-waiters per lock), or "
    "too_many_lease_attachments (--max-lease-attachments)"
)


def _body(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    schema = {
        "type": "object",
        "required": required,
        "additionalProperties": False,
        "properties": properties,
    }
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _acquire(summary: str, description: str, held: dict[str, Any], **fields: Any) -> Any:
    return {
        "summary": summary,
        "description": description,
        "parameters": [_NAME],
        "requestBody": _body(["lease"], {"lease": LEASE_ID, **fields, "timeout": _TIMEOUT}),
        "responses": {
            "200": json_content(held, "Held"),
            "400": _BAD,
            "403": error("lease_not_owned: another user's lease"),
            "404": _NOT_FOUND,
            "409": error(
                "lock_held: not held within timeout; token: the holder's (null: nobody "
                "holds it now). The request left the queue"
            ),
            "429": _WAITERS,
            "503": _UNAVAILABLE,
        },
    }


def _release(summary: str) -> dict[str, Any]:
    return {
        "summary": summary,
        "parameters": [_NAME, _LEASE_QUERY],
        "responses": {
            "200": _RELEASED,
            "400": _BAD,
            "403": error("lease_not_owned: another user's lease"),
            "409": _NOT_HOLDER,
            "503": _UNAVAILABLE,
        },
    }


_WAIT_TEXT = (
    "Waiters queue in order (FIFO): it goes to the oldest waiter whose lease is alive. "
    "A request whose client goes away leaves the queue. Locking again with the lease that "
    "holds it answers the same token. Released by DELETE, by revoking the lease, or when "
    "it expires. Send the token with writes as Rkv-Fencing: NAME=TOKEN."
)


def lock_paths() -> dict[str, Any]:
    return {
        "/v1/locks/{name}": {
            "post": _acquire("Lock: wait until the lease holds the lock", _WAIT_TEXT, _HELD),
            "delete": _release("Unlock (or leave the queue)"),
            "get": {
                "summary": "Who holds the lock, and how many wait (a linearizable read)",
                "parameters": [_NAME],
                "responses": {
                    "200": json_content(
                        {
                            "type": "object",
                            "required": ["name", "holder", "waiters"],
                            "properties": {
                                "name": {"type": "string"},
                                "holder": {"oneOf": [_HOLDER, {"type": "null"}]},
                                "waiters": {"type": "integer", "minimum": 0},
                            },
                        },
                        "The lock",
                    ),
                    "400": _BAD,
                    "503": _UNAVAILABLE,
                },
            },
        },
        "/v1/elections/{name}": {
            "post": _acquire(
                "Campaign: wait until the lease leads, then announce value",
                "An election is a lock whose holder announces a value: the same names, "
                f"queue and fencing tokens. {_WAIT_TEXT}",
                _LEADING,
                value=_VALUE,
            ),
            "put": {
                "summary": "Proclaim: the leader announces a new value",
                "parameters": [_NAME],
                "requestBody": _body(
                    ["lease", "token", "value"],
                    {"lease": LEASE_ID, "token": _TOKEN, "value": _VALUE},
                ),
                "responses": {
                    "200": json_content(
                        {
                            "type": "object",
                            "required": ["name", "token", "value"],
                            "properties": {
                                "name": {"type": "string"},
                                "token": _TOKEN,
                                "value": {"type": "string"},
                            },
                        },
                        "Announced",
                    ),
                    "400": _BAD,
                    "403": error("lease_not_owned: another user's lease"),
                    "409": error("not_lock_holder: the lease does not lead with that token"),
                    "503": _UNAVAILABLE,
                },
            },
            "delete": _release("Resign (or stop campaigning)"),
            "get": {
                "summary": "The leader, or (observe=true) a stream of leaders",
                "description": "observe=true: NDJSON, one line per leader, the one now "
                'first: {"leader": {name, lease, token, value, since_ms} or null}; a '
                "keep-alive line {} after --watch-keepalive seconds (10) without a line. "
                "Observers count as watches (--max-watches, --max-watches-per-address). "
                'The stream ends when the node shuts down; a last line {"error": {"code", '
                '"message"}} says why it ends otherwise.',
                "parameters": [
                    _NAME,
                    {
                        "name": "observe",
                        "in": "query",
                        "schema": {"type": "string", "enum": ["true", "false"]},
                        "description": "true: a stream of leaders (default false)",
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The leader (application/json), or the stream of "
                        "leaders (application/x-ndjson)",
                        "content": {
                            "application/json": {"schema": _LEADER},
                            "application/x-ndjson": {
                                "schema": {
                                    "oneOf": [
                                        {
                                            "type": "object",
                                            "required": ["leader"],
                                            "properties": {
                                                "leader": {"oneOf": [_LEADER, {"type": "null"}]}
                                            },
                                        },
                                        {"type": "object", "maxProperties": 0},
                                        {"$ref": "#/components/schemas/WatchError"},
                                    ]
                                }
                            },
                        },
                    },
                    "400": _BAD,
                    "404": error("no_leader: nobody leads the election now"),
                    "429": error("too_many_watches_per_address (--max-watches-per-address)"),
                    "503": error(f"{NO_LEASES}; too_many_watches (--max-watches), no_leader"),
                },
            },
        },
    }
