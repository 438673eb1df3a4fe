"""OpenAPI paths of the key-value API: /v1/kv/{key}, /v1/kv, /v1/txn and
/v1/producers (http_api/routes_kv.py, routes_writes.py, routes_producers.py)."""

from __future__ import annotations

from typing import Any

from http_api.openapi_common import (
    BASE64URL,
    BYTES,
    CONSISTENCY,
    ENCODING,
    IF_MATCH,
    IF_NONE_MATCH,
    INT64,
    KEY,
    MIN_VERSION,
    PRODUCER,
    errors,
    json_content,
    write_responses,
)
from http_api.openapi_leases import FENCING, LEASE_PARAM, TTL_PARAM
from node.state.commands import MAX_TXN_OPS
from node.state.producers import WINDOW

_OTHER_WRITE = (
    "null when this is the remembered answer (Rkv-Duplicate: true) to an earlier write of "
    "another kind under the same producer sequence."
)
_RAW_BODY = {"content": {"application/octet-stream": {"schema": {"type": "string"}}}}
_KEY_ENCODING = {**ENCODING, "description": "How the key appears in the answer (default base64)."}


def _key_paths() -> dict[str, Any]:
    return {
        "put": {
            "summary": "Set a key (compare-and-set with If-Match / If-None-Match)",
            "description": "With lease, the key is attached to that lease: deleted when it "
            "ends (a later put without it detaches it). With ttl, a new lease is granted "
            "for this key alone.",
            "parameters": [
                KEY,
                IF_MATCH,
                IF_NONE_MATCH,
                ENCODING,
                LEASE_PARAM,
                TTL_PARAM,
                FENCING,
                *PRODUCER,
            ],
            "requestBody": _RAW_BODY,
            "responses": write_responses(
                json_content(
                    {
                        "type": "object",
                        "properties": {
                            "key": BYTES,
                            "version": {"type": "integer"},
                            "lease": {
                                "type": ["integer", "null"],
                                "description": f"With ttl: the new lease's id. {_OTHER_WRITE}",
                            },
                        },
                    },
                    "Written",
                ),
                400,
                404,
                409,
                412,
                413,
                429,
                503,
                507,
            ),
        },
        "post": {
            "summary": "Read-modify-write a key: op=incr (a counter) or op=append",
            "description": "A counter is a value holding a signed 64-bit integer as "
            'decimal text ("-42"), as GET returns it and PUT can set it. incr adds by '
            "to it (an absent key counts as 0); a value that is not such an integer is "
            "409 not_an_integer, a sum out of range 409 integer_overflow. append adds the "
            "request body to the value's end (an absent key counts as empty); a result "
            "over the value limit is 413. Both are one raft entry: atomic on every "
            "replica.",
            "parameters": [
                KEY,
                {
                    "name": "op",
                    "in": "query",
                    "required": True,
                    "schema": {"type": "string", "enum": ["incr", "append"]},
                    "description": "What to do (anything else, or none: 400).",
                },
                {
                    "name": "by",
                    "in": "query",
                    "schema": {**INT64, "default": 1},
                    "description": "op=incr: the signed 64-bit amount to add (default 1).",
                },
                _KEY_ENCODING,
                FENCING,
                *PRODUCER,
            ],
            "requestBody": {
                **_RAW_BODY,
                "description": "op=append: the bytes to append (op=incr reads no body).",
            },
            "responses": write_responses(
                json_content(
                    {
                        "oneOf": [
                            {"$ref": "#/components/schemas/IncrResult"},
                            {"$ref": "#/components/schemas/AppendResult"},
                        ]
                    },
                    "Done: IncrResult for op=incr, AppendResult for op=append",
                ),
                400,
                409,
                413,
                503,
                507,
            ),
        },
        "get": {
            "summary": "Read a key: the raw value, ETag = its version",
            "parameters": [KEY, CONSISTENCY, MIN_VERSION],
            "responses": {
                "200": {
                    "description": "The value; headers ETag, Rkv-Version, Rkv-Create-Version",
                    "content": {"application/octet-stream": {}},
                },
                **errors(307, 400, 404, 503),
            },
        },
        "delete": {
            "summary": "Delete a key (If-Match supported)",
            "parameters": [KEY, IF_MATCH, FENCING, *PRODUCER],
            "responses": write_responses(
                json_content(
                    {"type": "object", "properties": {"version": {"type": "integer"}}},
                    "Deleted; version is the tombstone's offset",
                ),
                400,
                404,
                409,
                412,
                503,
            ),
        },
    }


def _scan() -> dict[str, Any]:
    return {
        "summary": "Prefix scan in key order, paginated",
        "description": "A page holds at most `limit` items, and ends before its keys and "
        "values pass the node's --max-page-bytes (4 MiB by default; the first item always "
        "comes); `next` is then the cursor of the rest.",
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
                "schema": BASE64URL,
                "description": "The opaque cursor from a previous page's next.",
            },
            ENCODING,
            CONSISTENCY,
            MIN_VERSION,
        ],
        "responses": {
            "200": json_content({"$ref": "#/components/schemas/ScanPage"}, "A page"),
            **errors(307, 400, 503),
        },
    }


def _txn() -> dict[str, Any]:
    return {
        "summary": "Atomic multi-key transaction (compare / success / failure)",
        "description": "One raft entry, atomic on every replica: if every compare holds "
        "the success ops run, otherwise the failure ops. An incr or append that fails "
        "(not_an_integer, integer_overflow: 409; a result too large: 413) fails the whole "
        "transaction with no effect. At most --max-txn-ops (1024 by default, at most "
        f"{MAX_TXN_OPS}) compares and ops in all.",
        "parameters": [ENCODING, FENCING, *PRODUCER],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Txn"}}},
        },
        "responses": write_responses(
            json_content({"$ref": "#/components/schemas/TxnResult"}, "Applied"),
            400,
            404,
            409,
            413,
            429,
            503,
            507,
        ),
    }


def _producers() -> dict[str, Any]:
    return {
        "summary": "Initialise an idempotent producer",
        "description": "Allocates a producer id and epoch (a raft entry). Its writes then "
        "carry Rkv-Producer-Id, Rkv-Producer-Epoch and Rkv-Sequence (from 0, one more "
        "per write), so a retried write is applied once: a retry of one of the last "
        f"{WINDOW} sequences gets the original answer again with Rkv-Duplicate: true. "
        "With a transactional_id seen before, the answer keeps that producer id with "
        "the next epoch, which fences every older epoch (409 producer_fenced). A "
        "producer idle past its expiry is forgotten (409 unknown_producer). A new "
        "producer past the cluster's --max-producers is refused with 429 "
        "too_many_producers; a new epoch of a live transactional id never is.",
        "requestBody": {
            "required": False,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/ProducerInit"}}
            },
        },
        "responses": {
            "200": json_content({"$ref": "#/components/schemas/Producer"}, "Initialised"),
            **errors(400, 429, 503),
        },
    }


def kv_paths() -> dict[str, Any]:
    return {
        "/v1/kv/{key}": _key_paths(),
        "/v1/kv": {"get": _scan()},
        "/v1/txn": {"post": _txn()},
        "/v1/producers": {"post": _producers()},
    }
