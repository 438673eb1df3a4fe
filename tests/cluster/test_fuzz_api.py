"""schemathesis, the OpenAPI fuzzer, against the leader of a live 3-node cluster.

It reads the document the node serves (GET /v1/openapi.json) and sends what it
makes of it: examples that follow the document, requests that break it on
purpose, methods the paths do not have, and chains of calls whose answers feed
the next request. Every check it has must hold: no 5xx, every status, content
type, header and body as documented, every request the document forbids refused
with a 4xx and every one it allows accepted (tests/cluster/fuzz_api.toml says
where and why a check or an operation is left out, and fixes the seed and the
number of examples so that a run is the same run each time).

By hand, with a cluster up (``rkv up``), from the repository's root (the
configuration names its hooks module, tests/cluster/fuzz_hooks.py)::

    PYTHONPATH=. schemathesis --config-file tests/cluster/fuzz_api.toml \
        run http://127.0.0.1:8001/v1/openapi.json
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from http_api.openapi import openapi_document
from tests.support.cluster import REPO, LocalCluster

CONFIG = Path(__file__).with_name("fuzz_api.toml")
HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}
# Well under the test's own timeout: a run that hangs fails with its output so far.
RUN_SECONDS = 240


def left_out() -> set[str]:
    """Operations the configuration disables, as "METHOD /path" (an entry names one
    operation, or a path: every method of it)."""
    disabled = [
        op for op in tomllib.loads(CONFIG.read_text())["operations"] if op.get("enabled") is False
    ]
    names = {op["include-name"] for op in disabled if "include-name" in op}
    paths = {op["include-path"] for op in disabled if "include-path" in op}
    assert len(names) + len(paths) == len(disabled), "one name or path per disabled entry"
    return {
        f"{method.upper()} {path}"
        for path, item in openapi_document()["paths"].items()
        for method in item
        if path in paths or f"{method.upper()} {path}" in names
    }


def documented() -> set[str]:
    return {
        f"{method.upper()} {path}"
        for path, item in openapi_document()["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


def operations_in_report(junit: Path) -> set[str]:
    return {case.attrib["name"] for case in ElementTree.parse(junit).iter("testcase")}


def test_schemathesis_finds_nothing(cluster: LocalCluster, tmp_path: Path) -> None:
    leader = cluster.leader()
    junit = tmp_path / "junit.xml"
    argv = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG), "--no-color",
        "run", f"{leader.url}/v1/openapi.json",
        "--report", "junit", "--report-junit-path", str(junit),
    ]  # fmt: skip
    try:
        run = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=RUN_SECONDS,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO)},  # for fuzz_api.toml's hooks
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        raise AssertionError(f"schemathesis ran past {RUN_SECONDS}s:\n{output[-20000:]}") from None
    assert run.returncode == 0, run.stdout[-30000:] + run.stderr[-3000:]

    # It tested every operation the configuration leaves in (a document the fuzzer
    # could not read would test none, and pass) but the document itself, and chains.
    expected = documented() - left_out() - {"GET /v1/openapi.json"}
    assert len(expected) >= 15
    assert operations_in_report(junit) == expected | {"Stateful tests"}

    # And the cluster went through it whole: one leader, three members, every node
    # ready, and no request left a traceback in a node's log.
    cluster.wait_ready(timeout=30)
    assert cluster.leader() is leader
    members = leader.status()
    assert members is not None and len(members["members"]) == 3
    for node in cluster.nodes:
        log = node.log_path.read_text(errors="replace")
        assert "Traceback" not in log, log[-5000:]
