"""What each route needs when authentication is on: THE table, and its checks.

Every route the app serves is a row of :data:`ROUTE_NEEDS` (method, route
template); tests/unit/test_permissions.py fails on a route that is not, and
the middleware (http_api/authn.py) refuses a route it cannot find (as admin
only), so no route can be forgotten open. While auth is disabled nothing is
checked.

- ``open``: no credentials (probes, the OpenAPI document, getting a token);
- ``authenticated``: any user (status, an idempotent producer's init);
- ``read``/``write``/``readwrite`` on the key in the path (incr and append
  answer the value they make, so they need both);
- ``read`` on the prefix of a scan or a watch: a prefix permission at or above
  it (a key permission does not cover a prefix);
- ``write on each key``: a bulk load (POST /v1/kv:load), checked line by line
  once each is parsed (:func:`require_write`);
- ``txn``: checked per op once the body is parsed (:func:`authorize_txn`):
  compares and gets need read, puts and deletes write, incr and append
  readwrite, on each key of BOTH branches (either may run). A replicator's
  checkpoint ops are checked on the checkpoint's internal key,
  ``\\x00rkv/checkpoints/NAME``;
- leases: ``authenticated`` (a lease's owner, or an admin, is checked by the
  lease service: 403 ``lease_not_owned``);
- locks and elections: ``write`` on the lock's internal key
  ``\\x00rkv/locks/NAME`` to lock, unlock, campaign, proclaim and resign,
  ``read`` on it to look or observe (a prefix permission on
  ``\\x00rkv/locks/jobs/`` covers every lock under ``jobs/``);
- ``read`` on the alarms' internal prefix ``\\x00rkv/alarms/`` to list the alarms
  (a read permission on a prefix at or above it, such as the whole keyspace,
  covers it; so does admin); disarming one needs ``admin``;
- ``admin``: the cluster endpoints and the management of users and roles.
"""

from __future__ import annotations

import enum

from aiohttp import web

from http_api.encoding import key_from_path, raw_query
from http_api.lease_input import lock_name
from node.errors import PermissionDenied
from node.keyspace import ALARMS_PREFIX
from node.service.auth import Principal
from node.state.auth_records import PermissionKind, describe_key
from node.state.commands import Txn, TxnAppend, TxnDelete, TxnGet, TxnIncr, TxnOp, TxnPut
from node.state.leases import lock_key


class Need(enum.Enum):
    OPEN = "open"
    AUTHENTICATED = "authenticated"
    READ_KEY = "read on the key"
    WRITE_KEY = "write on the key"
    READWRITE_KEY = "readwrite on the key"
    READ_PREFIX = "read on the prefix"
    READ_ALARMS = "read on the alarms"
    READ_LOCK = "read on the lock"
    WRITE_LOCK = "write on the lock"
    TXN = "per op"
    WRITE_EACH_KEY = "write on each key"
    ADMIN = "admin"


KV = "/v1/kv/{key}"
LEASE = "/v1/leases/{id}"
LOCK = "/v1/locks/{name}"
ELECTION = "/v1/elections/{name}"
ROUTE_NEEDS: dict[tuple[str, str], Need] = {
    # probes and discovery
    ("GET", "/livez"): Need.OPEN,
    ("GET", "/healthz"): Need.OPEN,
    ("GET", "/readyz"): Need.OPEN,
    ("GET", "/v1/openapi.json"): Need.OPEN,
    # As etcd's: scrapers need no credentials; it shows counts, never a key (OBSERVABILITY.md).
    ("GET", "/metrics"): Need.OPEN,
    ("POST", "/v1/auth/token"): Need.OPEN,
    ("GET", "/v1/status"): Need.AUTHENTICATED,
    ("GET", "/v1/auth/status"): Need.AUTHENTICATED,
    # keys
    ("GET", KV): Need.READ_KEY,
    ("PUT", KV): Need.WRITE_KEY,
    ("DELETE", KV): Need.WRITE_KEY,
    ("POST", KV): Need.READWRITE_KEY,
    ("GET", "/v1/kv"): Need.READ_PREFIX,
    ("GET", "/v1/watch"): Need.READ_PREFIX,
    ("POST", "/v1/txn"): Need.TXN,
    ("POST", "/v1/kv:load"): Need.WRITE_EACH_KEY,
    ("POST", "/v1/producers"): Need.AUTHENTICATED,
    # leases (the service checks who owns one), locks and elections
    ("POST", "/v1/leases"): Need.AUTHENTICATED,
    ("GET", "/v1/leases"): Need.AUTHENTICATED,
    ("POST", "/v1/leases/keepalive"): Need.AUTHENTICATED,
    ("GET", "/v1/leases/keepalive"): Need.AUTHENTICATED,
    ("GET", LEASE): Need.AUTHENTICATED,
    ("DELETE", LEASE): Need.AUTHENTICATED,
    ("POST", LEASE + "/keepalive"): Need.AUTHENTICATED,
    ("POST", LOCK): Need.WRITE_LOCK,
    ("DELETE", LOCK): Need.WRITE_LOCK,
    ("GET", LOCK): Need.READ_LOCK,
    ("POST", ELECTION): Need.WRITE_LOCK,
    ("PUT", ELECTION): Need.WRITE_LOCK,
    ("DELETE", ELECTION): Need.WRITE_LOCK,
    ("GET", ELECTION): Need.READ_LOCK,
    # the cluster
    ("GET", "/v1/alarms"): Need.READ_ALARMS,
    ("POST", "/v1/alarms"): Need.ADMIN,  # members hold admin (a member raising its own)
    ("POST", "/v1/alarms:disarm"): Need.ADMIN,
    ("GET", "/v1/checkpoints"): Need.ADMIN,
    ("GET", "/v1/cluster/members"): Need.ADMIN,
    ("POST", "/v1/cluster/members"): Need.ADMIN,
    ("PUT", "/v1/cluster/members/{id}"): Need.ADMIN,
    ("DELETE", "/v1/cluster/members/{id}"): Need.ADMIN,
    ("POST", "/v1/admin/compact"): Need.ADMIN,
    ("GET", "/v1/log"): Need.ADMIN,
    ("GET", "/v1/snapshot"): Need.ADMIN,
    ("DELETE", "/v1/snapshot"): Need.ADMIN,
    ("POST", "/v1/audit"): Need.ADMIN,
    ("GET", "/v1/audit/{id}"): Need.ADMIN,
    ("GET", "/v1/audit/{id}/files/{name}"): Need.ADMIN,
    # users and roles
    ("POST", "/v1/auth/enable"): Need.ADMIN,
    ("POST", "/v1/auth/disable"): Need.ADMIN,
    ("POST", "/v1/auth/users"): Need.ADMIN,
    ("GET", "/v1/auth/users"): Need.ADMIN,
    ("GET", "/v1/auth/users/{name}"): Need.ADMIN,
    ("DELETE", "/v1/auth/users/{name}"): Need.ADMIN,
    ("PUT", "/v1/auth/users/{name}/password"): Need.ADMIN,
    ("PUT", "/v1/auth/users/{name}/roles/{role}"): Need.ADMIN,
    ("DELETE", "/v1/auth/users/{name}/roles/{role}"): Need.ADMIN,
    ("POST", "/v1/auth/roles"): Need.ADMIN,
    ("GET", "/v1/auth/roles"): Need.ADMIN,
    ("GET", "/v1/auth/roles/{name}"): Need.ADMIN,
    ("DELETE", "/v1/auth/roles/{name}"): Need.ADMIN,
    ("POST", "/v1/auth/roles/{name}/permissions"): Need.ADMIN,
    ("DELETE", "/v1/auth/roles/{name}/permissions"): Need.ADMIN,
}

_NAMES = {
    PermissionKind.READ: "read",
    PermissionKind.WRITE: "write",
    PermissionKind.READWRITE: "readwrite",
}


def need_of(method: str, template: str) -> Need:
    """The route's need; a route missing from the table is admin only (fail closed)."""
    return ROUTE_NEEDS.get((method, template), Need.ADMIN)


def _require_key(principal: Principal, key: bytes, kind: PermissionKind) -> None:
    if not principal.allows_key(key, kind):
        raise PermissionDenied(
            f"{principal.name} needs {_NAMES[kind]} on key {describe_key(key)}",
        )


def authorize(need: Need, principal: Principal, request: web.Request) -> None:
    """Raise PermissionDenied unless ``principal`` may make this request (TXN is checked
    later, by :func:`authorize_txn`; WRITE_EACH_KEY line by line, by :func:`require_write`)."""
    if need in (Need.OPEN, Need.AUTHENTICATED, Need.TXN, Need.WRITE_EACH_KEY):
        return
    if need is Need.ADMIN:
        if not principal.admin:
            raise PermissionDenied(f"{principal.name} needs admin")
        return
    if need in (Need.READ_LOCK, Need.WRITE_LOCK):
        kind = PermissionKind.READ if need is Need.READ_LOCK else PermissionKind.WRITE
        _require_key(principal, lock_key(lock_name(request.match_info["name"])), kind)
        return
    if need is Need.READ_ALARMS:
        if not principal.admin and not principal.allows_prefix(ALARMS_PREFIX, PermissionKind.READ):
            raise PermissionDenied(
                f"{principal.name} needs read on the alarms' internal prefix "
                f"{describe_key(ALARMS_PREFIX)}"
            )
        return
    if need is Need.READ_PREFIX:
        prefix = raw_query(request).get("prefix", b"")
        if not principal.allows_prefix(prefix, PermissionKind.READ):
            raise PermissionDenied(f"{principal.name} needs read on prefix {describe_key(prefix)}")
        return
    kind = {
        Need.READ_KEY: PermissionKind.READ,
        Need.WRITE_KEY: PermissionKind.WRITE,
        Need.READWRITE_KEY: PermissionKind.READWRITE,
    }[need]
    _require_key(principal, key_from_path(request), kind)


def require_write(principal: Principal, key: bytes) -> None:
    """A bulk load's line: ``write`` on its key."""
    _require_key(principal, key, PermissionKind.WRITE)


def _op_kind(op: TxnOp) -> PermissionKind:
    if isinstance(op, TxnGet):
        return PermissionKind.READ
    if isinstance(op, TxnPut | TxnDelete):
        return PermissionKind.WRITE
    if isinstance(op, TxnIncr | TxnAppend):
        return PermissionKind.READWRITE
    raise AssertionError(f"not a txn op: {op!r:.80}")


def authorize_txn(principal: Principal | None, txn: Txn) -> None:
    """Every key the txn may touch, in either branch (None: auth is off)."""
    if principal is None:
        return
    for compare in txn.compares:
        _require_key(principal, compare.key, PermissionKind.READ)
    for op in (*txn.success, *txn.failure):
        _require_key(principal, op.key, _op_kind(op))
