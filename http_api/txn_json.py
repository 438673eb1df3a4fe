"""POST /v1/txn bodies and answers.

Request::

    {"compare": [{"key": K, "version": N} | {"key": K, "value": V} | {"key": K, "exists": B}],
     "success": [{"op": "put", "key": K, "value": V, "lease"?: ID} | {"op": "delete", "key": K}
                 | {"op": "get", "key": K} | {"op": "incr", "key": K, "by": N}
                 | {"op": "append", "key": K, "value": V}],
     "failure": [...same ops...]}

Keys and values are base64 unless ``?encoding=utf-8``. Instead of ``key``, a
compare, put or get may name ``"checkpoint": NAME``: a replicator's internal
checkpoint record (node/keyspace.py), committed atomically with its data. A
version compare of 0 means "does not exist". A put's ``lease`` attaches the key
to that lease (docs/LEASES.md; the route checks that the caller may use it);
the put's result repeats it. The whole transaction is one raft entry: atomic on
every replica. An incr or append that fails (not an integer, overflow, too
large) fails the whole transaction with 409/413 and no effect. A transaction
holds at most MAX_TXN_OPS compares and ops together.
"""

from __future__ import annotations

from typing import Any

from http_api.bodies import json_integer
from http_api.encoding import MAX_VERSION, decode_bytes, encode_bytes
from http_api.kv_api import KvWriteApi
from http_api.lease_input import lease_id
from node.errors import InvalidRequest, PayloadTooLarge
from node.keyspace import (
    CHECKPOINTS_PREFIX,
    checkpoint_key,
    checkpoint_name_problem,
    is_checkpoint,
)
from node.state.commands import (
    INT64_MAX,
    INT64_MIN,
    Compare,
    CompareTarget,
    Txn,
    TxnAppend,
    TxnDelete,
    TxnGet,
    TxnIncr,
    TxnOp,
    TxnPut,
)
from node.state.results import CommandResult

_COMPARE_FIELDS = {
    "version": CompareTarget.VERSION,
    "value": CompareTarget.VALUE,
    "exists": CompareTarget.EXISTS,
}


def _key(
    item: dict[str, Any], encoding: str, kv: KvWriteApi, where: str, checkpoint_ok: bool = True
) -> bytes:
    if "checkpoint" in item:
        # A replicator's checkpoint (node/keyspace.py), by name: compare, put, get.
        name = item["checkpoint"]
        if "key" in item or not checkpoint_ok:
            raise InvalidRequest(f"{where}: a checkpoint takes compare, put or get, without key")
        if not isinstance(name, str):
            raise InvalidRequest(f"{where}.checkpoint must be a string")
        problem = checkpoint_name_problem(name)
        if problem:
            raise InvalidRequest(f"{where}.checkpoint: {problem}")
        return checkpoint_key(name)
    if "key" not in item:
        raise InvalidRequest(f"{where} needs a key")
    key = decode_bytes(item["key"], encoding, f"{where}.key")
    kv.check_key(key)
    return key


def _compare(item: Any, encoding: str, kv: KvWriteApi, where: str) -> Compare:
    if not isinstance(item, dict):
        raise InvalidRequest(f"{where} must be an object")
    fields = [name for name in _COMPARE_FIELDS if name in item]
    if len(fields) != 1:
        raise InvalidRequest(f"{where} needs exactly one of version, value, exists")
    field = fields[0]
    target = _COMPARE_FIELDS[field]
    raw = item[field]
    expected: int | bytes | bool
    if target is CompareTarget.VERSION:
        version = json_integer(raw)
        if version is None or not 0 <= version <= MAX_VERSION:
            raise InvalidRequest(f"{where}.version must be an integer in 0..{MAX_VERSION}")
        expected = version
    elif target is CompareTarget.VALUE:
        expected = decode_bytes(raw, encoding, f"{where}.value")
    else:
        if type(raw) is not bool:
            raise InvalidRequest(f"{where}.exists must be true or false")
        expected = raw
    return Compare(_key(item, encoding, kv, where), target, expected)


def _op(item: Any, encoding: str, kv: KvWriteApi, where: str) -> TxnOp:
    if not isinstance(item, dict):
        raise InvalidRequest(f"{where} must be an object")
    kind = item.get("op")
    key = _key(item, encoding, kv, where, checkpoint_ok=kind in ("put", "get"))
    if kind == "put":
        if "value" not in item:
            raise InvalidRequest(f"{where} (put) needs a value")
        value = decode_bytes(item["value"], encoding, f"{where}.value")
        kv.check_value(value)
        if "lease" not in item:
            return TxnPut(key, value)
        if is_checkpoint(key):
            raise InvalidRequest(f"{where}: a checkpoint is never attached to a lease")
        return TxnPut(key, value, lease_id(item["lease"], f"{where}.lease"))
    if kind == "delete":
        return TxnDelete(key)
    if kind == "get":
        return TxnGet(key)
    if kind == "incr":
        by = json_integer(item.get("by", 1))
        if by is None or not INT64_MIN <= by <= INT64_MAX:
            raise InvalidRequest(f"{where}.by must be a signed 64-bit integer")
        return TxnIncr(key, by)
    if kind == "append":
        if "value" not in item:
            raise InvalidRequest(f"{where} (append) needs a value")
        suffix = decode_bytes(item["value"], encoding, f"{where}.value")
        kv.check_value(suffix)
        return TxnAppend(key, suffix)
    raise InvalidRequest(f"{where}.op must be put, delete, get, incr or append, not {kind!r:.40}")


def _list(body: dict[str, Any], name: str) -> list[Any]:
    value = body.get(name, [])
    if not isinstance(value, list):
        raise InvalidRequest(f"{name} must be a list")
    return value


def parse_txn(body: Any, encoding: str, kv: KvWriteApi) -> Txn:
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    unknown = set(body) - {"compare", "success", "failure"}
    if unknown:
        raise InvalidRequest(f"unknown fields: {', '.join(sorted(unknown))}")
    compares, success, failure = (_list(body, n) for n in ("compare", "success", "failure"))
    size = len(compares) + len(success) + len(failure)
    if size > kv.max_txn_ops:
        raise PayloadTooLarge(
            f"the transaction holds {size} compares and ops; this node takes at most "
            f"{kv.max_txn_ops} (--max-txn-ops)",
            code="txn_too_large",
        )
    return Txn(
        tuple(_compare(c, encoding, kv, f"compare[{i}]") for i, c in enumerate(compares)),
        tuple(_op(o, encoding, kv, f"success[{i}]") for i, o in enumerate(success)),
        tuple(_op(o, encoding, kv, f"failure[{i}]") for i, o in enumerate(failure)),
    )


def txn_leases(txn: Txn) -> set[int]:
    """The leases the txn's puts (in either branch) attach keys to."""
    return {op.lease for op in (*txn.success, *txn.failure) if isinstance(op, TxnPut) and op.lease}


def render_txn_result(result: CommandResult, encoding: str, txn: Txn) -> dict[str, Any]:
    """The answer to ``txn``, which ran (KvService.txn raised for any other)."""
    ran = txn.success if result.succeeded else txn.failure
    rendered: list[dict[str, Any]] = []
    for index, op in enumerate(result.op_results):
        item: dict[str, Any] = {"op": op.op}
        asked = ran[index] if index < len(ran) else None
        if isinstance(asked, TxnPut) and asked.lease and op.op == "put":
            item["lease"] = asked.lease
        if is_checkpoint(op.key):
            item["checkpoint"] = op.key[len(CHECKPOINTS_PREFIX) :].decode()
        else:
            item["key"] = encode_bytes(op.key, encoding, "key")
        if op.op in ("put", "append"):
            item.update(version=op.version, create_version=op.create_version)
        elif op.op == "incr":
            item.update(value=int(op.value), version=op.version, create_version=op.create_version)
        elif op.op == "delete":
            item.update(found=op.found, version=op.version)
        else:
            item["found"] = op.found
            if op.found:
                item.update(
                    value=encode_bytes(op.value, encoding, "value"),
                    version=op.version,
                    create_version=op.create_version,
                )
        rendered.append(item)
    return {"succeeded": result.succeeded, "version": result.version, "results": rendered}
