"""OpenAPI paths of the health endpoints (http_api/routes_health.py)."""

from __future__ import annotations

from typing import Any

from http_api.openapi_common import errors, json_content
from node.service.readiness import READY_CHECKS

_ALIVE = json_content({"type": "object"}, "Alive")

_CHECKS_TEXT = (
    "Checks: storage (the data directory's filesystem is writable and has at least "
    "--ready-min-free-bytes free, and the last apply of a raft entry did not fail), "
    "not_stalled (the state misses no entries: no gap it failed to fill, none being "
    "filled behind a raft marker), leader (a leader is known and connected), applied "
    "(the commit index learned at start-up is applied, and at most 100 committed "
    "entries are not applied yet)."
)

_READINESS = {
    "type": "object",
    "required": ["ready", "reason", "checks", "excluded"],
    "properties": {
        "ready": {"type": "boolean"},
        "reason": {"type": "string", "description": "The first failing check's problem"},
        "checks": {
            "type": "object",
            "description": 'Each check run: "ok" or "failed: <reason>"',
            "additionalProperties": {"type": "string"},
        },
        "excluded": {"type": "array", "items": {"type": "string", "enum": list(READY_CHECKS)}},
    },
}


def _readiness_content(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {
            "application/json": {"schema": _READINESS},
            "text/plain": {"schema": {"type": "string"}},
        },
    }


def health_paths() -> dict[str, Any]:
    return {
        "/healthz": {
            "get": {
                "summary": "The process is alive (the same as /livez)",
                "responses": {"200": _ALIVE},
            }
        },
        "/livez": {
            "get": {
                "summary": "The process serves HTTP (open without credentials)",
                "responses": {"200": _ALIVE},
            }
        },
        "/readyz": {
            "get": {
                "summary": "Caught up and able to serve (open without credentials)",
                "description": _CHECKS_TEXT
                + " With verbose, the answer is text: one line per check ('[+]name ok', "
                "'[-]name failed: reason', '[+]name excluded: ok'), then 'readyz check "
                "passed' or 'readyz check failed'.",
                "parameters": [
                    {
                        "name": "verbose",
                        "in": "query",
                        "description": "Present (any value): answer in text, a line per check",
                        "schema": {"type": "string"},
                        "allowEmptyValue": True,
                    },
                    {
                        "name": "exclude",
                        "in": "query",
                        "description": "A check to leave out (repeatable)",
                        "schema": {
                            "type": "array",
                            "items": {"type": "string", "enum": list(READY_CHECKS)},
                        },
                        "style": "form",
                        "explode": True,
                    },
                ],
                "responses": {
                    "200": _readiness_content("Ready: every check run passed"),
                    **errors(400),
                    "503": _readiness_content("Not ready: a check failed"),
                },
            }
        },
    }
