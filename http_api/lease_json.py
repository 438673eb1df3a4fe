"""Leases, lock holders and keepalive outcomes as the JSON of docs/LEASES.md."""

from __future__ import annotations

from typing import Any

from http_api.encoding import encode_bytes
from node.service.lease_types import LeaseInfo, LockHolder, Renewal


def renewal_json(renewal: Renewal) -> dict[str, Any]:
    """One lease's keepalive: ``{"id", "ttl"}``, or ``{"id", "code"}`` when refused."""
    if renewal.code is None:
        return {"id": renewal.lease_id, "ttl": renewal.ttl}
    return {"id": renewal.lease_id, "code": renewal.code}


def lease_json(info: LeaseInfo) -> dict[str, Any]:
    return {
        "id": info.lease_id,
        "ttl": info.ttl,
        "remaining": round(max(info.remaining, 0.0), 3),
        "owner": info.owner,
    }


def lease_detail_json(info: LeaseInfo, encoding: str) -> dict[str, Any]:
    """One lease with its keys (encoded like scan keys) and locks."""
    return {
        **lease_json(info),
        "keys": [encode_bytes(key, encoding, "key") for key in info.keys],
        "locks": list(info.locks),
        "truncated": info.truncated,
    }


def value_text(holder: LockHolder) -> str:
    """A holder's value (UTF-8 as the routes take it; anything else shown replaced)."""
    return holder.value.decode("utf-8", "replace")


def acquired_json(holder: LockHolder) -> dict[str, Any]:
    """What a lock request answers once held."""
    return {"name": holder.name, "key": holder.key, "token": holder.token, "lease": holder.lease_id}


def holder_json(holder: LockHolder) -> dict[str, Any]:
    """A lock's holder as GET /v1/locks/{name} shows it."""
    return {
        "lease": holder.lease_id,
        "token": holder.token,
        "since_ms": holder.since_ms,
        "value": value_text(holder),
    }


def leader_json(holder: LockHolder) -> dict[str, Any]:
    """An election's leader as GET /v1/elections/{name} shows it."""
    return {"name": holder.name, **holder_json(holder)}
