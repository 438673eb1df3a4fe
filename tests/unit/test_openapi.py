"""The OpenAPI document names exactly the routes the app serves, and is valid OpenAPI 3.1.

The real app is built (http_api.app.build_app) around a stand-in that only
satisfies the KvApi protocol so the router can be read: no request is served
here. tests/cluster/test_http_api.py checks that a running node serves this
same document at /v1/openapi.json.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from hypothesis import given, settings
from hypothesis import strategies as st
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import OpenAPIV31SpecValidator, validate

from http_api.app import build_app
from http_api.encoding import (
    MAX_VERSION,
    PRODUCER_HEADERS,
    decode_base64url,
    expected_version_from_headers,
)
from http_api.kv_api import SnapshotSource
from http_api.openapi import openapi_document
from node.errors import InvalidRequest
from node.keyspace import DEFAULT_MAX_VALUE_BYTES, member_id_problem
from node.service.kv import Consistency, ScanPage, member_problem
from node.service.lease_types import Fence
from node.service.load_limits import LoadLimits
from node.service.readiness import Readiness
from node.state.alarm_commands import AlarmKind
from node.state.alarms import Alarm
from node.state.commands import Command, Txn
from node.state.producers import ProducerTag
from node.state.results import CommandResult
from node.storage.compaction import CompactionResult
from node.storage.lmdb_store import StoredValue
from node.storage.record import Record

HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


class NoService:
    """Satisfies KvApi for the type checker and build_app; serves nothing."""

    @property
    def max_value_bytes(self) -> int:
        return DEFAULT_MAX_VALUE_BYTES

    @property
    def max_txn_ops(self) -> int:
        return 1024

    def check_key(self, key: bytes) -> None:
        raise NotImplementedError

    def check_value(self, value: bytes) -> None:
        raise NotImplementedError

    async def put(
        self,
        key: bytes,
        value: bytes,
        expected_version: int | None = None,
        producer: ProducerTag | None = None,
        *,
        lease: int | None = None,
        ttl: int | None = None,
        fence: Fence | None = None,
    ) -> CommandResult:
        raise NotImplementedError

    async def delete(
        self,
        key: bytes,
        expected_version: int | None = None,
        producer: ProducerTag | None = None,
        *,
        fence: Fence | None = None,
    ) -> CommandResult:
        raise NotImplementedError

    async def incr(
        self,
        key: bytes,
        by: int,
        producer: ProducerTag | None = None,
        *,
        fence: Fence | None = None,
    ) -> CommandResult:
        raise NotImplementedError

    async def append(
        self,
        key: bytes,
        suffix: bytes,
        producer: ProducerTag | None = None,
        *,
        fence: Fence | None = None,
    ) -> CommandResult:
        raise NotImplementedError

    @property
    def load_limits(self) -> LoadLimits:
        return LoadLimits()

    async def load(self, keys: list[bytes], values: list[bytes]) -> CommandResult:
        raise NotImplementedError

    async def txn(
        self, txn: Txn, producer: ProducerTag | None = None, *, fence: Fence | None = None
    ) -> CommandResult:
        raise NotImplementedError

    async def init_producer(self, transactional_id: str | None) -> CommandResult:
        raise NotImplementedError

    async def execute(self, command: Command) -> CommandResult:
        raise NotImplementedError

    async def get(
        self,
        key: bytes,
        consistency: Consistency = Consistency.LINEARIZABLE,
        min_version: int | None = None,
    ) -> StoredValue:
        raise NotImplementedError

    async def scan(
        self,
        prefix: bytes,
        start_after: bytes | None = None,
        limit: int = 100,
        consistency: Consistency = Consistency.LINEARIZABLE,
        min_version: int | None = None,
    ) -> ScanPage:
        raise NotImplementedError

    async def compact(self, force: bool = True) -> CompactionResult:
        raise AssertionError("not served")

    def alarms(self) -> tuple[Alarm, ...]:
        raise AssertionError("not served")

    async def raise_alarm(self, member: str, kind: AlarmKind, reason: str) -> tuple[Alarm, ...]:
        raise AssertionError("not served")

    async def disarm_alarms(self, member: str | None, kind: AlarmKind) -> tuple[Alarm, ...]:
        raise AssertionError("not served")

    @property
    def log_head(self) -> int:
        raise AssertionError("not served")

    def log_chunks(
        self, from_offset: int, to_offset: int | None, limit: int | None, chunk_bytes: int
    ) -> Iterator[bytes]:
        raise AssertionError("not served")

    @property
    def applied_offset(self) -> int:
        raise AssertionError("not served")

    @property
    def watch_keepalive(self) -> float:
        raise AssertionError("not served")

    @property
    def stall_timeout(self) -> float:
        raise AssertionError("not served")

    def unreadable_reason(self) -> str | None:
        raise AssertionError("not served")

    def changes(
        self,
        prefix: bytes,
        from_offset: int,
        to_offset: int,
        *,
        max_records: int = 1000,
        max_bytes: int = 1024 * 1024,
    ) -> tuple[list[Record], int]:
        raise AssertionError("not served")

    def open_snapshot_stream(
        self, transfer_id: str | None = None, after: bytes | None = None
    ) -> SnapshotSource:
        raise AssertionError("not served")

    def end_snapshot_stream(self, stream: Any) -> None:
        raise AssertionError("not served")

    def release_snapshot(self, transfer_id: str) -> bool:
        raise AssertionError("not served")

    def status(self) -> dict[str, Any]:
        raise NotImplementedError

    def ready(self) -> tuple[bool, str]:
        raise NotImplementedError

    def readiness(self, exclude: Iterable[str] = ()) -> Readiness:
        raise NotImplementedError

    def members(self) -> list[dict[str, str]]:
        raise AssertionError("not served")

    def checkpoints(self) -> list[tuple[str, bytes, int]]:
        raise AssertionError("not served")

    def complete_log_range(self, from_offset: int) -> AbstractContextManager[None]:
        raise AssertionError("not served")

    async def add_member(self, node_id: str, raft_address: str, url: str) -> dict[str, Any]:
        raise AssertionError("not served")

    async def remove_member(self, node_id: str) -> dict[str, Any]:
        raise AssertionError("not served")

    async def set_member_url(self, node_id: str, url: str) -> dict[str, Any]:
        raise AssertionError("not served")


@pytest.fixture(scope="module")
def app() -> web.Application:
    return build_app(NoService())


def template(resource: web.AbstractResource | None) -> str:
    """aiohttp's path with any "{name:regex}" written as OpenAPI's "{name}"."""
    assert resource is not None
    formatter = resource.get_info().get("formatter") or resource.get_info()["path"]
    return re.sub(r"\{([A-Za-z_][A-Za-z0-9_]*):[^{}]*\}", r"{\1}", str(formatter))


def served_routes(app: web.Application) -> set[tuple[str, str]]:
    return {(route.method, template(route.resource)) for route in app.router.routes()}


def documented_routes(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


async def nothing(request: web.Request) -> web.Response:
    raise NotImplementedError


def test_the_template_mapping() -> None:
    router = web.Application().router
    plain = router.add_route("GET", "/a/b", nothing)
    keyed = router.add_route("PUT", r"/v1/kv/{key:[\s\S]*}", nothing)
    dotted = router.add_route("GET", "/x/{key:.+}/{n}", nothing)
    assert template(plain.resource) == "/a/b"
    assert template(keyed.resource) == "/v1/kv/{key}"
    assert template(dotted.resource) == "/x/{key}/{n}"


def test_every_served_route_is_documented_and_nothing_else(app: web.Application) -> None:
    served = served_routes(app)
    documented = documented_routes(openapi_document())
    assert ("PUT", "/v1/kv/{key}") in served  # the regex was mapped
    assert ("HEAD", "/v1/status") not in served  # no implicit HEAD routes to document
    assert served - documented == set(), "served but not in http_api/openapi*.py"
    assert documented - served == set(), "documented but not served"


def test_the_document_is_valid_openapi_3_1() -> None:
    document = openapi_document()
    assert document["openapi"].startswith("3.1.")
    validate(document, cls=OpenAPIV31SpecValidator)


def test_the_document_is_plain_json() -> None:
    document = openapi_document()
    assert json.loads(json.dumps(document)) == document


def test_path_parameters_match_the_templates() -> None:
    for path, item in openapi_document()["paths"].items():
        names = set(re.findall(r"\{([^{}]+)\}", path))
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
            assert declared == names, (method, path)


def test_every_error_response_is_the_error_schema() -> None:
    document = openapi_document()
    assert set(document["components"]["schemas"]["Error"]["required"]) == {"code", "message"}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            assert operation["responses"], (method, path)
            for status, response in operation["responses"].items():
                assert response["description"], (method, path, status)
                if int(status) < 400 or path == "/readyz":
                    continue
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/Error"}, (method, path, status)


def test_every_ref_resolves() -> None:
    document = openapi_document()
    refs = set(re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', json.dumps(document)))
    assert refs
    assert refs <= set(document["components"]["schemas"])


def test_the_producer_headers_are_documented_on_every_write() -> None:
    paths = openapi_document()["paths"]
    writes = {("post", "/v1/txn")} | {(m, "/v1/kv/{key}") for m in ("put", "delete", "post")}
    for method, path in writes:
        operation = paths[path][method]
        headers = {p["name"] for p in operation["parameters"] if p["in"] == "header"}
        assert set(PRODUCER_HEADERS) <= headers, (method, path)
        assert "Rkv-Duplicate" in operation["responses"]["200"]["headers"], (method, path)
        assert "409" in operation["responses"], (method, path)


def test_the_fencing_header_is_documented_on_every_write() -> None:
    paths = openapi_document()["paths"]
    writes = {("post", "/v1/txn")} | {(m, "/v1/kv/{key}") for m in ("put", "delete", "post")}
    for method, path in writes:
        operation = paths[path][method]
        headers = {p["name"] for p in operation["parameters"] if p["in"] == "header"}
        assert "Rkv-Fencing" in headers, (method, path)
    put = {p["name"] for p in paths["/v1/kv/{key}"]["put"]["parameters"] if p["in"] == "query"}
    assert {"lease", "ttl"} <= put


# -- the document and the server agree (findings of tests/cluster/test_fuzz_api.py) ----


def component_validator(name: str) -> OAS31Validator:
    document = openapi_document()
    schema = {"$ref": f"#/components/schemas/{name}", "components": document["components"]}
    return OAS31Validator(schema)


@pytest.mark.parametrize(
    ("name", "answer"),
    [
        ("IncrResult", {"key": "MA==", "value": 5, "version": 3}),
        ("AppendResult", {"key": "MA==", "size": 5, "version": 3}),
        # The remembered answer to another kind of write under the same producer sequence.
        ("IncrResult", {"key": "MA==", "value": None, "version": 3}),
        ("AppendResult", {"key": "MA==", "size": None, "version": 3}),
    ],
)
def test_read_modify_write_answers_match_their_schemas(name: str, answer: Any) -> None:
    component_validator(name).validate(answer)


def pattern_of(schema: dict[str, Any]) -> re.Pattern[str]:
    return re.compile(schema["pattern"])


def parameter(path: str, method: str, name: str) -> dict[str, Any]:
    operation = openapi_document()["paths"][path][method]
    found: dict[str, Any] = next(p for p in operation["parameters"] if p["name"] == name)
    return found


@settings(max_examples=300, derandomize=True)
@given(st.text(alphabet='0123456789W/" x*', max_size=24))
def test_if_match_is_accepted_exactly_as_its_pattern_says(text: str) -> None:
    pattern = pattern_of(parameter("/v1/kv/{key}", "put", "If-Match")["schema"])
    request = make_mocked_request("PUT", "/v1/kv/k", headers={"If-Match": text})
    try:
        version = expected_version_from_headers(request)
    except InvalidRequest:
        version = None
    if pattern.fullmatch(text.strip()) is None:
        assert version is None, text
    else:  # within the pattern, only a number past 2**63 - 1 is refused
        digits = int(text.strip().removeprefix("W/").strip('"'))
        assert version == (digits if digits <= MAX_VERSION else None), text


@settings(max_examples=300, derandomize=True)
@given(st.text(alphabet="AZaz09_-+/=. ", max_size=14))
def test_cursors_and_resume_keys_are_accepted_exactly_as_their_pattern_says(text: str) -> None:
    pattern = pattern_of(parameter("/v1/kv", "get", "start_after")["schema"])
    assert pattern_of(parameter("/v1/snapshot", "get", "after")["schema"]) == pattern
    decoded = decode_base64url(text.encode())
    assert (decoded is not None) == (pattern.fullmatch(text) is not None), text


MEMBER_FIELDS = st.fixed_dictionaries(
    {  # half of each field well-formed, half probably not
        "id": st.from_regex(r"[A-Za-z0-9_.-]{1,4}", fullmatch=True)
        | st.text(alphabet="n./\\ é\x00", max_size=4),
        "raft_address": st.from_regex(r"[a-z0-9.\[\]:]{1,4}:[0-9]{1,6}", fullmatch=True)
        | st.from_regex(r"[a-z :]{0,3}:[0-9\u0663 ]{0,3}", fullmatch=True),
        "url": st.from_regex(r"https?://[a-z0-9:/]{1,6}", fullmatch=True)
        | st.from_regex(r"(https?|ftp)://[a-z ,/]{0,4}", fullmatch=True),
    }
)


@settings(max_examples=300, derandomize=True)
@given(MEMBER_FIELDS)
def test_members_are_accepted_exactly_as_the_member_schema_says(member: dict[str, str]) -> None:
    by_schema = component_validator("Member").is_valid(member)
    fields = (member["id"], member["raft_address"], member["url"])
    # What POST /v1/cluster/members checks (routes_node.py, then the service).
    by_server = member_id_problem(member["id"]) is None and member_problem(*fields) is None
    assert by_schema == by_server, member
