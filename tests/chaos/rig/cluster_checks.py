"""Helpers the chaos tests share: writes that may get no answer, and waiting for
every node to hold the same keys, versions and values."""

from __future__ import annotations

import urllib.error
from collections.abc import Sequence
from http.client import HTTPException

from tests.support.cluster import NodeProcess, Response, http, scan_all, wait_until

State = dict[bytes, tuple[int, bytes]]


def put(url: str, key: str, value: bytes, timeout: float = 15.0) -> Response | None:
    """PUT a key; None when no HTTP answer came back (refused, reset, timed out)."""
    try:
        return http("PUT", f"{url}/v1/kv/{key}", body=value, timeout=timeout)
    except (urllib.error.URLError, OSError, HTTPException):
        return None


def put_ok(url: str, key: str, value: bytes) -> int:
    response = put(url, key, value)
    assert response is not None and response.status == 200, (url, key, response and response.body)
    version: int = response.json()["version"]
    return version


def stale_state(node: NodeProcess, prefix: str) -> State:
    items = scan_all(node.url, prefix.encode(), query="consistency=stale", timeout=5)
    return {item["key"]: (item["version"], item["value"]) for item in items}


def converged(nodes: Sequence[NodeProcess], prefix: str, expected: State, timeout: float) -> State:
    """Wait until every node's stale scan of ``prefix`` is identical and holds ``expected``
    (keys, versions and values); return that state."""
    last: list[State] = []

    def attempt() -> State | None:
        try:
            states = [stale_state(n, prefix) for n in nodes]
        except (AssertionError, OSError):
            return None
        last[:] = states
        first = states[0]
        if all(s == first for s in states) and all(first.get(k) == v for k, v in expected.items()):
            return first
        return None

    try:
        result: State = wait_until(attempt, timeout, "every node to hold the same state", 0.2)
    except TimeoutError:
        raise AssertionError(f"states did not converge: {last}") from None
    return result
