"""A test cluster with auth on, set up as an operator would (docs/OPERATIONS.md,
Security): the user root with the role root, auth enabled, a token for root.

:func:`secure` returns root's credentials (for the Python client: the cluster's CA,
if it serves TLS, and the token) and makes every status() of the cluster and every
:func:`tests.support.cluster.http` call without headers send the token, until the
``with`` block ends: code written for an open cluster (the chaos rig, its checks and
nemeses) then runs unchanged against a secured one.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

from http_api.client import Credentials
from tests.support.cluster import TEST_AUTH, LocalCluster, http


def _ok(method: str, url: str, body: object = None) -> dict[str, object]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if data is not None else {}
    answer = http(method, url, data, headers=headers)
    assert answer.status == 200, (method, url, answer.status, answer.body[:300])
    decoded = answer.json()
    return decoded if isinstance(decoded, dict) else {}


@contextmanager
def secure(cluster: LocalCluster) -> Iterator[Credentials]:
    """Auth on for ``cluster`` (started), root's token sent by default meanwhile."""
    url = cluster.leader().url
    password = secrets.token_urlsafe(18)
    _ok("POST", f"{url}/v1/auth/users", {"name": "root", "password": password})
    _ok("PUT", f"{url}/v1/auth/users/root/roles/root")
    _ok("POST", f"{url}/v1/auth/enable")
    token = str(
        _ok("POST", f"{url}/v1/auth/token", {"user": "root", "password": password})["token"]
    )
    bearer = {"Authorization": f"Bearer {token}"}
    cluster.use_headers(bearer)
    TEST_AUTH.update(bearer)
    cafile = str(cluster.ca_file) if cluster.tls is not None else None
    try:
        yield Credentials(cafile=cafile, token=token)
    finally:
        TEST_AUTH.clear()
