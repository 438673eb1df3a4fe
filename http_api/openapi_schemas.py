"""The OpenAPI document's components: the schemas the paths refer to."""

from __future__ import annotations

from typing import Any

from http_api.encoding import MAX_VERSION
from http_api.openapi_common import BYTES, ERROR, INT64
from node.service.kv import (
    MAX_TRANSACTIONAL_ID_BYTES,
    MEMBER_ID_PATTERN,
    MEMBER_URL_PATTERN,
    RAFT_ADDRESS_PATTERN,
)
from node.state.commands import MAX_TXN_OPS

_INTEGER = {"type": "integer"}
_LEASE_ID = {"type": "integer", "minimum": 1, "maximum": MAX_VERSION}
_OTHER_WRITE = (
    "null when this is the remembered answer (Rkv-Duplicate: true) to an earlier write "
    "of another kind that used the same producer sequence: nothing was applied."
)


LOAD_ERROR_FIELDS: dict[str, Any] = {
    "line": {"type": "integer", "minimum": 1, "description": "A bulk load: the line that failed."},
    "loaded": {"type": "integer", "minimum": 0, "description": "A bulk load: pairs committed."},
    "lines": {
        "type": "integer",
        "minimum": 0,
        "description": "A bulk load: lines of the body committed (blank ones included); "
        "skip this many when sending it again.",
    },
    "version": {
        "type": "integer",
        "minimum": 0,
        "description": "A bulk load: the offset of the last put committed (0: none).",
    },
}
"""The fields a bulk load's error adds (POST /v1/kv:load, http_api/routes_load.py)."""


def _object(required: list[str], properties: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties, **more}


def _txn_op(op: str, description: str, **fields: Any) -> dict[str, Any]:
    """One kind of txn op: {"op": op, "key": ..., **fields}; fields given as
    (schema, required) pairs."""
    return _object(
        ["op", "key", *(name for name, (_, required) in fields.items() if required)],
        {"op": {"const": op}, "key": BYTES, **{n: s for n, (s, _) in fields.items()}},
        description=description,
    )


_CHECKPOINT = {
    "type": "string",
    "pattern": "^[A-Za-z0-9._:/@-]{1,200}$",
    "description": "A replicator's internal checkpoint record, by name, instead of a key: "
    "compares, put and get only (committed atomically with the txn's other writes)",
}


def _checkpoint_op(op: str, description: str, **fields: Any) -> dict[str, Any]:
    return _object(
        ["op", "checkpoint", *(name for name, (_, required) in fields.items() if required)],
        {"op": {"const": op}, "checkpoint": _CHECKPOINT, **{n: s for n, (s, _) in fields.items()}},
        description=description,
    )


def _txn_op_result(op: str, description: str, *fields: str, **typed: Any) -> dict[str, Any]:
    """One kind of txn op result: op, key and integer fields, plus ``typed``."""
    properties = {"op": {"const": op}, "key": BYTES, **dict.fromkeys(fields, _INTEGER), **typed}
    return _object(["op", "key", *fields, *typed], properties, description=description)


def _txn_schemas() -> dict[str, Any]:
    compare = {
        "type": "object",
        "description": "key or checkpoint, and exactly one of version (0: the key does not "
        "exist), value, exists.",
        "properties": {
            "key": BYTES,
            "checkpoint": _CHECKPOINT,
            "version": {"type": "integer", "minimum": 0},
            "value": BYTES,
            "exists": {"type": "boolean"},
        },
    }
    ops = {"type": "array", "items": {"$ref": "#/components/schemas/Op"}}
    return {
        "Txn": {
            "type": "object",
            "description": "At most --max-txn-ops (1024 by default, at most "
            f"{MAX_TXN_OPS}) compares and ops in all (more: 413 txn_too_large); its get ops "
            "return at most "
            "--max-txn-result-bytes (8 MiB) of keys and values (more: 413 "
            "txn_result_too_large, and nothing is written).",
            "additionalProperties": False,
            "properties": {
                "compare": {"type": "array", "items": compare},
                "success": ops,
                "failure": ops,
            },
        },
        "Op": {
            "oneOf": [
                _txn_op(
                    "put",
                    "Set the key; with lease, attached to that lease (docs/LEASES.md: "
                    "404 lease_not_found, 403 lease_not_owned, 429 too_many_lease_attachments)",
                    value=(BYTES, True),
                    lease=(_LEASE_ID, False),
                ),
                _txn_op("delete", "Delete the key"),
                _txn_op("get", "Read the key as the txn sees it at this point"),
                _checkpoint_op("put", "Set the checkpoint", value=(BYTES, True)),
                _checkpoint_op("get", "Read the checkpoint"),
                _txn_op(
                    "incr",
                    "Add by to the counter (an absent key counts as 0)",
                    by=({**INT64, "default": 1}, False),
                ),
                _txn_op(
                    "append",
                    "Add value to the end (an absent key counts as empty)",
                    value=(BYTES, True),
                ),
            ]
        },
        "TxnResult": {
            "type": "object",
            "properties": {
                "succeeded": {
                    "type": "boolean",
                    "description": "Whether every compare held (the success ops ran)",
                },
                "version": {
                    "type": "integer",
                    "description": "The offset of its last write, or the last offset "
                    "before it when it wrote nothing",
                },
                "results": {
                    "type": "array",
                    "description": "One per op of the branch that ran, in order",
                    "items": {"$ref": "#/components/schemas/OpResult"},
                },
            },
        },
        "OpResult": {
            "oneOf": [
                _object(
                    ["op", "key", "version", "create_version"],
                    {
                        "op": {"const": "put"},
                        "key": BYTES,
                        "version": _INTEGER,
                        "create_version": _INTEGER,
                        "lease": {**_LEASE_ID, "description": "The put's lease, if it had one"},
                    },
                    description="Written",
                ),
                _object(
                    ["op", "checkpoint", "version", "create_version"],
                    {
                        "op": {"const": "put"},
                        "checkpoint": _CHECKPOINT,
                        "version": _INTEGER,
                        "create_version": _INTEGER,
                    },
                    description="Checkpoint written",
                ),
                _object(
                    ["op", "checkpoint", "found"],
                    {
                        "op": {"const": "get"},
                        "checkpoint": _CHECKPOINT,
                        "found": {"type": "boolean"},
                        "value": BYTES,
                        "version": _INTEGER,
                        "create_version": _INTEGER,
                    },
                    description="The checkpoint as the txn saw it",
                ),
                _txn_op_result("append", "Appended", "version", "create_version"),
                _txn_op_result(
                    "incr",
                    "Incremented",
                    "version",
                    "create_version",
                    value={**INT64, "description": "The counter's new value"},
                ),
                _txn_op_result(
                    "delete",
                    "Deleted if found; version is the tombstone's offset (0 if not found)",
                    "version",
                    found={"type": "boolean"},
                ),
                _object(
                    ["op", "key", "found"],
                    {
                        "op": {"const": "get"},
                        "key": BYTES,
                        "found": {"type": "boolean"},
                        "value": BYTES,
                        "version": _INTEGER,
                        "create_version": _INTEGER,
                    },
                    description="As the txn saw the key; value, version and "
                    "create_version only if found",
                ),
            ]
        },
    }


def _producer_schemas() -> dict[str, Any]:
    return {
        "ProducerInit": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "transactional_id": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_TRANSACTIONAL_ID_BYTES,
                    "description": f"1..{MAX_TRANSACTIONAL_ID_BYTES} bytes of UTF-8. "
                    "Without it every call allocates a new producer id.",
                }
            },
        },
        "Producer": _object(
            ["producer_id", "epoch"],
            {
                "producer_id": {"type": "integer", "minimum": 0},
                "epoch": {"type": "integer", "minimum": 0},
            },
        ),
        "IncrResult": _object(
            ["key", "value", "version"],
            {
                "key": BYTES,
                "value": {
                    **INT64,
                    "type": ["integer", "null"],
                    "description": f"The counter's new value. {_OTHER_WRITE}",
                },
                "version": _INTEGER,
            },
        ),
        "AppendResult": _object(
            ["key", "size", "version"],
            {
                "key": BYTES,
                "size": {
                    "type": ["integer", "null"],
                    "minimum": 0,
                    "description": f"The new length. {_OTHER_WRITE}",
                },
                "version": _INTEGER,
            },
        ),
    }


def _watch_schemas() -> dict[str, Any]:
    return {
        "Change": _object(
            ["offset", "op", "key", "version"],
            {
                "offset": _INTEGER,
                "op": {"type": "string", "enum": ["put", "delete"]},
                "key": BYTES,
                "value": {**BYTES, "description": "puts only; " + BYTES["description"]},
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
        ),
        "WatchKeepalive": _object(
            ["keepalive", "head"],
            {"keepalive": {"type": "boolean", "enum": [True]}, "head": _INTEGER},
        ),
        "WatchError": _object(["error"], {"error": ERROR}),
    }


def schemas() -> dict[str, Any]:
    return {
        "Error": _object(
            ["code", "message"],
            {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "current_version": _INTEGER,
                "leader_url": {"type": "string"},
                "token": {
                    "type": ["integer", "null"],
                    "description": "fenced, lock_held: the lock holder's fencing token "
                    "(null: nobody holds it)",
                },
                **LOAD_ERROR_FIELDS,
            },
        ),
        "ScanPage": {
            "type": "object",
            "properties": {
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "key": BYTES,
                            "value": BYTES,
                            "version": _INTEGER,
                            "create_version": _INTEGER,
                        },
                    },
                },
                "next": {"type": ["string", "null"]},
            },
        },
        **_txn_schemas(),
        **_producer_schemas(),
        **_watch_schemas(),
        "Member": _object(
            ["id", "raft_address", "url"],
            {
                "id": {
                    "type": "string",
                    "pattern": MEMBER_ID_PATTERN,
                    "not": {"enum": [".", ".."]},
                },
                "raft_address": {
                    "type": "string",
                    "pattern": RAFT_ADDRESS_PATTERN,
                    "description": "HOST:PORT (port 1 to 65535)",
                },
                "url": {
                    "type": "string",
                    "pattern": MEMBER_URL_PATTERN,
                    "description": "HTTP base URL (http:// or https://, no comma)",
                },
            },
        ),
        "MemberChange": {
            "type": "object",
            "properties": {
                "added": {"type": "boolean"},
                "removed": {"type": "boolean"},
                "member": {"$ref": "#/components/schemas/Member"},
            },
        },
    }
