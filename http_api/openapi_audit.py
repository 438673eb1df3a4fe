"""OpenAPI paths and schemas of the consistency audit endpoints (routes_audit.py)."""

from __future__ import annotations

from typing import Any

from http_api.openapi_common import errors, json_content
from node.service.types import DEFAULT_BUCKETS
from node.state.commands import MAX_AUDIT_BUCKETS, MAX_SPLIT_POINT_BYTES

_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"},
    "description": 'The audit id (not "." or "..").',
}
_INT = {"type": "integer", "minimum": 0}


def audit_paths() -> dict[str, Any]:
    return {
        "/v1/audit": {
            "post": {
                "summary": "Start a consistency audit: a cut through the raft log at which "
                "every node exports its state and log",
                "description": "On the leader (307 otherwise). Picks up to buckets - 1 split "
                "points from the leader's keys (internal keys included; each cut to "
                f"{MAX_SPLIT_POINT_BYTES} bytes) and proposes the audit command; every node "
                "exports when it applies it, from one LMDB read transaction, while writes go "
                "on. The export format is documented in node/audit/export.py and "
                "docs/ARCHITECTURE.md. An empty body is {}.",
                "requestBody": {
                    "required": False,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/AuditStart"}}
                    },
                },
                "responses": {
                    "200": json_content({"$ref": "#/components/schemas/AuditStarted"}, "Proposed"),
                    **errors(307, 400, 409, 503),
                },
            }
        },
        "/v1/audit/{id}": {
            "get": {
                "summary": "This node's export of an audit: running, done (the manifest) or failed",
                "parameters": [_ID],
                "responses": {
                    "200": json_content(
                        {"$ref": "#/components/schemas/AuditManifest"}, "Done: the manifest"
                    ),
                    "202": json_content(
                        {"$ref": "#/components/schemas/AuditRunning"}, "Being written"
                    ),
                    **errors(400, 404, 500, 503),
                },
            }
        },
        "/v1/audit/{id}/files/{name}": {
            "get": {
                "summary": "A file of this node's finished export (one its manifest lists, "
                "or manifest.json)",
                "parameters": [
                    _ID,
                    {
                        "name": "name",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                        "description": "bucket-NNNNN.rkvsnap, log.rkvlog or manifest.json",
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The file",
                        "content": {
                            "application/octet-stream": {
                                "schema": {"type": "string", "format": "binary"}
                            },
                            "application/json": {"schema": {"type": "object"}},
                        },
                    },
                    **errors(400, 404, 500, 503),
                },
            }
        },
    }


def audit_schemas() -> dict[str, Any]:
    return {
        "AuditStart": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "audit_id": {
                    "type": "string",
                    "pattern": "^[A-Za-z0-9._-]{1,64}$",
                    "description": "Default: the UTC time and 6 random hex digits",
                },
                "buckets": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_AUDIT_BUCKETS,
                    "description": f"Key-range buckets (default {DEFAULT_BUCKETS}; fewer "
                    "when there are fewer keys)",
                },
            },
        },
        "AuditStarted": {
            "type": "object",
            "required": ["audit_id", "raft_index", "split_points"],
            "properties": {
                "audit_id": {"type": "string"},
                "raft_index": {**_INT, "description": "The entry every node cuts at"},
                "split_points": {"type": "array", "items": {"type": "string"}},
            },
        },
        "AuditRunning": {
            "type": "object",
            "properties": {
                "audit_id": {"type": "string"},
                "state": {"type": "string", "enum": ["running"]},
                "progress": {
                    "type": "object",
                    "properties": {
                        "phase": {"type": "string", "enum": ["count", "state", "log"]},
                        "records": _INT,
                        "total_keys": _INT,
                        "log_records": _INT,
                        "bytes": _INT,
                        "seconds": {"type": "number"},
                    },
                },
            },
        },
        "AuditManifest": {
            "type": "object",
            "description": "manifest.json of the export (format 1; see node/audit/export.py)",
            "properties": {
                "format": {"type": "integer", "enum": [1]},
                "audit_id": {"type": "string"},
                "replica": {"type": "string", "description": "The node's id"},
                "raft_index": _INT,
                "applied_offset": _INT,
                "key_count": {**_INT, "description": "Internal keys included"},
                "buckets": _INT,
                "split_points": {
                    "type": "array",
                    "items": {"type": "string", "description": "base64"},
                },
                "bucket_counts": {"type": "array", "items": _INT},
                "bucket_digests": {
                    "type": "array",
                    "items": {"type": "string", "description": "hex SHA-256"},
                },
                "files": {
                    "type": "object",
                    "properties": {
                        "state": {"type": "array", "items": {"type": "string"}},
                        "log": {"type": "string"},
                    },
                },
                "log_records": _INT,
                "created_ms": {"type": "integer"},
                "seconds": {"type": "number"},
            },
        },
    }
