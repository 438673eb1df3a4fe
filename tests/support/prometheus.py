"""A real Prometheus server (Debian's ``prometheus`` package) for tests.

:func:`run_prometheus` writes a configuration that scrapes the given targets every
second and evaluates the given rule files every second, starts ``prometheus`` bound to
127.0.0.1 on a free port with its storage in a temporary directory, waits until it is
ready and stops it by PID (SIGTERM, then SIGKILL) when the block ends. Without the
binary the test FAILS: `make test` installs the package, so a missing one is a broken
set-up, not a reason to skip. :func:`promtool` is the same for ``promtool``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cluster import free_ports, http, wait_until

START_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0


def _binary(name: str) -> str:
    found = shutil.which(name) or f"/usr/bin/{name}"
    if not Path(found).is_file():
        pytest.fail(
            f"{name} not found: install Debian's prometheus package (`make test` does)",
            pytrace=False,
        )
    return found


def promtool(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run ``promtool`` with ``args`` (and ``stdin``); its exit status is the caller's to check."""
    return subprocess.run(
        [_binary("promtool"), *args], input=stdin, capture_output=True, check=False, timeout=60
    )


@dataclass(frozen=True)
class Prometheus:
    url: str
    log_path: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The result vector of an instant query (``/api/v1/query``)."""
        body = self.api(f"/api/v1/query?query={urllib.parse.quote(expr)}")
        assert body["data"]["resultType"] == "vector", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def scalar(self, expr: str) -> float | None:
        """The value of a query that gives one series (None when it gives none)."""
        result = self.query(expr)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def api(self, path: str) -> dict[str, Any]:
        response = http("GET", self.url + path, headers={})
        assert response.status == 200, (path, response.status, response.body[:500])
        body: dict[str, Any] = json.loads(response.body)
        assert body["status"] == "success", body
        return body


@contextmanager
def run_prometheus(
    directory: Path, targets: list[str], rule_files: tuple[Path, ...] = ()
) -> Iterator[Prometheus]:
    """Prometheus scraping ``targets`` (host:port of /metrics endpoints) every second."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [{"job_name": "rkv", "static_configs": [{"targets": targets}]}],
    }
    config_path = directory / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    (port,) = free_ports(1)
    log_path = directory / "prometheus.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                _binary("prometheus"),
                f"--config.file={config_path}",
                f"--storage.tsdb.path={directory / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", log_path)
    try:

        def ready() -> bool:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            try:
                return http("GET", server.url + "/-/ready", headers={}, timeout=2).status == 200
            except OSError:
                return False

        wait_until(ready, START_TIMEOUT, "prometheus to be ready", interval=0.2)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)
