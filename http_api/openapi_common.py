"""Pieces the OpenAPI path and schema modules share: the error table, response
helpers and the parameters more than one operation takes."""

from __future__ import annotations

from typing import Any

from http_api.encoding import BASE64URL_PATTERN, IF_MATCH_PATTERN, MAX_VERSION, PRODUCER_HEADERS
from node.state.commands import MAX_TXN_OPS
from node.state.producers import WINDOW

ERROR = {"$ref": "#/components/schemas/Error"}
BYTES = {"type": "string", "description": "base64, or text with encoding=utf-8"}
INT64 = {"type": "integer", "format": "int64", "minimum": -(2**63), "maximum": 2**63 - 1}
OFFSET = {"type": "integer", "minimum": 0, "maximum": MAX_VERSION}
BASE64URL = {"type": "string", "pattern": BASE64URL_PATTERN}

_ERROR_TEXT = {
    307: "Not the leader (consistency=leader, membership changes, audits): Location names "
    "the leader",
    400: "Invalid request (bad key, parameter, header or body; invalid_audit_id, "
    "invalid_buckets; unknown_check: /readyz?exclude names no check; leases: invalid_ttl, "
    "invalid_fencing: a malformed Rkv-Fencing)",
    401: "Authentication is on and the request carries no valid credentials "
    '(WWW-Authenticate: Basic realm="rkv", Bearer): unauthenticated (none), '
    "invalid_credentials (wrong user or password, or a client certificate naming no "
    "user), invalid_token (not this cluster's, altered, or issued before the last change "
    "of users or roles: ask for a new one), token_expired",
    403: "permission_denied: the user lacks the permission the message names (e.g. needs "
    "write on key 'x', needs read on prefix 'p', needs admin); lease_not_owned: a write's "
    "lease is another user's; auth_required: this node "
    "serves on a non-loopback address with authentication disabled and refuses an operation "
    "that could redirect clients (a member's url)",
    404: "No such key (or member). Leases: lease_not_found (a write's ?lease or a txn "
    "put's lease does not exist). Auth: user_not_found, role_not_found, role_not_granted, "
    "permission_not_granted. Audits: audit_not_found (this node has no export of it, "
    "or not yet), audit_not_finished, audit_file_not_found",
    409: "Conflict. fenced: the write's Rkv-Fencing token is not the lock's holder's "
    '(nothing written; "token" is the holder\'s, null when nobody holds it). '
    "Idempotent producer writes: producer_fenced (not the current epoch), "
    "out_of_order_sequence (a sequence was skipped), duplicate_sequence_too_old (a "
    f"retry older than the last {WINDOW} sequences), unknown_producer (unknown or "
    "expired: initialise again). incr: not_an_integer, integer_overflow. Membership: "
    "membership_change_in_progress, member_exists, address_in_use, last_member or "
    "member_is_leader, member_unreachable (the new member does not answer on its raft "
    "address under the cluster secret). Audits: audit_exists, audit_running (an audit is "
    "still being exported on the leader: start another once it is done). Auth: "
    "user_exists, role_exists, root_required (enabling needs the user root with the role "
    "root; root cannot be deleted or lose it while auth is on), root_role_built_in, "
    "cluster_secret_required (auth and tokens need the cluster secret)",
    410: "transfer_expired: the snapshot transfer to resume is no longer held: start again",
    412: "Precondition failed: body has current_version",
    413: "Value or body too large, or an append's result would be; txn_too_large: a txn "
    "of more compares and ops than the node's --max-txn-ops (1024 by default, at most "
    f"{MAX_TXN_OPS}); txn_result_too_large: a txn's get ops would return more "
    "keys and values than the node's --max-txn-result-bytes (8 MiB by default; the txn "
    "wrote nothing); too_many_role_permissions (--max-role-permissions)",
    429: "A limit is reached; the code names it: too_many_producers (--max-producers; "
    "room is freed as idle producers expire), too_many_watches_per_address "
    "(--max-watches-per-address), too_many_connections_per_address "
    "(--max-connections-per-address), too_many_failed_logins (--max-failed-logins per "
    "user and address, --max-failed-logins-per-address, per minute; Retry-After), "
    "too_many_users (--max-auth-users), too_many_roles (--max-auth-roles), "
    "too_many_leases (--max-leases: a put's ttl), too_many_lease_attachments "
    "(--max-lease-attachments: a put's or txn put's lease)",
    500: "audit_export_failed: this node's export of the audit failed (the message says "
    "why; run a new audit), or internal_error",
    507: "no_space: a member raised a NOSPACE alarm (its disk is full, or its data "
    "passed --quota-bytes); the cluster refuses writes that add data (puts, txns with a "
    "put, incr or append op, incr, append, bulk loads, lease grants, locks, producers) "
    "until an operator frees space and disarms it (POST /v1/alarms:disarm); the message "
    "names the member and the reason. Deletes and reads go on",
    503: "not_applied (safe to retry), unknown_outcome, overloaded (Retry-After), "
    "no_leader, node_not_ready, audits_unavailable, leases_unavailable (a put with lease "
    "or ttl on a node without leases), or auth_starting (a node given "
    "--root-password-file on a cluster that never set auth up, before the root user "
    "and auth are applied; Retry-After)",
}

DUPLICATE_HEADER = {
    "Rkv-Duplicate": {
        "schema": {"type": "string", "enum": ["true"]},
        "description": "Present when this is the remembered answer to a retried "
        "producer sequence: nothing was applied again.",
    }
}
# An applied write's answer (success or refusal) is what a retry of its sequence gets.
_DUPLICABLE = frozenset({404, 409, 412, 413})


def json_content(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def errors(*statuses: int) -> dict[str, Any]:
    return {str(s): json_content(ERROR, _ERROR_TEXT[s]) for s in statuses}


def write_responses(ok: dict[str, Any], *statuses: int) -> dict[str, Any]:
    """A write's responses: ``ok`` (a 200) and the errors, marked as answers a
    retried producer sequence can get again with Rkv-Duplicate."""
    responses = {"200": {**ok, "headers": DUPLICATE_HEADER}, **errors(*statuses)}
    for status in _DUPLICABLE.intersection(statuses):
        responses[str(status)]["headers"] = DUPLICATE_HEADER
    return responses


KEY = {
    "name": "key",
    "in": "path",
    "required": True,
    "description": "The key: arbitrary bytes, percent-encoded (1..4096 bytes).",
    "schema": {"type": "string"},
}
CONSISTENCY = {
    "name": "consistency",
    "in": "query",
    "schema": {"type": "string", "enum": ["linearizable", "leader", "stale"]},
    "description": "linearizable (default): confirmed with a majority (ReadIndex), then "
    "read locally; leader: "
    "local read if this node believes it leads; stale: local read on any node.",
}
MIN_VERSION = {
    "name": "min_version",
    "in": "query",
    "schema": OFFSET,
    "description": "Wait (bounded) until this node has applied this offset, then read.",
}
ENCODING = {
    "name": "encoding",
    "in": "query",
    "schema": {"type": "string", "enum": ["base64", "utf-8"]},
    "description": "How keys and values appear in JSON (default base64).",
}
IF_MATCH = {
    "name": "If-Match",
    "in": "header",
    "schema": {"type": "string", "pattern": IF_MATCH_PATTERN},
    "description": 'Compare-and-set: "<version>" the key must have (0 up to 2^63 - 1; '
    "quotes and W/ optional). Not together with If-None-Match (400).",
}
IF_NONE_MATCH = {
    "name": "If-None-Match",
    "in": "header",
    "schema": {"type": "string", "enum": ["*"]},
    "description": "Create only: the key must not exist.",
}

_TOGETHER = (
    f"An idempotent write carries {', '.join(PRODUCER_HEADERS)} all three or none "
    "(otherwise 400 invalid_producer_header)."
)
_PRODUCER_TEXT = {
    "Rkv-Producer-Id": "The producer_id from POST /v1/producers.",
    "Rkv-Producer-Epoch": "The epoch from POST /v1/producers; any but the producer's "
    "current epoch is refused (409 producer_fenced).",
    "Rkv-Sequence": "This write's sequence: 0 for the first write of an epoch, then one "
    "more per write (a gap: 409 out_of_order_sequence). A retry of one of the last "
    f"{WINDOW} sequences gets the original answer again with Rkv-Duplicate: true and "
    "applies nothing; an older one: 409 duplicate_sequence_too_old.",
}
PRODUCER = [
    {
        "name": name,
        "in": "header",
        "schema": {"type": "integer", "minimum": 0, "maximum": MAX_VERSION},
        "description": f"{_PRODUCER_TEXT[name]} {_TOGETHER}",
    }
    for name in PRODUCER_HEADERS
]
