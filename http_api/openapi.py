"""The OpenAPI 3.1 description served at /v1/openapi.json.

tests/unit/test_openapi.py checks that it names exactly the routes the app
serves, with the same methods, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

_ERROR = {"$ref": "#/components/schemas/Error"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    text = {
        307: "Not the leader (consistency=leader, membership changes): Location names the leader",
        400: "Invalid request (bad key, parameter or body)",
        404: "No such key (or member)",
        409: "Conflict: membership_change_in_progress, member_exists, address_in_use, "
        "last_member or member_is_leader",
        412: "Precondition failed: body has current_version",
        413: "Value or body too large",
        503: "not_applied (safe to retry), unknown_outcome, overloaded (Retry-After), "
        "no_leader or node_not_ready",
    }
    return {str(s): _json(_ERROR, text[s]) for s in statuses}


_KEY = {
    "name": "key",
    "in": "path",
    "required": True,
    "description": "The key: arbitrary bytes, percent-encoded (1..4096 bytes).",
    "schema": {"type": "string"},
}
_CONSISTENCY = {
    "name": "consistency",
    "in": "query",
    "schema": {"type": "string", "enum": ["linearizable", "leader", "stale"]},
    "description": "linearizable (default): a read barrier through the log; leader: "
    "local read if this node believes it leads; stale: local read on any node.",
}
_MIN_VERSION = {
    "name": "min_version",
    "in": "query",
    "schema": {"type": "integer", "minimum": 0},
    "description": "Wait (bounded) until this node has applied this offset, then read.",
}
_ENCODING = {
    "name": "encoding",
    "in": "query",
    "schema": {"type": "string", "enum": ["base64", "utf-8"]},
    "description": "How keys and values appear in JSON (default base64).",
}
_IF_MATCH = {
    "name": "If-Match",
    "in": "header",
    "schema": {"type": "string"},
    "description": 'Compare-and-set: "<version>" the key must have.',
}
_IF_NONE_MATCH = {
    "name": "If-None-Match",
    "in": "header",
    "schema": {"type": "string", "enum": ["*"]},
    "description": "Create only: the key must not exist.",
}
_BYTES = {"type": "string", "description": "base64, or text with encoding=utf-8"}


def openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "rkv",
            "version": "1",
            "description": "A Raft-replicated key-value store. Versions are commit-log "
            "offsets: every mutation gets the next one.",
        },
        "paths": {
            "/v1/kv/{key}": {
                "put": {
                    "summary": "Set a key (compare-and-set with If-Match / If-None-Match)",
                    "parameters": [_KEY, _IF_MATCH, _IF_NONE_MATCH, _ENCODING],
                    "requestBody": {
                        "content": {"application/octet-stream": {"schema": {"type": "string"}}}
                    },
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {"key": _BYTES, "version": {"type": "integer"}},
                            },
                            "Written",
                        ),
                        **_errors(400, 412, 413, 503),
                    },
                },
                "get": {
                    "summary": "Read a key: the raw value, ETag = its version",
                    "parameters": [_KEY, _CONSISTENCY, _MIN_VERSION],
                    "responses": {
                        "200": {
                            "description": "The value; headers ETag, Rkv-Version, "
                            "Rkv-Create-Version",
                            "content": {"application/octet-stream": {}},
                        },
                        **_errors(307, 400, 404, 503),
                    },
                },
                "delete": {
                    "summary": "Delete a key (If-Match supported)",
                    "parameters": [_KEY, _IF_MATCH],
                    "responses": {
                        "200": _json(
                            {"type": "object", "properties": {"version": {"type": "integer"}}},
                            "Deleted; version is the tombstone's offset",
                        ),
                        **_errors(400, 404, 412, 503),
                    },
                },
            },
            "/v1/kv": {
                "get": {
                    "summary": "Prefix scan in key order, paginated",
                    "parameters": [
                        {"name": "prefix", "in": "query", "schema": {"type": "string"}},
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 10000},
                        },
                        {
                            "name": "start_after",
                            "in": "query",
                            "schema": {"type": "string"},
                            "description": "The opaque cursor from a previous page's next.",
                        },
                        _ENCODING,
                        _CONSISTENCY,
                        _MIN_VERSION,
                    ],
                    "responses": {
                        "200": _json({"$ref": "#/components/schemas/ScanPage"}, "A page"),
                        **_errors(307, 400, 503),
                    },
                },
            },
            "/v1/txn": {
                "post": {
                    "summary": "Atomic multi-key transaction (compare / success / failure)",
                    "parameters": [_ENCODING],
                    "requestBody": {
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Txn"}}
                        }
                    },
                    "responses": {
                        "200": _json({"$ref": "#/components/schemas/TxnResult"}, "Applied"),
                        **_errors(400, 413, 503),
                    },
                },
            },
            "/v1/status": {
                "get": {
                    "summary": "Node id, role, leader, term, indexes, members",
                    "responses": {"200": _json({"type": "object"}, "Status")},
                }
            },
            "/healthz": {
                "get": {
                    "summary": "The process is alive",
                    "responses": {"200": _json({"type": "object"}, "Alive")},
                }
            },
            "/readyz": {
                "get": {
                    "summary": "Caught up and able to serve",
                    "responses": {
                        "200": _json({"type": "object"}, "Ready"),
                        "503": _json({"type": "object"}, "Not ready, with the reason"),
                    },
                }
            },
            "/v1/log": {
                "get": {
                    "summary": "This node's commit log from an offset (pull replication)",
                    "description": "Records in their commit-log framing (length, CRC-32, "
                    "offset, raft index, timestamp, create version, op, key, value; see "
                    "docs/ARCHITECTURE.md). Header Rkv-Head-Offset: the last offset when the "
                    "answer started. A removed offset reads as the next greater one.",
                    "parameters": [
                        {"name": n, "in": "query", "schema": {"type": "integer", "minimum": m}}
                        for n, m in (("from", 0), ("to", 0), ("limit", 1))
                    ],
                    "responses": {
                        "200": {
                            "description": "Framed records",
                            "content": {"application/x-rkv-log": {}},
                        },
                        **_errors(400),
                    },
                }
            },
            "/v1/watch": {
                "get": {
                    "summary": "The change feed: puts and deletes from an offset, as a "
                    "long-lived NDJSON stream",
                    "description": "One JSON object per line, in offset order: a Change, or a "
                    'keep-alive {"keepalive": true, "head": N} after --watch-keepalive '
                    "seconds (10) without a line; every matching change up to head has been "
                    "sent, so resuming from head + 1 loses nothing. Keys under the internal "
                    "prefix \\x00rkv/ never appear. With encoding=utf-8, a line whose key or "
                    'value is not UTF-8 carries both as base64 and has "encoding": '
                    '"base64"; the stream goes on. Any offset is a valid from, including '
                    "one compaction removed: the stream then starts with what the log still "
                    "holds (the latest record of each key, tombstones in retention) and goes "
                    "on with the tail; there is no 'compacted' error. The stream ends when the "
                    "node shuts down; if this node stops serving reads or cannot read its log, "
                    'a last line {"error": {"code", "message"}} comes first. Resume '
                    "from the last offset + 1, here or on another node (offsets are the same "
                    "on every replica). Headers: Rkv-Head-Offset (this node's applied offset "
                    "when the stream started), Rkv-Watch-From (the first offset considered).",
                    "parameters": [
                        {
                            "name": "prefix",
                            "in": "query",
                            "schema": {"type": "string"},
                            "description": "Only keys starting with these (percent-encoded) "
                            "bytes; default every user key.",
                        },
                        {
                            "name": "from",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 0},
                            "description": "The first offset to send. Default: the next one "
                            "(only changes after the request); 0 or 1 replays the whole log.",
                        },
                        _ENCODING,
                    ],
                    "responses": {
                        "200": {
                            "description": "NDJSON lines: Change, WatchKeepalive, WatchError",
                            "content": {
                                "application/x-ndjson": {
                                    "schema": {
                                        "oneOf": [
                                            {"$ref": "#/components/schemas/Change"},
                                            {"$ref": "#/components/schemas/WatchKeepalive"},
                                            {"$ref": "#/components/schemas/WatchError"},
                                        ]
                                    }
                                }
                            },
                        },
                        **_errors(400, 503),
                    },
                }
            },
            "/v1/snapshot": {
                "get": {
                    "summary": "This node's whole state as a snapshot file (export)",
                    "description": "A consistent view at one applied index: a header (magic "
                    "RKVSNAP, format version, applied raft index and offset, record count, "
                    "creation time), one commit-log framed put per key (internal keys "
                    "included) and a trailer with the count and a SHA-256 of everything "
                    "before it; see docs/ARCHITECTURE.md. Headers Rkv-Snapshot-Index and "
                    "Rkv-Snapshot-Offset: what the state reflects (a follower may be behind "
                    "the leader). One export at a time per node.",
                    "responses": {
                        "200": {
                            "description": "The snapshot file",
                            "headers": {
                                name: {"schema": {"type": "integer"}, "description": text}
                                for name, text in (
                                    ("Rkv-Snapshot-Index", "The applied raft index"),
                                    ("Rkv-Snapshot-Offset", "The applied commit-log offset"),
                                )
                            },
                            "content": {
                                "application/octet-stream": {
                                    "schema": {"type": "string", "format": "binary"}
                                }
                            },
                        },
                        **_errors(503),
                    },
                }
            },
            "/v1/admin/compact": {
                "post": {
                    "summary": "Force a compaction of this node's commit log: roll the active "
                    "segment, keep the latest record per key and tombstones in retention",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    name: {"type": "integer" if name != "seconds" else "number"}
                                    for name in (
                                        "segments_before",
                                        "segments_after",
                                        "bytes_before",
                                        "bytes_after",
                                        "records_before",
                                        "records_kept",
                                        "records_dropped",
                                        "tombstones_kept",
                                        "seconds",
                                    )
                                },
                            },
                            "Compacted",
                        ),
                        **_errors(503),
                    },
                }
            },
            "/v1/cluster/members": {
                "get": {
                    "summary": "The voting members this node knows (id, raft address, URL)",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "members": {
                                        "type": "array",
                                        "items": {"$ref": "#/components/schemas/Member"},
                                    }
                                },
                            },
                            "Members",
                        )
                    },
                },
                "post": {
                    "summary": "Add a voting member (on the leader; one change at a time)",
                    "description": "Records the member in the replicated directory, then "
                    "adds its raft address to the cluster and waits for the change to "
                    "commit. Adding a member that already exists with the same raft "
                    "address changes nothing (added: false).",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Member"}}
                        },
                    },
                    "responses": {
                        "200": _json({"$ref": "#/components/schemas/MemberChange"}, "Added"),
                        **_errors(307, 400, 409, 503),
                    },
                },
            },
            "/v1/cluster/members/{id}": {
                "delete": {
                    "summary": "Remove a voting member (on the leader; one change at a time)",
                    "parameters": [
                        {
                            "name": "id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                            "description": "The member's id.",
                        }
                    ],
                    "responses": {
                        "200": _json({"$ref": "#/components/schemas/MemberChange"}, "Removed"),
                        **_errors(307, 404, 409, 503),
                    },
                }
            },
            "/v1/openapi.json": {
                "get": {
                    "summary": "This document",
                    "responses": {"200": _json({"type": "object"}, "OpenAPI 3.1")},
                }
            },
        },
        "components": {
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["code", "message"],
                    "properties": {
                        "code": {"type": "string"},
                        "message": {"type": "string"},
                        "current_version": {"type": "integer"},
                        "leader_url": {"type": "string"},
                    },
                },
                "ScanPage": {
                    "type": "object",
                    "properties": {
                        "items": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "key": _BYTES,
                                    "value": _BYTES,
                                    "version": {"type": "integer"},
                                    "create_version": {"type": "integer"},
                                },
                            },
                        },
                        "next": {"type": ["string", "null"]},
                    },
                },
                "Txn": {
                    "type": "object",
                    "description": "At most 10000 compares and ops in all.",
                    "properties": {
                        "compare": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["key"],
                                "properties": {
                                    "key": _BYTES,
                                    "version": {"type": "integer", "minimum": 0},
                                    "value": _BYTES,
                                    "exists": {"type": "boolean"},
                                },
                            },
                        },
                        "success": {"type": "array", "items": {"$ref": "#/components/schemas/Op"}},
                        "failure": {"type": "array", "items": {"$ref": "#/components/schemas/Op"}},
                    },
                },
                "Op": {
                    "type": "object",
                    "required": ["op", "key"],
                    "properties": {
                        "op": {"type": "string", "enum": ["put", "delete", "get"]},
                        "key": _BYTES,
                        "value": _BYTES,
                    },
                },
                "Change": {
                    "type": "object",
                    "required": ["offset", "op", "key", "version"],
                    "properties": {
                        "offset": {"type": "integer"},
                        "op": {"type": "string", "enum": ["put", "delete"]},
                        "key": _BYTES,
                        "value": {**_BYTES, "description": "puts only; " + _BYTES["description"]},
                        "version": {
                            "type": "integer",
                            "description": "The key's version after the change (= offset)",
                        },
                        "create_version": {"type": "integer", "description": "puts only"},
                        "encoding": {
                            "type": "string",
                            "enum": ["base64"],
                            "description": "Present when encoding=utf-8 was asked but this "
                            "key or value is not UTF-8: both are base64 on this line.",
                        },
                    },
                },
                "WatchKeepalive": {
                    "type": "object",
                    "required": ["keepalive", "head"],
                    "properties": {
                        "keepalive": {"type": "boolean", "enum": [True]},
                        "head": {"type": "integer"},
                    },
                },
                "WatchError": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {"error": _ERROR},
                },
                "Member": {
                    "type": "object",
                    "required": ["id", "raft_address", "url"],
                    "properties": {
                        "id": {"type": "string"},
                        "raft_address": {"type": "string", "description": "HOST:PORT"},
                        "url": {"type": "string", "description": "HTTP base URL"},
                    },
                },
                "MemberChange": {
                    "type": "object",
                    "properties": {
                        "added": {"type": "boolean"},
                        "removed": {"type": "boolean"},
                        "member": {"$ref": "#/components/schemas/Member"},
                    },
                },
                "TxnResult": {
                    "type": "object",
                    "properties": {
                        "succeeded": {"type": "boolean"},
                        "version": {"type": "integer"},
                        "results": {"type": "array", "items": {"type": "object"}},
                    },
                },
            }
        },
    }
