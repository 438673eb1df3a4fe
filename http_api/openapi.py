"""The OpenAPI 3.1 description served at /v1/openapi.json.

The parts: http_api/openapi_kv.py (/v1/kv, /v1/txn, /v1/producers),
openapi_node.py (node, log, watch, snapshot, admin and cluster endpoints),
openapi_alarms.py (the alarms),
openapi_audit.py (the consistency audit's endpoints and schemas),
openapi_auth.py (users, roles, tokens, and every operation's security from the
permission table), openapi_leases.py (leases), openapi_locks.py (locks and
elections), openapi_metrics.py (/metrics), openapi_schemas.py (components) and
openapi_common.py (what they share).
tests/unit/test_openapi.py checks that the document names exactly the routes
the app serves, with the same methods, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from http_api.openapi_alarms import alarm_paths
from http_api.openapi_audit import audit_paths, audit_schemas
from http_api.openapi_auth import SECURITY_SCHEMES, auth_paths, secure
from http_api.openapi_health import health_paths
from http_api.openapi_kv import kv_paths
from http_api.openapi_leases import lease_paths
from http_api.openapi_load import load_paths
from http_api.openapi_locks import lock_paths
from http_api.openapi_metrics import metrics_paths
from http_api.openapi_node import node_paths
from http_api.openapi_schemas import schemas


def openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "rkv",
            "version": "1",
            "description": "A Raft-replicated key-value store. Versions are commit-log "
            "offsets: every mutation gets the next one. Every answer carries an "
            "Rkv-Request-Id header: the request's Rkv-Request-Id or X-Request-Id when "
            "that is 1 to 64 of letters, digits and ._:/+=-, else one the node made up; "
            "the node's log lines written while serving the request carry it.",
        },
        "paths": secure(
            {
                **kv_paths(),
                **load_paths(),
                **lease_paths(),
                **lock_paths(),
                **node_paths(),
                **alarm_paths(),
                **metrics_paths(),
                **health_paths(),
                **audit_paths(),
                **auth_paths(),
            }
        ),
        "components": {
            "schemas": {**schemas(), **audit_schemas()},
            "securitySchemes": SECURITY_SCHEMES,
        },
        # Needed once auth is enabled (POST /v1/auth/enable); open operations say so.
        "security": [{"basic": []}, {"bearer": []}, {"mtls": []}],
    }
