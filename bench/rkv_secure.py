"""An rkv cluster with TLS and auth on, for bench/http.py's ``rkv_secure`` system.

Three ``python -m node.cli node`` processes on loopback, each serving HTTPS with its
own certificate from ``rkv certs create`` (members verify each other with the CA),
then a root user is created and auth enabled through the API, and a bearer token is
taken from ``POST /v1/auth/token``: the load sends it with every request, as a client
that authenticated once would. The token lives an hour (``--auth-token-ttl``), longer
than any run.
"""

from __future__ import annotations

import json
import secrets
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.nodes import NODES, Node, make_nodes, start_node
from bench.procs import Processes
from bench.support import LOOPBACK, BenchError, wait_until

START_TIMEOUT_S = 90.0
TOKEN_TTL_S = 3600


@dataclass(frozen=True)
class SecureCluster:
    urls: tuple[str, ...]
    leader_url: str
    cafile: str
    token: str


def request(
    url: str,
    context: ssl.SSLContext,
    method: str = "GET",
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """(status, decoded JSON or None) of one HTTPS request; (0, None) if unreachable."""
    data = None if body is None else json.dumps(body).encode()
    sent = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        sent.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(sent, timeout=5, context=context) as answer:
            raw, status = answer.read(), answer.status
    except urllib.error.HTTPError as error:
        raw, status = error.read(), error.code
    except (OSError, ValueError):
        return 0, None
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, None


def make_certificates(out: Path) -> None:
    ids = ",".join(f"n{i}" for i in range(NODES))
    argv = [sys.executable, "-m", "node.cli", "certs", "create", "--out", str(out)]
    argv += ["--hosts", LOOPBACK, "--nodes", ids]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        raise BenchError(f"rkv certs create failed: {done.stderr.strip()}")


def start(procs: Processes, data: Path) -> SecureCluster:
    scratch = data / "rkv-secure"
    certs = scratch / "certs"
    scratch.mkdir(parents=True)
    make_certificates(certs)
    cafile = str(certs / "ca.crt")
    context = ssl.create_default_context(cafile=cafile)

    def own(node_id: str) -> list[str]:
        return [
            "--tls-cert",
            str(certs / f"{node_id}.crt"),
            "--tls-key",
            str(certs / f"{node_id}.key"),
        ]

    common = ["--tls-ca", cafile, "--auth-token-ttl", str(TOKEN_TTL_S)]
    nodes = make_nodes(scratch, common, scheme="https", own_args=own)
    for node in nodes:
        start_node(procs, node)
    urls = tuple(node.url for node in nodes)

    def exited() -> str | None:
        return next((n.server.exited() for n in nodes if n.server and n.server.exited()), None)

    def ready() -> bool:
        return all(request(f"{url}/readyz", context)[0] == 200 for url in urls)

    wait_until("rkv (TLS): /readyz on every node", ready, START_TIMEOUT_S, exited)
    leader = _leader(nodes, context)
    password = secrets.token_urlsafe(24)
    steps: list[tuple[str, Any]] = [
        ("/v1/auth/users", {"name": "root", "password": password, "roles": ["root"]}),
        ("/v1/auth/enable", None),
    ]
    for path, body in steps:
        status, answer = request(f"{leader}{path}", context, "POST", body)
        if status != 200:
            raise BenchError(f"POST {path} on {leader}: {status} {answer}")
    status, answer = request(
        f"{leader}/v1/auth/token", context, "POST", {"user": "root", "password": password}
    )
    if status != 200 or not isinstance(answer, dict) or "token" not in answer:
        raise BenchError(f"POST /v1/auth/token on {leader}: {status} {answer}")
    return SecureCluster(urls, leader, cafile, str(answer["token"]))


def _leader(nodes: list[Node], context: ssl.SSLContext) -> str:
    found: list[str] = []

    def named() -> bool:
        for node in nodes:
            _, status = request(f"{node.url}/v1/status", context)
            leader = status.get("leader") if isinstance(status, dict) else None
            if isinstance(leader, dict) and leader.get("url"):
                found.append(str(leader["url"]).rstrip("/"))
                return True
        return False

    wait_until("rkv (TLS): a leader", named, 30)
    return found[0]
