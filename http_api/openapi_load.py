"""OpenAPI path of the bulk load, POST /v1/kv:load (http_api/routes_load.py)."""

from __future__ import annotations

from typing import Any

from http_api.openapi_common import ENCODING, ERROR, json_content
from http_api.openapi_schemas import LOAD_ERROR_FIELDS

_COUNTS = {name: LOAD_ERROR_FIELDS[name] for name in ("loaded", "lines", "version")}
_COUNT_NAMES = list(_COUNTS)
_ERROR_FIELDS = {
    "code": {"type": "string"},
    "message": {"type": "string"},
    "line": LOAD_ERROR_FIELDS["line"],
}

_PROGRESS = {
    "description": "One line per committed chunk, then the last line: done, or the error "
    "that stopped the load after a progress line was sent.",
    "oneOf": [
        {"type": "object", "required": _COUNT_NAMES, "properties": _COUNTS},
        {
            "type": "object",
            "required": ["done", *_COUNT_NAMES],
            "properties": {"done": {"const": True}, **_COUNTS},
        },
        {
            "type": "object",
            "required": ["error", *_COUNT_NAMES],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["code", "message", "line"],
                    "properties": _ERROR_FIELDS,
                },
                **_COUNTS,
            },
        },
    ],
}
_ERROR_TEXT = {
    400: "A line is not a JSON object with key and value, or a key is invalid or reserved "
    "(invalid_request, invalid_key, reserved_key); the lines before it are committed",
    403: "permission_denied: the user lacks write on a line's key (the message names it)",
    408: "The body sent nothing for --http-read-timeout seconds",
    413: "A value over --max-value-bytes (payload_too_large) or a line longer than the "
    "largest key and value take (line_too_long)",
    507: "no_space: a NOSPACE alarm is raised (GET /v1/alarms); the lines before are committed",
    503: "A chunk could not be committed (no quorum, overloaded, unknown outcome): "
    "retry from the lines committed",
}


def _error(status: int) -> dict[str, Any]:
    """The Error schema, whose line, loaded, lines and version a load's error sets."""
    return json_content(ERROR, _ERROR_TEXT[status])


def load_paths() -> dict[str, Any]:
    return {
        "/v1/kv:load": {
            "post": {
                "summary": "Bulk load: JSON Lines of key/value pairs, answered with progress",
                "description": "The body is read as it arrives, one "
                '{"key": K, "value": V} per line (base64 unless encoding=utf-8); each '
                "line is checked as a PUT is. Lines are committed in chunks of up to "
                "--load-chunk-keys pairs and --max-entry-bytes bytes, each one raft entry, "
                "all or nothing. The answer streams NDJSON: a progress line per committed "
                "chunk, then a done line. A bad line stops the load once the lines before "
                "it are committed: before any progress line, the answer is the error's "
                "status with the counts; after one, the stream's last line is the error. "
                "Sending the load again from `lines` on is safe: a put of the same value "
                "again changes nothing but the version.",
                "parameters": [ENCODING],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/x-ndjson": {
                            "schema": {"type": "string"},
                            "example": '{"key": "a2V5", "value": "dmFsdWU="}\n',
                        }
                    },
                },
                "responses": {
                    "200": {
                        "description": "Progress, then done (or the error that stopped it)",
                        "content": {"application/x-ndjson": {"schema": _PROGRESS}},
                    },
                    **{str(status): _error(status) for status in _ERROR_TEXT},
                },
            }
        }
    }
