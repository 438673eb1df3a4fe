"""The compose cluster as a client on the host sees it: three published HTTPS ports.

The nodes advertise ``https://nodeN:8001``, which only resolves inside the
compose network, so the Python client's member discovery cannot be used from
the host; this helper talks to the published ports with plain urllib
(tests/support/cluster.http), verifying them with the CA the compose ``secret``
service generated and authenticating as root with its generated password (both
read from the ``secret`` volume), and keeps a ledger of every acknowledged write.

``write`` retries a PUT of one key and one value on every node until one
answers 200 (a write whose outcome was unknown is sent again with the same
value, which is harmless); only a 200 puts it in the ledger, and only the
ledger is checked afterwards: "nothing acknowledged is lost".
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.support.cluster import Response, http

NODE_IDS = {"n1": "node1", "n2": "node2", "n3": "node3"}


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@dataclass
class PublishedCluster:
    ports: dict[str, int]  # service -> published host port
    context: ssl.SSLContext  # trusts the generated CA
    headers: dict[str, str]  # root's Basic credentials
    acknowledged: dict[str, str] = field(default_factory=dict)

    def url(self, service: str, scheme: str = "https") -> str:
        return f"{scheme}://127.0.0.1:{self.ports[service]}"

    def _request(
        self, method: str, service: str, path: str, body: bytes | None = None, timeout: float = 10
    ) -> tuple[int, bytes] | None:
        try:
            response = self.get_response(method, service, path, body, timeout)
        except OSError:
            return None
        return response.status, response.body

    def get_response(
        self,
        method: str,
        service: str,
        path: str,
        body: bytes | None = None,
        timeout: float = 10,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """One request as root over HTTPS (``headers`` replace root's credentials)."""
        return http(
            method,
            self.url(service) + path,
            body=body,
            headers=self.headers if headers is None else headers,
            timeout=timeout,
            context=self.context,
        )

    def status(self, service: str) -> dict[str, Any] | None:
        answer = self._request("GET", service, "/v1/status", timeout=5)
        if answer is None or answer[0] != 200:
            return None
        document: dict[str, Any] = json.loads(answer[1])
        return document

    def ready(self, service: str) -> bool:
        answer = self._request("GET", service, "/readyz", timeout=5)
        return answer is not None and answer[0] == 200

    def leader(self, among: Iterable[str] | None = None, timeout: float = 60.0) -> str:
        """The service whose node leads, as every answering node among ``among`` sees it."""
        services = list(among or self.ports)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for service in services:
                status = self.status(service)
                if status and status.get("role") == "leader":
                    return service
            time.sleep(0.3)
        raise AssertionError(f"no leader among {services} within {timeout:.0f} s")

    def write(
        self, key: str, value: str, via: Iterable[str] | None = None, timeout: float = 60.0
    ) -> bool:
        services = list(via or self.ports)
        path = "/v1/kv/" + urllib.parse.quote(key, safe="")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for service in services:
                answer = self._request("PUT", service, path, value.encode(), timeout=10)
                if answer is not None and answer[0] == 200:
                    self.acknowledged[key] = value
                    return True
            time.sleep(0.25)
        return False

    def write_many(self, prefix: str, count: int, via: Iterable[str] | None = None) -> list[str]:
        """``count`` new keys; returns those that were NOT acknowledged (should be none)."""
        services = list(via or self.ports)
        start = len(self.acknowledged)
        failed = []
        for i in range(count):
            key = f"{prefix}/{start + i:05d}"
            if not self.write(key, f"value-{key}", services):
                failed.append(key)
        return failed

    def read(self, service: str, key: str, consistency: str = "linearizable") -> str | None:
        """The value (None: 404); raises AssertionError on any other answer."""
        path = "/v1/kv/" + urllib.parse.quote(key, safe="")
        if consistency != "linearizable":
            path += f"?consistency={consistency}"
        answer = self._request("GET", service, path, timeout=10)
        assert answer is not None, f"{service} unreachable reading {key}"
        if answer[0] == 404:
            return None
        assert answer[0] == 200, f"{service} answered {answer[0]} reading {key}: {answer[1]!r}"
        return answer[1].decode()

    def missing_on(self, service: str, consistency: str = "linearizable") -> list[str]:
        """Acknowledged keys ``service`` does not return with their value."""
        return [
            key
            for key, value in self.acknowledged.items()
            if self.read(service, key, consistency) != value
        ]

    def wait_converged(self, services: Iterable[str], timeout: float = 120.0) -> None:
        """Every service ready and holding every acknowledged write locally (stale reads)."""
        pending = list(services)
        deadline = time.monotonic() + timeout
        last: dict[str, object] = {}
        while pending and time.monotonic() < deadline:
            for service in list(pending):
                try:
                    missing = self.missing_on(service, "stale") if self.ready(service) else None
                except AssertionError as exc:
                    missing = None
                    last[service] = str(exc)
                if missing == []:
                    pending.remove(service)
                elif missing is not None:
                    last[service] = f"{len(missing)} keys missing, e.g. {missing[:3]}"
                else:
                    last.setdefault(service, "not ready")
            if pending:
                time.sleep(1.0)
        assert not pending, f"not converged within {timeout:.0f} s: {last}"

    def service_of(self, node_id: str) -> str:
        return NODE_IDS[node_id]
