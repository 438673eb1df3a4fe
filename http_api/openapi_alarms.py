"""OpenAPI paths of the alarms, GET /v1/alarms and POST /v1/alarms:disarm
(http_api/routes_alarms.py)."""

from __future__ import annotations

from typing import Any

from http_api.openapi_common import errors, json_content
from node.state.alarm_commands import AlarmKind

_KINDS = [kind.value for kind in AlarmKind]
_KIND = {"type": "string", "enum": _KINDS, "default": AlarmKind.NOSPACE.value}
ALARM = {
    "type": "object",
    "required": ["member", "kind", "reason", "raised_ms"],
    "properties": {
        "member": {"type": "string", "description": "The member that raised it"},
        "kind": {"type": "string", "enum": _KINDS},
        "reason": {"type": "string", "description": "What the member saw"},
        "raised_ms": {
            "type": "integer",
            "description": "When: the timestamp (ms since the epoch) of its raft entry",
        },
    },
}
_ALARMS = json_content(
    {
        "type": "object",
        "required": ["alarms"],
        "properties": {"alarms": {"type": "array", "items": ALARM}},
    },
    "The alarms raised in this node's applied state",
)


def alarm_paths() -> dict[str, Any]:
    return {
        "/v1/alarms": {
            "get": {
                "summary": "The raised alarms (replicated: every member holds the same)",
                "description": "A member raises a nospace alarm when its disk is full "
                "(ENOSPC, LMDB's map full) or its data passes --quota-bytes. While one is "
                "raised the cluster refuses writes that add data with 507 no_space; "
                "deletes, compaction and reads go on. Read from this node's applied state.",
                "responses": {"200": _ALARMS},
            },
            "post": {
                "summary": "Raise an alarm for a member (what a member does for itself)",
                "description": "A member whose disk is full asks another member to "
                "propose its nospace alarm when its own raft cannot. Proposed only when "
                "this node's state does not hold it yet. The answer lists the alarms.",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["member"],
                                "properties": {
                                    "member": {"type": "string"},
                                    "kind": _KIND,
                                    "reason": {"type": "string"},
                                },
                                "additionalProperties": False,
                            }
                        }
                    },
                },
                "responses": {"200": _ALARMS, **errors(400, 503)},
            },
        },
        "/v1/alarms:disarm": {
            "post": {
                "summary": "Disarm an alarm, once space is freed",
                "description": "Proposes the disarm through raft: the cluster takes "
                "writes again (a member whose disk is still full or over its quota raises "
                "its alarm again within --space-check-interval). Without member, the kind "
                "is disarmed on every member; disarming what is not raised changes "
                "nothing. The answer lists the alarms left.",
                "requestBody": {
                    "required": False,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "kind": _KIND,
                                    "member": {"type": "string"},
                                },
                                "additionalProperties": False,
                            }
                        }
                    },
                },
                "responses": {"200": _ALARMS, **errors(400, 503)},
            }
        },
    }
