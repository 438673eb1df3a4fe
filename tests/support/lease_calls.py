"""What the lease, lock and election tests over HTTP share (tests/cluster/test_leases_http.py,
test_locks_http.py): a cluster with small lease limits, calls, and NDJSON streams read
line by line."""

from __future__ import annotations

import base64
import json
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

from tests.support.cluster import LocalCluster, NodeProcess, Response, http, wait_until

KEEPALIVE = 0.5
MAX_LEASES = 12
MAX_TTL = 3600
MAX_ATTACHMENTS = 3
MAX_WAITERS = 2
MAX_WAIT = 20
WATCHES_PER_ADDRESS = 3


def lease_cluster(base_dir: Path) -> LocalCluster:
    """3 nodes with small lease limits, so that reaching them is cheap."""
    return LocalCluster(
        base_dir,
        extra_args=[
            "--watch-keepalive", str(KEEPALIVE),
            "--max-leases", str(MAX_LEASES),
            "--max-lease-ttl", str(MAX_TTL),
            "--max-lease-attachments", str(MAX_ATTACHMENTS),
            "--max-lock-waiters", str(MAX_WAITERS),
            "--max-lock-wait", str(MAX_WAIT),
            "--max-watches-per-address", str(WATCHES_PER_ADDRESS),
        ],
    )  # fmt: skip


def call(
    node: NodeProcess,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 15.0,
) -> Response:
    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
    sent = {"Content-Type": "application/json"} if body is not None else {}
    return http(method, node.url + path, data, {**sent, **(headers or {})}, timeout)


def ok(response: Response) -> Any:
    assert response.status == 200, (response.status, response.body[:300])
    return response.json()


def refused(response: Response, status: int, code: str) -> dict[str, Any]:
    assert response.status == status, (response.status, response.body[:300])
    answer: dict[str, Any] = response.json()
    assert answer["code"] == code, answer
    assert answer["message"], answer
    return answer


def grant(node: NodeProcess, ttl: int = 60) -> int:
    granted = ok(call(node, "POST", "/v1/leases", {"ttl": ttl}))
    assert granted["ttl"] == ttl
    lease: int = granted["id"]
    return lease


def revoke(node: NodeProcess, *leases: int) -> None:
    for lease in leases:
        response = call(node, "DELETE", f"/v1/leases/{lease}")
        assert response.status in (200, 404), response.body


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def stale_get(node: NodeProcess, key: str) -> int:
    return http("GET", f"{node.url}/v1/kv/{key}?consistency=stale").status


def wait_gone(node: NodeProcess, key: str, timeout: float) -> None:
    """Wait (bounded) until ``node`` has applied the key's deletion."""
    wait_until(lambda: stale_get(node, key) == 404, timeout, f"{key} gone from {node.node_id}")


def lock(node: NodeProcess, name: str, lease: int, timeout: float = 0) -> Response:
    return call(node, "POST", f"/v1/locks/{name}", {"lease": lease, "timeout": timeout}, None, 30)


def fenced_put(node: NodeProcess, key: str, fencing: str) -> Response:
    return call(node, "PUT", f"/v1/kv/{key}", b"v", {"Rkv-Fencing": fencing})


class Stream:
    """A long-lived NDJSON answer (a watch, an election's observers), line by line."""

    def __init__(self, node: NodeProcess, path: str, timeout: float = 10.0) -> None:
        self.connection = HTTPConnection("127.0.0.1", node.http_port, timeout=timeout)
        self.connection.request("GET", path)
        self.response = self.connection.getresponse()
        assert self.response.status == 200, self.response.read()
        assert self.response.getheader("Content-Type") == "application/x-ndjson"

    def line(self) -> dict[str, Any]:
        raw = self.response.readline()
        assert raw.endswith(b"\n"), raw
        parsed: dict[str, Any] = json.loads(raw)
        return parsed

    def leader(self) -> dict[str, Any] | None:
        """The next leader line's leader (keep-alive lines, ``{}``, are skipped)."""
        while True:
            line = self.line()
            assert "error" not in line, line
            if line:
                leader: dict[str, Any] | None = line["leader"]
                return leader

    def close(self) -> None:
        self.connection.close()


def open_when_free(node: NodeProcess, path: str) -> Stream:
    """A stream, once a slot is free (a closed stream's handler notices within a second)."""

    def opened() -> Stream | None:
        try:
            return Stream(node, path)
        except AssertionError:  # 429: not yet
            return None

    stream: Stream = wait_until(opened, 10, f"a free slot for {path}")
    return stream
