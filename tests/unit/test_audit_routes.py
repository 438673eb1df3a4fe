"""POST /v1/audit, GET /v1/audit/{id} and its files, served by the real app around a
real AuditService on real storage (raft replaced by a stand-in that applies each
proposal at once); and the OpenAPI document still names exactly the routes served.

tests/cluster/test_audit_snapshot.py covers the same against real node processes.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
import pytest_asyncio
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from openapi_spec_validator import OpenAPIV31SpecValidator, validate

from http_api.app import build_app
from http_api.openapi import openapi_document
from node.audit.jobs import AuditExporter
from node.service.audit import AuditService
from node.service.kv import ConsensusLog
from node.state.commands import Batch, Command, Put, encode_entry
from node.state.results import CommandResult
from node.storage.recovery import NodeStorage
from tests.support.state import machine_of
from tests.unit.test_openapi import NoService, documented_routes, served_routes


class StandInRaft:
    """A leader (or not) that applies each proposal at once."""

    def __init__(self, storage: NodeStorage) -> None:
        self._storage = storage
        self._lock = threading.Lock()
        self.leader = True

    def is_leader(self) -> bool:
        return self.leader

    def holds_lease(self) -> bool:
        return self.leader

    def leader_http_url(self) -> str | None:
        return "http://leader.example:8001"

    async def propose(self, command: Command) -> CommandResult:
        with self._lock:
            index = self._storage.store.applied_index + 1
            (result,) = machine_of(self._storage).apply(
                index, encode_entry(Batch((command,), 1000))
            )
        return result


@pytest_asyncio.fixture
async def served(
    storage: NodeStorage, tmp_path: Path
) -> AsyncIterator[tuple[TestServer, StandInRaft]]:
    raft = StandInRaft(storage)
    await raft.propose(Put(b"k1", b"v1"))
    await raft.propose(Put(b"k2", b"v2"))
    exporter = AuditExporter(tmp_path / "audits", "n1", storage.commit_log)
    machine_of(storage).audit_hook = exporter.hook
    audits = AuditService(cast(ConsensusLog, raft), storage.store, exporter)
    server = TestServer(build_app(NoService(), audits))
    await server.start_server()
    try:
        yield server, raft
    finally:
        await server.close()
        exporter.close()


async def call(
    server: TestServer, method: str, path: str, body: bytes | None = None
) -> tuple[int, Any, bytes, dict[str, str]]:
    async with (
        ClientSession() as session,
        session.request(method, server.make_url(path), data=body, allow_redirects=False) as r,
    ):
        raw = await r.read()
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        return r.status, answer, raw, dict(r.headers)


async def wait_done(server: TestServer, audit_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while True:
        status, answer, _, _ = await call(server, "GET", f"/v1/audit/{audit_id}")
        if status != 202:
            assert status == 200, answer
            return cast(dict[str, Any], answer)
        assert answer["state"] == "running" and "records" in answer["progress"]
        assert time.monotonic() < deadline


@pytest.mark.asyncio
async def test_an_audit_is_started_exported_and_downloaded(
    served: tuple[TestServer, StandInRaft], tmp_path: Path
) -> None:
    server, _ = served
    status, started, _, _ = await call(
        server, "POST", "/v1/audit", json.dumps({"audit_id": "a1", "buckets": 2}).encode()
    )
    assert status == 200, started
    assert started["audit_id"] == "a1" and started["raft_index"] == 3
    assert [base64.b64decode(p) for p in started["split_points"]] == [b"k2"]
    manifest = await wait_done(server, "a1")
    assert manifest["raft_index"] == 3 and manifest["bucket_counts"] == [1, 1]
    directory = tmp_path / "audits" / "a1" / "n1"
    for name in [*manifest["files"]["state"], manifest["files"]["log"], "manifest.json"]:
        status, _, raw, headers = await call(server, "GET", f"/v1/audit/a1/files/{name}")
        assert status == 200 and raw == (directory / name).read_bytes(), name
        expected = "application/json" if name.endswith(".json") else "application/octet-stream"
        assert headers["Content-Type"] == expected

    # Without a body: a new id and 16 buckets at most.
    status, second, _, _ = await call(server, "POST", "/v1/audit")
    assert status == 200 and second["audit_id"] != "a1" and second["raft_index"] == 4
    assert (await wait_done(server, second["audit_id"]))["buckets"] == 2  # two keys
    status, again, _, _ = await call(server, "POST", "/v1/audit", b'{"audit_id": "a1"}')
    assert (status, again["code"]) == (409, "audit_exists")
    # JSON Schema counts 2.0 as an integer, and so does the node.
    status, third, _, _ = await call(server, "POST", "/v1/audit", b'{"buckets": 2.0}')
    assert status == 200, third
    assert (await wait_done(server, third["audit_id"]))["buckets"] == 2


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"not json", "invalid_request"),
        (b"[1]", "invalid_request"),
        (b'{"bucket": 2}', "invalid_request"),
        (b'{"audit_id": 7}', "invalid_audit_id"),
        (b'{"audit_id": ".."}', "invalid_audit_id"),
        (b'{"audit_id": "a/b"}', "invalid_audit_id"),
        (b'{"audit_id": ""}', "invalid_audit_id"),
        (b'{"audit_id": null}', "invalid_audit_id"),
        (b'{"buckets": null}', "invalid_buckets"),
        (b'{"buckets": 2.5}', "invalid_buckets"),
        (b'{"buckets": 0}', "invalid_buckets"),
        (b'{"buckets": 1025}', "invalid_buckets"),
        (b'{"buckets": true}', "invalid_buckets"),
        (b'{"buckets": "4"}', "invalid_buckets"),
    ],
)
async def test_bad_input_is_a_400(
    served: tuple[TestServer, StandInRaft], body: bytes, code: str
) -> None:
    server, _ = served
    status, answer, _, _ = await call(server, "POST", "/v1/audit", body)
    assert (status, answer["code"]) == (400, code), answer
    assert answer["message"]


@pytest.mark.asyncio
async def test_unknown_audits_and_files(served: tuple[TestServer, StandInRaft]) -> None:
    server, _ = served
    status, answer, _, _ = await call(server, "GET", "/v1/audit/nope")
    assert (status, answer["code"]) == (404, "audit_not_found")
    status, answer, _, _ = await call(server, "GET", "/v1/audit/..")
    assert status in (400, 404)
    status, answer, _, _ = await call(server, "GET", "/v1/audit/bad%20id")
    assert (status, answer["code"]) == (400, "invalid_audit_id")
    await call(server, "POST", "/v1/audit", b'{"audit_id": "f1"}')
    await wait_done(server, "f1")
    for name in ("nothing.rkvsnap", "..%2F..%2Fmanifest.json", "error.json"):
        status, answer, _, _ = await call(server, "GET", f"/v1/audit/f1/files/{name}")
        assert (status, answer["code"]) == (404, "audit_file_not_found"), name
    status, answer, _, _ = await call(server, "GET", "/v1/audit/nope/files/manifest.json")
    assert (status, answer["code"]) == (404, "audit_not_found")


@pytest.mark.asyncio
async def test_a_failed_export_is_a_500(
    served: tuple[TestServer, StandInRaft], tmp_path: Path
) -> None:
    server, _ = served
    (tmp_path / "audits" / "cut-short" / "n1").mkdir(parents=True)
    for path in ("/v1/audit/cut-short", "/v1/audit/cut-short/files/manifest.json"):
        status, answer, _, _ = await call(server, "GET", path)
        assert (status, answer["code"]) == (500, "audit_export_failed"), path
        assert "did not finish" in answer["message"]


@pytest.mark.asyncio
async def test_a_follower_sends_the_audit_to_the_leader(
    served: tuple[TestServer, StandInRaft],
) -> None:
    server, raft = served
    raft.leader = False
    status, answer, _, headers = await call(server, "POST", "/v1/audit", b"{}")
    assert status == 307 and headers["Location"] == "http://leader.example:8001/v1/audit"
    assert answer["leader_url"] == "http://leader.example:8001"


@pytest.mark.asyncio
async def test_an_app_without_audits_answers_503() -> None:
    server = TestServer(build_app(NoService()))
    await server.start_server()
    try:
        for method, path in (("POST", "/v1/audit"), ("GET", "/v1/audit/x")):
            status, answer, _, _ = await call(server, method, path)
            assert (status, answer["code"]) == (503, "audits_unavailable")
    finally:
        await server.close()


def test_the_audit_routes_are_documented_and_the_document_is_valid() -> None:
    document = openapi_document()
    served = served_routes(build_app(NoService()))
    assert {("POST", "/v1/audit"), ("GET", "/v1/audit/{id}")} <= served
    assert ("GET", "/v1/audit/{id}/files/{name}") in served
    assert served == documented_routes(document)
    validate(document, cls=OpenAPIV31SpecValidator)
    for path, item in document["paths"].items():
        if not path.startswith("/v1/audit"):
            continue
        for operation in item.values():
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Error"}
