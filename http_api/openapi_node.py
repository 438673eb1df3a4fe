"""OpenAPI paths of the node, log, watch, snapshot, admin and cluster endpoints
(http_api/routes_node.py, routes_log.py, routes_watch.py, routes_snapshot.py)."""

from __future__ import annotations

from typing import Any

from http_api.openapi_common import BASE64URL, ENCODING, OFFSET, errors, json_content
from http_api.routes_log import COMPLETE_VALUES
from http_api.routes_snapshot import TRANSFER_ID_PATTERN

_TRANSFER_ID = {"type": "string", "pattern": TRANSFER_ID_PATTERN}


MEMBER_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
    "description": "The member's id.",
}


def node_paths() -> dict[str, Any]:
    return {
        "/v1/status": {
            "get": {
                "summary": "Node id, role, leader, term, indexes, members, limits",
                "description": "limits: this node's max_txn_ops (--max-txn-ops), "
                "max_value_bytes (--max-value-bytes) and max_page_bytes (--max-page-bytes), "
                "so a client can size its requests. fair_share: the event loop's sharing "
                "between client addresses (--fair-share-busy): busy (the setting), "
                "loop_busy (the seconds of loop time clients used over about the last "
                "second), clients (addresses that used it), waits (requests, connections "
                "and watch batches made to wait so far). security: tls, auth_enabled, "
                "loopback_only (--listen is loopback), insecure_no_auth (--insecure-no-auth) "
                "and warning (set while the port is open beyond loopback without TLS or "
                "auth). leases: count (the leases this node tracks), expiring (whether "
                "it expires them: the leader, once its clock is promoted) and the lease "
                "limits (--max-leases, --max-lease-ttl, --max-lease-attachments, "
                "--max-lock-waiters, --max-lock-wait). version: this node's rkv version. "
                "storage: entries (LMDB's entry count: user keys plus internal records), "
                "log_bytes and log_segments (the commit log on disk). http_workers (with "
                "--http-workers): one object per worker process: index, pid, ready, "
                "connections (the client connections it holds now), writes (the "
                "key-value writes main proposed for it since the node started).",
                "responses": {"200": json_content({"type": "object"}, "Status")},
            }
        },
        "/v1/checkpoints": {
            "get": {
                "summary": "Replicator checkpoints in this node's applied state",
                "description": "Each external replicator (rkv redis-replicate) commits its "
                "position as an internal checkpoint record in the same transaction as its "
                "data (a txn compare/put/get with checkpoint: NAME). Values are base64 "
                "unless encoding=utf-8; read from this node's state (a follower may lag).",
                "parameters": [ENCODING],
                "responses": {
                    "200": json_content(
                        {
                            "type": "object",
                            "properties": {
                                "checkpoints": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "properties": {
                                            "name": {"type": "string"},
                                            "value": {"type": "string"},
                                            "version": {"type": "integer"},
                                        },
                                    },
                                }
                            },
                        },
                        "Checkpoints",
                    ),
                    **errors(400),
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
                    *(
                        {"name": n, "in": "query", "schema": {**OFFSET, "minimum": m}}
                        for n, m in (("from", 0), ("to", 0), ("limit", 1))
                    ),
                    {
                        "name": "complete",
                        "in": "query",
                        "description": "1: only if every record from `from` on is still "
                        "here (409 range_compacted otherwise); compaction waits meanwhile",
                        "schema": {"type": "string", "enum": list(COMPLETE_VALUES)},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "Framed records",
                        "content": {"application/x-rkv-log": {}},
                    },
                    **errors(400, 409),
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
                        "schema": OFFSET,
                        "description": "The first offset to send. Default: the next one "
                        "(only changes after the request); 0 or 1 replays the whole log.",
                    },
                    ENCODING,
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
                    **errors(400, 503),
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
                "the leader). One export at a time per node. When a transfer ends, "
                "the node holds its read view for 60 s: a reader that was cut asks for "
                "the rest with `transfer` (the Rkv-Transfer-Id) and `after` (the last "
                "key it received, base64url) and gets the same header, the records after "
                "that key and a trailer counting those, its SHA-256 over that header and "
                "those records.",
                "parameters": [
                    {
                        "name": "transfer",
                        "in": "query",
                        "schema": _TRANSFER_ID,
                        "description": "Resume this cut transfer (its Rkv-Transfer-Id)",
                    },
                    {
                        "name": "after",
                        "in": "query",
                        "schema": BASE64URL,
                        "description": "With transfer: the last key received, unpadded "
                        "base64url (without transfer: 400)",
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The snapshot file (or the rest of a cut one)",
                        "headers": {
                            **{
                                name: {"schema": {"type": "integer"}, "description": text}
                                for name, text in (
                                    ("Rkv-Snapshot-Index", "The applied raft index"),
                                    ("Rkv-Snapshot-Offset", "The applied commit-log offset"),
                                )
                            },
                            "Rkv-Transfer-Id": {
                                "schema": {"type": "string"},
                                "description": "Names the transfer, to resume or release it",
                            },
                        },
                        "content": {
                            "application/octet-stream": {
                                "schema": {"type": "string", "format": "binary"}
                            }
                        },
                    },
                    **errors(400, 410, 503),
                },
            },
            "delete": {
                "summary": "Let go of the read view held for a finished snapshot transfer",
                "parameters": [
                    {
                        "name": "transfer",
                        "in": "query",
                        "required": True,
                        "schema": _TRANSFER_ID,
                        "description": "The transfer's Rkv-Transfer-Id",
                    }
                ],
                "responses": {"204": {"description": "Let go"}, **errors(400, 404)},
            },
        },
        "/v1/admin/compact": {
            "post": {
                "summary": "Force a compaction of this node's commit log: roll the active "
                "segment, keep the latest record per key and tombstones in retention",
                "responses": {
                    "200": json_content(
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
                    **errors(503),
                },
            }
        },
        "/v1/cluster/members": {
            "get": {
                "summary": "The voting members this node knows (id, raft address, URL)",
                "responses": {
                    "200": json_content(
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
                "commit. The new member must be running: the leader first checks that "
                "its raft address completes the handshake under the cluster secret "
                "(409 member_unreachable otherwise). Adding a member that already "
                "exists with the same raft address and url changes nothing (added: "
                "false); with another url it is 409 member_exists (PUT changes a url).",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Member"}}
                    },
                },
                "responses": {
                    "200": json_content({"$ref": "#/components/schemas/MemberChange"}, "Added"),
                    **errors(307, 400, 409, 503),
                },
            },
        },
        "/v1/cluster/members/{id}": {
            "delete": {
                "summary": "Remove a voting member (on the leader; one change at a time)",
                "parameters": [MEMBER_ID],
                "responses": {
                    "200": json_content({"$ref": "#/components/schemas/MemberChange"}, "Removed"),
                    **errors(307, 404, 409, 503),
                },
            },
            "put": {
                "summary": "Change a member's HTTP URL (on the leader)",
                "description": "Clients are redirected to a member's url and members "
                "download catch-up state from it, so a node serving on a non-loopback "
                "address refuses this (403 auth_required) while authentication is "
                "disabled; with auth enabled it needs admin.",
                "parameters": [MEMBER_ID],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["url"],
                                "additionalProperties": False,
                                "properties": {"url": {"type": "string"}},
                            }
                        }
                    },
                },
                "responses": {
                    "200": json_content(
                        {
                            "type": "object",
                            "properties": {"member": {"$ref": "#/components/schemas/Member"}},
                        },
                        "Changed (or already that url)",
                    ),
                    **errors(307, 400, 403, 404, 503),
                },
            },
        },
        "/v1/openapi.json": {
            "get": {
                "summary": "This document",
                "responses": {"200": json_content({"type": "object"}, "OpenAPI 3.1")},
            }
        },
    }
