"""Real rkv node processes on 127.0.0.1 for tests (no mocks).

``LocalCluster`` starts ``python -m node.cli node`` processes with free ports,
a cluster secret and a data directory each; it stops them by PID. Helpers
mirror rqlite's system tests: leader(), followers(), wait_for_new_leader(old).

With ``tls=ClusterTls()`` the nodes serve HTTPS with certificates that
``rkv certs create``'s code makes under the cluster's directory (a CA, one
certificate per node, client certificates), verify each other with that CA,
and with ``client_ca=True`` ask clients for certificates too; node URLs are
https:// and :func:`http` verifies them with the CA.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from http_api.client.credentials import Credentials
from node.cli.cert_authority import CertificatePlan, create_certificates
from tests.support.memcg import MemoryCgroup

REPO = Path(__file__).resolve().parents[2]


def free_ports(n: int) -> list[int]:
    sockets = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@dataclass
class Response:
    status: int
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body)


def http(
    method: str,
    url: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 15.0,
    context: ssl.SSLContext | None = None,
) -> Response:
    """One HTTP request; never raises for an HTTP status, and does not follow redirects.
    ``context``: the TLS context for an https:// URL (default: the test clusters' CA,
    see :data:`TEST_TLS`)."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    if context is None and url.startswith("https://"):
        context = TEST_TLS.get("context")
    if headers is None:
        headers = dict(TEST_AUTH)
    opener = urllib.request.build_opener(NoRedirect, urllib.request.HTTPSHandler(context=context))
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with opener.open(request, timeout=timeout) as response:
            return Response(response.status, response.read(), dict(response.headers))
    except urllib.error.HTTPError as error:
        return Response(error.code, error.read(), dict(error.headers))


TEST_AUTH: dict[str, str] = {}
"""Headers :func:`http` sends when given none: the credentials of an auth-enabled
cluster a test set up with tests/support/secured.py (cleared when it ends)."""

TEST_TLS: dict[str, ssl.SSLContext] = {}
"""The client context of the last TLS cluster created in this process (its CA), which
:func:`http` uses for https:// URLs unless given another."""


@dataclass(frozen=True)
class ClusterTls:
    """TLS for a LocalCluster: certificates made under ``<base_dir>/certs``."""

    client_ca: bool = False
    """Ask clients for a certificate (--tls-client-ca: mutual TLS)."""
    clients: tuple[str, ...] = ("alice",)
    """Client certificates to make (their CN is the name)."""


@dataclass
class NodeProcess:
    node_id: str
    http_port: int
    raft_port: int
    data_dir: Path
    args: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    stopped_with_sigstop: bool = False
    scheme: str = "http"
    headers: dict[str, str] = field(default_factory=dict)
    """Sent with status() (an Authorization header once auth is enabled)."""

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.http_port}"

    @property
    def raft_address(self) -> str:
        return f"127.0.0.1:{self.raft_port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def status(self, timeout: float = 3.0) -> dict[str, Any] | None:
        try:
            response = http("GET", self.url + "/v1/status", headers=self.headers, timeout=timeout)
        except OSError:
            return None
        return response.json() if response.status == 200 else None


@dataclass
class LocalCluster:
    base_dir: Path
    size: int = 3
    extra_args: list[str] = field(default_factory=list)
    nodes: list[NodeProcess] = field(default_factory=list)
    memory_groups: list[MemoryCgroup] = field(default_factory=list)
    """When given, node i's process starts inside memory_groups[i] (tests/support/memcg.py)."""
    tls: ClusterTls | None = None
    """When given, the nodes serve HTTPS (see the module's docstring)."""

    def __post_init__(self) -> None:
        self.secret_file = self.base_dir / "cluster.secret"
        self.certs_dir = self.base_dir / "certs"
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.secret_file.write_text("test-secret-" + os.urandom(16).hex())
        ports = free_ports(2 * self.size)
        for i in range(self.size):
            data_dir = self.base_dir / f"n{i}"
            self.nodes.append(
                NodeProcess(
                    f"n{i}",
                    ports[2 * i],
                    ports[2 * i + 1],
                    data_dir,
                    [],
                    data_dir / "node.log",
                    scheme="https" if self.tls else "http",
                )
            )
        if self.tls is not None:
            self._make_certificates([n.node_id for n in self.nodes], self.tls.clients)
            TEST_TLS["context"] = self.client_context()
        for node in self.nodes:
            node.args = self._args(node)

    # -- TLS ------------------------------------------------------------------------

    def _make_certificates(self, nodes: list[str], clients: tuple[str, ...] = ()) -> None:
        plan = CertificatePlan(self.certs_dir, ("127.0.0.1",), tuple(nodes), clients)
        create_certificates(plan, reuse_ca=True)

    def cert(self, name: str) -> Path:
        return self.certs_dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.certs_dir / f"{name}.key"

    @property
    def ca_file(self) -> Path:
        return self.cert("ca")

    def credentials(self, client: str | None = None) -> Credentials:
        """What a client needs: the cluster's CA, and ``client``'s certificate."""
        return Credentials(
            cafile=str(self.ca_file),
            certfile=None if client is None else str(self.cert(client)),
            keyfile=None if client is None else str(self.key(client)),
        )

    def client_context(self, client: str | None = None) -> ssl.SSLContext:
        context = self.credentials(client).ssl_context()
        assert context is not None
        return context

    def _tls_args(self, node: NodeProcess) -> list[str]:
        if self.tls is None:
            return []
        args = [
            "--tls-cert", str(self.cert(node.node_id)),
            "--tls-key", str(self.key(node.node_id)),
            "--tls-ca", str(self.ca_file),
        ]  # fmt: skip
        if self.tls.client_ca:
            args += ["--tls-client-ca", str(self.ca_file)]
        return args

    def _args(self, node: NodeProcess) -> list[str]:
        args = [
            "--id", node.node_id,
            "--data-dir", str(node.data_dir),
            "--listen", f"127.0.0.1:{node.http_port}",
            "--raft-listen", node.raft_address,
            "--secret-file", str(self.secret_file),
            *self._tls_args(node),
        ]  # fmt: skip
        for peer in self.nodes:
            if peer is not node:
                args += ["--peer", f"{peer.node_id},{peer.raft_address},{peer.url}"]
        return args + self.extra_args

    # -- processes ------------------------------------------------------------------

    def start_node(self, i: int) -> None:
        node = self.nodes[i]
        node.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(node.log_path, "ab")  # noqa: SIM115 (the child keeps it)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        argv = [sys.executable, "-m", "node.cli", "node", *node.args]
        if self.memory_groups:
            argv = self.memory_groups[i].wrap(argv)
        node.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()

    def start(self, timeout: float = 30.0) -> LocalCluster:
        for i in range(self.size):
            self.start_node(i)
        self.wait_ready(timeout)
        return self

    def kill(self, i: int, sig: int = signal.SIGKILL) -> None:
        node = self.nodes[i]
        assert node.proc is not None
        if node.stopped_with_sigstop:
            os.kill(node.proc.pid, signal.SIGCONT)
            node.stopped_with_sigstop = False
        node.proc.send_signal(sig)
        node.proc.wait(timeout=30)

    def pause(self, i: int) -> None:
        node = self.nodes[i]
        assert node.proc is not None
        os.kill(node.proc.pid, signal.SIGSTOP)
        node.stopped_with_sigstop = True

    def resume(self, i: int) -> None:
        node = self.nodes[i]
        assert node.proc is not None
        os.kill(node.proc.pid, signal.SIGCONT)
        node.stopped_with_sigstop = False

    def restart(self, i: int) -> None:
        if self.nodes[i].alive:
            self.kill(i)
        self.start_node(i)

    def stop(self) -> None:
        """Stop every node by PID: SIGTERM, then SIGKILL after 10 s."""
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                if node.stopped_with_sigstop:
                    os.kill(node.proc.pid, signal.SIGCONT)
                node.proc.send_signal(signal.SIGTERM)
        for node in self.nodes:
            if node.proc is not None:
                try:
                    node.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    node.proc.wait()

    def logs(self) -> str:
        return "\n".join(
            f"--- {n.node_id} ---\n{n.log_path.read_text(errors='replace')[-4000:]}"
            for n in self.nodes
            if n.log_path.exists()
        )

    # -- cluster state ----------------------------------------------------------------

    def live(self) -> list[NodeProcess]:
        return [n for n in self.nodes if n.alive and not n.stopped_with_sigstop]

    def wait_ready(self, timeout: float = 30.0, nodes: list[NodeProcess] | None = None) -> None:
        deadline = time.monotonic() + timeout
        targets = self.live() if nodes is None else nodes
        while time.monotonic() < deadline:
            try:
                if all(http("GET", n.url + "/readyz", timeout=2).status == 200 for n in targets):
                    return
            except OSError:
                pass
            time.sleep(0.1)
        reasons = []
        for n in targets:
            try:
                answer = http("GET", n.url + "/readyz", timeout=2)
                reasons.append(f"{n.node_id}: {answer.status} {answer.body[:300]!r}")
            except OSError as exc:
                reasons.append(f"{n.node_id}: no answer ({exc})")
            reasons.append(f"{n.node_id} status: {n.status()}")
        raise TimeoutError(
            f"nodes not ready after {timeout}s\n" + "\n".join(reasons) + f"\n{self.logs()}"
        )

    def leader(self, timeout: float = 20.0) -> NodeProcess:
        """The node every live node agrees leads."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ids = set()
            for node in self.live():
                status = node.status()
                leader = status.get("leader") if status else None
                ids.add(leader["id"] if leader else None)
            if len(ids) == 1 and None not in ids:
                (leader_id,) = ids
                return next(n for n in self.nodes if n.node_id == leader_id)
            time.sleep(0.1)
        raise TimeoutError(f"no agreed leader after {timeout}s\n{self.logs()}")

    def followers(self) -> list[NodeProcess]:
        leader = self.leader()
        return [n for n in self.live() if n is not leader]

    def wait_for_new_leader(self, old: NodeProcess, timeout: float = 20.0) -> NodeProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                leader = self.leader(timeout=max(0.5, deadline - time.monotonic()))
            except TimeoutError:
                break
            if leader is not old:
                return leader
            time.sleep(0.1)
        raise TimeoutError(f"no new leader after {timeout}s\n{self.logs()}")

    # -- membership (added for tests/cluster/test_membership.py) ---------------------

    def join_args(self, node: NodeProcess, join_url: str) -> list[str]:
        """Flags for ``rkv node --join``: no --peer, the cluster at ``join_url`` tells."""
        return [
            "--id", node.node_id,
            "--data-dir", str(node.data_dir),
            "--listen", f"127.0.0.1:{node.http_port}",
            "--raft-listen", node.raft_address,
            "--secret-file", str(self.secret_file),
            *self._tls_args(node),
            "--join", join_url,
            *self.extra_args,
        ]  # fmt: skip

    def add_node(self, node_id: str, join_url: str) -> NodeProcess:
        """Start a new node with ``--join join_url`` (fresh ports and data directory)."""
        http_port, raft_port = free_ports(2)
        data_dir = self.base_dir / node_id
        node = NodeProcess(
            node_id,
            http_port,
            raft_port,
            data_dir,
            [],
            data_dir / "node.log",
            scheme="https" if self.tls else "http",
        )
        if self.tls is not None:
            self._make_certificates([node_id])
        node.args = self.join_args(node, join_url)
        self.nodes.append(node)
        self.start_node(len(self.nodes) - 1)
        return node

    def use_headers(self, headers: dict[str, str]) -> None:
        """Send ``headers`` (credentials) with every node's status() from now on."""
        for node in self.nodes:
            node.headers = dict(headers)

    def node_of(self, node_id: str) -> NodeProcess:
        return next(n for n in self.nodes if n.node_id == node_id)


# -- helpers for cluster tests (added for the failover/consistency/snapshot tests) ----------


def wait_until(
    predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1
) -> Any:
    """Poll ``predicate`` until it returns something truthy and return that; TimeoutError after
    ``timeout`` seconds (a bounded wait, never an assertion about timing)."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def scan_all(
    url: str, prefix: bytes, limit: int = 10_000, query: str = "", timeout: float = 15.0
) -> list[dict[str, Any]]:
    """Every item under ``prefix`` on one node, following ``next`` cursors (base64 keys and
    values decoded to bytes). ``query`` is appended (e.g. ``consistency=stale``). Raises
    AssertionError on a non-200 page."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        qs = f"prefix={urllib.parse.quote(prefix, safe='')}&limit={limit}"
        if cursor is not None:
            qs += f"&start_after={urllib.parse.quote(cursor, safe='')}"
        if query:
            qs += "&" + query
        page = http("GET", f"{url}/v1/kv?{qs}", timeout=timeout)
        assert page.status == 200, (url, qs, page.status, page.body[:500])
        body = page.json()
        for item in body["items"]:
            items.append(
                {
                    **item,
                    "key": base64.b64decode(item["key"]),
                    "value": base64.b64decode(item["value"]),
                }
            )
        cursor = body["next"]
        if cursor is None:
            return items
