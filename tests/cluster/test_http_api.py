"""The REST API against one real 3-node cluster: every error path and the happy ones.

Each error test asserts the status, the stable JSON ``code`` and a non-empty
``message``. One cluster serves the whole module (tests use unique keys), so
nothing here may break it: the two requests known to wedge a node run on
throwaway clusters of their own.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from http.client import HTTPConnection
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

from http_api.openapi import openapi_document
from node.keyspace import MAX_KEY_BYTES, RESERVED_PREFIX
from tests.support.cluster import LocalCluster, NodeProcess, Response, http

MIB = 1024 * 1024
RUN = os.urandom(4).hex()


@dataclass
class Api:
    cluster: LocalCluster
    leader: NodeProcess

    @property
    def follower(self) -> NodeProcess:
        return next(n for n in self.cluster.nodes if n is not self.leader)

    def call(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        node: NodeProcess | None = None,
    ) -> Response:
        return http(method, (node or self.leader).url + path, body, headers)

    def put(self, key: bytes, value: bytes, headers: dict[str, str] | None = None) -> int:
        response = self.call("PUT", kv_path(key), value, headers)
        assert response.status == 200, response.body
        version: int = response.json()["version"]
        return version

    def txn(self, body: Any, query: str = "") -> Response:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.call("POST", "/v1/txn" + query, data, {"Content-Type": "application/json"})


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    cluster = LocalCluster(tmp_path_factory.mktemp("http_api") / "cluster")
    try:
        cluster.start()
        yield Api(cluster, cluster.leader())
    finally:
        cluster.stop()


_counter = iter(range(1, 1_000_000))


def new_key(name: str = "k") -> bytes:
    """A key no other test (or earlier run) uses."""
    return f"t/{RUN}/{name}/{next(_counter)}".encode()


def kv_path(key: bytes, query: str = "") -> str:
    return "/v1/kv/" + quote(key, safe="") + (f"?{query}" if query else "")


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def header(response: Response, name: str) -> str | None:
    return next((v for k, v in response.headers.items() if k.lower() == name.lower()), None)


def assert_error(response: Response, status: int, code: str) -> dict[str, Any]:
    assert response.status == status, (response.status, response.body[:500])
    content_type = header(response, "Content-Type") or ""
    assert content_type.startswith("application/json"), (content_type, response.body[:200])
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert isinstance(body["message"], str), body
    assert body["message"].strip(), body
    return body


def raw_request(
    node: NodeProcess,
    method: str,
    path: str,
    body: bytes | Iterable[bytes],
    headers: dict[str, str] | None = None,
) -> Response:
    """http.client directly: an iterable body goes out chunked, with no Content-Length."""
    parsed = urlsplit(node.url)
    assert parsed.hostname is not None
    connection = HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return Response(response.status, response.read(), dict(response.getheaders()))
    finally:
        connection.close()


def chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    while total > 0:
        yield b"v" * min(size, total)
        total -= size


# -- keys -----------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["PUT", "GET", "DELETE"])
def test_empty_key_is_invalid_key(api: Api, method: str) -> None:
    response = api.call(method, "/v1/kv/", b"x" if method == "PUT" else None)
    assert_error(response, 400, "invalid_key")


@pytest.mark.parametrize("method", ["PUT", "GET", "DELETE"])
def test_key_of_4097_bytes_is_invalid_key(api: Api, method: str) -> None:
    key = b"k" * (MAX_KEY_BYTES + 1)
    response = api.call(method, kv_path(key), b"x" if method == "PUT" else None)
    assert_error(response, 400, "invalid_key")


def test_key_of_4097_percent_encoded_bytes_is_invalid_key_json(api: Api) -> None:
    key = b"\xff" * (MAX_KEY_BYTES + 1)
    assert_error(api.call("PUT", kv_path(key), b"x"), 400, "invalid_key")


@pytest.mark.parametrize("method", ["PUT", "GET", "DELETE"])
def test_reserved_prefix_is_refused(api: Api, method: str) -> None:
    response = api.call(method, kv_path(RESERVED_PREFIX + b"x"), b"x" if method == "PUT" else None)
    assert_error(response, 400, "reserved_key")


def test_scan_never_shows_the_reserved_prefix(api: Api) -> None:
    response = api.call("GET", "/v1/kv?prefix=" + quote(RESERVED_PREFIX, safe=""))
    assert response.status == 200, response.body
    assert response.json() == {"items": [], "next": None}


ODD_KEYS = [
    b"a/b/c",
    b"with space",
    "ünï©ødé/ключ/鍵".encode(),
    b"\xff\x00",
    b"\x00\x01binary\xfe",
    b"line\nbreak\r\ttab",
    b"100%25%",
    b"?#&=+;",
    b"..",
    b"/leading//double",
    b"~!*'()",
]


@pytest.mark.parametrize("suffix", ODD_KEYS, ids=lambda k: repr(k)[2:-1])
def test_odd_keys_round_trip_exactly(api: Api, suffix: bytes) -> None:
    for key in (suffix + RUN.encode(), new_key() + b"/" + suffix):
        value = b"value of " + key + b"\x00\xff"
        version = api.put(key, value)
        got = api.call("GET", kv_path(key))
        assert got.status == 200, got.body
        assert got.body == value
        assert header(got, "Rkv-Version") == str(version)
        scanned = api.call("GET", "/v1/kv?prefix=" + quote(key, safe="") + "&limit=10")
        assert scanned.status == 200, scanned.body
        assert scanned.json()["items"] == [
            {"key": b64(key), "value": b64(value), "version": version, "create_version": version}
        ]
        deleted = api.call("DELETE", kv_path(key))
        assert deleted.status == 200, deleted.body
        assert_error(api.call("GET", kv_path(key)), 404, "not_found")


def test_slashes_in_a_key_may_be_left_unencoded(api: Api) -> None:
    key = new_key() + b"/x/y"
    api.put(key, b"slashes")
    got = api.call("GET", "/v1/kv/" + quote(key, safe="/"))
    assert (got.status, got.body) == (200, b"slashes")


def test_key_of_511_bytes_works(api: Api) -> None:
    key = new_key()
    key += b"k" * (511 - len(key))
    api.put(key, b"long key")
    got = api.call("GET", kv_path(key))
    assert (got.status, got.body) == (200, b"long key")


@pytest.mark.timeout(120)
def test_key_of_exactly_4096_bytes_is_accepted(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "cluster")
    try:
        cluster.start()
        leader = cluster.leader()
        key = b"k" * MAX_KEY_BYTES
        response = http("PUT", leader.url + kv_path(key), b"max key", timeout=30)
        assert response.status == 200, response.body
        got = http("GET", leader.url + kv_path(key))
        assert (got.status, got.body) == (200, b"max key")
    finally:
        cluster.stop()


# -- values ---------------------------------------------------------------------------


def test_value_of_exactly_1_mib_is_accepted(api: Api) -> None:
    key, value = new_key(), os.urandom(MIB)
    api.put(key, value)
    got = api.call("GET", kv_path(key))
    assert got.status == 200
    assert got.body == value


def test_value_of_1_mib_plus_1_with_content_length_is_413(api: Api) -> None:
    key = new_key()
    response = raw_request(
        api.leader, "PUT", kv_path(key), b"v" * (MIB + 1), {"Content-Length": str(MIB + 1)}
    )
    assert_error(response, 413, "payload_too_large")
    assert_error(api.call("GET", kv_path(key)), 404, "not_found")


def test_value_of_1_mib_plus_1_chunked_is_413(api: Api) -> None:
    key = new_key()
    response = raw_request(api.leader, "PUT", kv_path(key), chunks(MIB + 1))
    assert_error(response, 413, "payload_too_large")
    assert_error(api.call("GET", kv_path(key)), 404, "not_found")


def test_value_of_exactly_1_mib_chunked_is_accepted(api: Api) -> None:
    key = new_key()
    response = raw_request(api.leader, "PUT", kv_path(key), chunks(MIB))
    assert response.status == 200, response.body
    got = api.call("GET", kv_path(key))
    assert got.body == b"v" * MIB


def test_empty_value_is_a_value(api: Api) -> None:
    key = new_key()
    api.put(key, b"")
    got = api.call("GET", kv_path(key))
    assert (got.status, got.body) == (200, b"")


def test_body_over_the_request_limit_is_413_json(api: Api) -> None:
    # Beyond the app's client_max_size (16 MiB) aiohttp itself refuses the body.
    response = raw_request(api.leader, "POST", "/v1/txn", chunks(17 * MIB))
    assert_error(response, 413, "payload_too_large")


# -- put / delete preconditions ---------------------------------------------------------


def test_put_answers_key_and_version(api: Api) -> None:
    key = new_key()
    response = api.call("PUT", kv_path(key), b"v1")
    assert response.status == 200
    body = response.json()
    assert body["key"] == b64(key)
    assert isinstance(body["version"], int) and body["version"] > 0
    utf8 = api.call("PUT", kv_path(key, "encoding=utf-8"), b"v2")
    assert utf8.json() == {"key": key.decode(), "version": utf8.json()["version"]}
    assert utf8.json()["version"] > body["version"]


@pytest.mark.parametrize(
    "if_match",
    [
        "abc",
        '"x"',
        '"-1"',
        '"1.5"',
        "*",
        '"1", "2"',
        '"\xc2\xb2"',  # "²" in UTF-8: str.isdigit() says yes, int() says no
        f'"{2**64}"',  # cannot even be encoded into a raft entry
        '"' + "9" * 5000 + '"',
        # The document's pattern: one optional quote each side, W/ only in front.
        "",
        '""5""',
        '"5"W/',
        "W/W/5",
    ],
)
def test_if_match_bad_format_is_400(api: Api, if_match: str) -> None:
    key = new_key()
    api.put(key, b"v")
    response = api.call("PUT", kv_path(key), b"new", {"If-Match": if_match})
    assert_error(response, 400, "invalid_request")
    assert_error(api.call("DELETE", kv_path(key), headers={"If-Match": if_match}), 400,
                 "invalid_request")  # fmt: skip
    assert api.call("GET", kv_path(key)).body == b"v"


def test_if_match_and_if_none_match_together_is_400(api: Api) -> None:
    key = new_key()
    response = api.call("PUT", kv_path(key), b"v", {"If-Match": '"1"', "If-None-Match": "*"})
    assert_error(response, 400, "invalid_request")
    assert_error(api.call("GET", kv_path(key)), 404, "not_found")


@pytest.mark.parametrize("value", ['"3"', "W/*", "**", "x", ""])
def test_if_none_match_other_than_star_is_400(api: Api, value: str) -> None:
    key = new_key()
    response = api.call("PUT", kv_path(key), b"v", {"If-None-Match": value})
    assert_error(response, 400, "invalid_request")
    assert_error(api.call("GET", kv_path(key)), 404, "not_found")


def test_cas_conflict_is_412_with_current_version(api: Api) -> None:
    key = new_key()
    version = api.put(key, b"v1")
    body = assert_error(
        api.call("PUT", kv_path(key), b"v2", {"If-Match": f'"{version + 1000}"'}),
        412,
        "version_conflict",
    )
    assert body["current_version"] == version
    assert api.call("GET", kv_path(key)).body == b"v1"
    # The matching version wins, also weak and unquoted forms.
    v2 = api.put(key, b"v2", {"If-Match": f'"{version}"'})
    v3 = api.put(key, b"v3", {"If-Match": f'W/"{v2}"'})
    assert v3 > v2 > version
    assert api.call("GET", kv_path(key)).body == b"v3"


def test_cas_on_an_absent_key_is_412_with_current_version_0(api: Api) -> None:
    key = new_key()
    body = assert_error(
        api.call("PUT", kv_path(key), b"v", {"If-Match": '"5"'}), 412, "version_conflict"
    )
    assert body["current_version"] == 0


def test_create_only(api: Api) -> None:
    key = new_key()
    version = api.put(key, b"first", {"If-None-Match": "*"})
    body = assert_error(
        api.call("PUT", kv_path(key), b"second", {"If-None-Match": "*"}), 412, "version_conflict"
    )
    assert body["current_version"] == version
    assert api.call("GET", kv_path(key)).body == b"first"


def test_delete_absent_is_404(api: Api) -> None:
    assert_error(api.call("DELETE", kv_path(new_key())), 404, "not_found")


def test_delete_with_stale_if_match_is_412(api: Api) -> None:
    key = new_key()
    old = api.put(key, b"v1")
    current = api.put(key, b"v2")
    body = assert_error(
        api.call("DELETE", kv_path(key), headers={"If-Match": f'"{old}"'}), 412, "version_conflict"
    )
    assert body["current_version"] == current
    assert api.call("GET", kv_path(key)).body == b"v2"


def test_delete_with_if_match_answers_the_tombstone_version(api: Api) -> None:
    key = new_key()
    version = api.put(key, b"v")
    response = api.call("DELETE", kv_path(key), headers={"If-Match": f'"{version}"'})
    assert response.status == 200, response.body
    assert set(response.json()) == {"version"}
    assert response.json()["version"] > version
    assert_error(api.call("GET", kv_path(key)), 404, "not_found")
    assert_error(api.call("DELETE", kv_path(key)), 404, "not_found")


def test_put_with_a_bad_encoding_writes_nothing(api: Api) -> None:
    key = new_key()
    assert_error(api.call("PUT", kv_path(key, "encoding=latin1"), b"v"), 400, "invalid_request")
    assert_error(api.call("GET", kv_path(key)), 404, "not_found")


def test_put_of_a_binary_key_with_utf8_encoding_writes_nothing(api: Api) -> None:
    key = new_key() + b"\xff"
    assert_error(api.call("PUT", kv_path(key, "encoding=utf-8"), b"v"), 400, "not_utf8")
    assert_error(api.call("GET", kv_path(key)), 404, "not_found")


# -- reads ----------------------------------------------------------------------------


def test_get_absent_is_404(api: Api) -> None:
    assert_error(api.call("GET", kv_path(new_key())), 404, "not_found")


def test_get_headers_and_create_version(api: Api) -> None:
    key = new_key()
    first = api.put(key, b"one")
    second = api.put(key, b"two")
    got = api.call("GET", kv_path(key))
    assert got.status == 200
    assert got.body == b"two"
    assert header(got, "Content-Type") == "application/octet-stream"
    assert header(got, "ETag") == f'"{second}"'
    assert header(got, "Rkv-Version") == str(second)
    assert header(got, "Rkv-Create-Version") == str(first)
    # Deleting and writing again starts a new life: a new create_version.
    api.call("DELETE", kv_path(key))
    third = api.put(key, b"three")
    got = api.call("GET", kv_path(key))
    assert header(got, "Rkv-Create-Version") == header(got, "Rkv-Version") == str(third)


@pytest.mark.parametrize("consistency", ["linearizable", "leader", "stale"])
def test_every_consistency_level_reads_on_the_leader(api: Api, consistency: str) -> None:
    key = new_key()
    version = api.put(key, b"v")
    got = api.call("GET", kv_path(key, f"consistency={consistency}&min_version={version}"))
    assert (got.status, got.body) == (200, b"v")


def test_stale_read_with_min_version_on_a_follower_sees_the_write(api: Api) -> None:
    key = new_key()
    version = api.put(key, b"fresh")
    got = api.call(
        "GET", kv_path(key, f"consistency=stale&min_version={version}"), node=api.follower
    )
    assert (got.status, got.body) == (200, b"fresh")


@pytest.mark.parametrize("consistency", ["LEADER", "strong", "stale%20", "%FF", ""])
def test_bad_consistency_is_400(api: Api, consistency: str) -> None:
    key = new_key()
    api.put(key, b"v")
    query = f"consistency={consistency}"
    assert_error(api.call("GET", kv_path(key, query)), 400, "invalid_request")
    assert_error(api.call("GET", "/v1/kv?" + query), 400, "invalid_request")


@pytest.mark.parametrize("min_version", ["x", "-1", "1.0", "", "%C2%B2", "9" * 5000])
def test_min_version_not_an_integer_is_400(api: Api, min_version: str) -> None:
    key = new_key()
    api.put(key, b"v")
    query = f"consistency=stale&min_version={min_version}"
    assert_error(api.call("GET", kv_path(key, query)), 400, "invalid_request")
    assert_error(api.call("GET", "/v1/kv?" + query), 400, "invalid_request")


def test_min_version_far_ahead_is_503_after_the_bounded_wait(api: Api) -> None:
    key = new_key()
    version = api.put(key, b"v")
    started = time.monotonic()
    response = api.call("GET", kv_path(key, f"consistency=stale&min_version={version + 10**9}"))
    waited = time.monotonic() - started
    assert_error(response, 503, "node_not_ready")
    assert 4.0 <= waited < 14.0, waited


def test_leader_read_on_a_follower_redirects_to_the_same_path_on_the_leader(api: Api) -> None:
    key = new_key() + b"/\xff sp\n"
    api.put(key, b"at the leader")
    path = kv_path(key, "consistency=leader&min_version=1&x=%FF+y")
    response = api.call("GET", path, node=api.follower)
    body = assert_error(response, 307, "not_leader")
    assert body["leader_url"] == api.leader.url
    assert header(response, "Location") == api.leader.url + path
    followed = http("GET", api.leader.url + path)
    assert (followed.status, followed.body) == (200, b"at the leader")


def test_leader_scan_on_a_follower_redirects(api: Api) -> None:
    path = "/v1/kv?prefix=" + quote(new_key(), safe="") + "&limit=5&consistency=leader"
    response = api.call("GET", path, node=api.follower)
    assert_error(response, 307, "not_leader")
    assert header(response, "Location") == api.leader.url + path
    assert http("GET", api.leader.url + path).status == 200


# -- scan -----------------------------------------------------------------------------


@pytest.mark.parametrize("complete", ["AAA", "0", "", "yes"])
def test_log_complete_other_than_1_or_true_is_400(api: Api, complete: str) -> None:
    assert_error(api.call("GET", f"/v1/log?complete={complete}"), 400, "invalid_request")


def test_log_complete_1_and_true_are_served(api: Api) -> None:
    api.put(new_key("log"), b"v")
    for complete in ("1", "true"):
        response = api.call("GET", f"/v1/log?complete={complete}")
        assert response.status == 200, response.body[:300]
        assert response.body


@pytest.mark.parametrize("limit", ["0", "10001", "x", "-1", "", "%C2%B2", "1e3"])
def test_scan_bad_limit_is_400(api: Api, limit: str) -> None:
    assert_error(api.call("GET", f"/v1/kv?limit={limit}"), 400, "invalid_request")


@pytest.mark.parametrize("cursor", ["x", "!!!!", "a+b/", "%FF", "abc="])
def test_scan_bad_cursor_is_400(api: Api, cursor: str) -> None:
    assert_error(api.call("GET", f"/v1/kv?start_after={cursor}"), 400, "invalid_request")


def test_scan_limit_bounds_are_accepted(api: Api) -> None:
    prefix = quote(new_key(), safe="")
    for limit in (1, 10_000):
        response = api.call("GET", f"/v1/kv?prefix={prefix}&limit={limit}")
        assert response.status == 200, response.body


def test_scan_pages_in_key_order(api: Api) -> None:
    prefix = new_key("scan") + b"/"
    keys = [prefix + bytes([b]) for b in (0x00, 0x41, 0x61, 0x7F, 0xFF)]
    versions = {key: api.put(key, b"value-" + key[-1:]) for key in reversed(keys)}
    seen: list[dict[str, Any]] = []
    cursor: str | None = None
    pages = 0
    while True:
        query = "prefix=" + quote(prefix, safe="") + "&limit=2"
        if cursor is not None:
            query += "&start_after=" + cursor
        response = api.call("GET", "/v1/kv?" + query)
        assert response.status == 200, response.body
        page = response.json()
        assert set(page) == {"items", "next"}
        seen += page["items"]
        pages += 1
        cursor = page["next"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == [
        {
            "key": b64(key),
            "value": b64(b"value-" + key[-1:]),
            "version": versions[key],
            "create_version": versions[key],
        }
        for key in keys
    ]


def test_scan_default_limit_is_100(api: Api) -> None:
    prefix = new_key("many") + b"/"
    txn = {"success": [{"op": "put", "key": b64(prefix + b"%03d" % i), "value": b64("v")}
                       for i in range(101)]}  # fmt: skip
    assert api.txn(txn).status == 200
    response = api.call("GET", "/v1/kv?prefix=" + quote(prefix, safe=""))
    page = response.json()
    assert len(page["items"]) == 100
    assert page["next"] is not None
    rest = api.call(
        "GET", "/v1/kv?prefix=" + quote(prefix, safe="") + "&start_after=" + page["next"]
    )
    assert [base64.b64decode(i["key"]) for i in rest.json()["items"]] == [prefix + b"100"]
    assert rest.json()["next"] is None


def test_scan_utf8_encoding(api: Api) -> None:
    prefix = new_key("text") + "/ключ".encode()
    version = api.put(prefix, "значение".encode())
    response = api.call("GET", "/v1/kv?encoding=utf-8&prefix=" + quote(prefix, safe=""))
    assert response.status == 200
    assert response.json()["items"] == [
        {"key": prefix.decode(), "value": "значение", "version": version, "create_version": version}
    ]


def test_scan_utf8_encoding_over_a_binary_value_is_400(api: Api) -> None:
    prefix = new_key("bin")
    api.put(prefix, b"\xff\xfe")
    response = api.call("GET", "/v1/kv?encoding=utf-8&prefix=" + quote(prefix, safe=""))
    assert_error(response, 400, "not_utf8")


def test_scan_utf8_encoding_over_a_binary_key_is_400(api: Api) -> None:
    key = new_key("binkey") + b"\xff"
    api.put(key, b"text")
    response = api.call("GET", "/v1/kv?encoding=utf-8&prefix=" + quote(key, safe=""))
    assert_error(response, 400, "not_utf8")


@pytest.mark.parametrize("encoding", ["latin1", "UTF-8", "base32", "utf8", "%FF", ""])
def test_scan_unknown_encoding_is_400(api: Api, encoding: str) -> None:
    assert_error(api.call("GET", f"/v1/kv?encoding={encoding}"), 400, "invalid_request")


# -- transactions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [b"", b"{not json", b"\xff\xfe", b"[" * 100_000, b"nul"],
    ids=["empty", "broken", "not-utf8", "deep", "truncated"],
)
def test_txn_body_not_json_is_400(api: Api, body: bytes) -> None:
    assert_error(api.txn(body), 400, "invalid_request")


@pytest.mark.parametrize("body", [[], [{"compare": []}], "txn", 3, None, True])
def test_txn_body_not_an_object_is_400(api: Api, body: Any) -> None:
    assert_error(api.txn(body), 400, "invalid_request")


def test_txn_unknown_field_is_400(api: Api) -> None:
    assert_error(api.txn({"success": [], "then": []}), 400, "invalid_request")


@pytest.mark.parametrize("field", ["compare", "success", "failure"])
def test_txn_field_not_a_list_is_400(api: Api, field: str) -> None:
    assert_error(api.txn({field: {"key": b64("k")}}), 400, "invalid_request")


@pytest.mark.parametrize(
    "compare",
    [
        {"key": b64("k"), "version": 1, "exists": True},
        {"key": b64("k"), "version": 1, "value": b64("v")},
        {"key": b64("k")},
        {"version": 1},
        {"key": b64("k"), "version": -1},
        {"key": b64("k"), "version": "1"},
        {"key": b64("k"), "version": True},
        {"key": b64("k"), "version": 2**64},
        {"key": b64("k"), "version": 1.5},
        {"key": b64("k"), "exists": "yes"},
        {"key": 7, "exists": True},
        "k",
    ],
)
def test_txn_bad_compare_is_400(api: Api, compare: Any) -> None:
    assert_error(api.txn({"compare": [compare]}), 400, "invalid_request")


@pytest.mark.parametrize(
    "op",
    [
        {"op": "put", "key": b64("k")},
        {"op": "increment", "key": b64("k")},
        {"key": b64("k")},
        {"op": "get"},
        {"op": "put", "key": b64("k"), "value": 5},
        {"op": "incr", "key": b64("k"), "by": 1.5},
        {"op": "incr", "key": b64("k"), "by": True},
        "put",
    ],
)
@pytest.mark.parametrize("branch", ["success", "failure"])
def test_txn_bad_op_is_400(api: Api, branch: str, op: Any) -> None:
    assert_error(api.txn({branch: [op]}), 400, "invalid_request")


@pytest.mark.parametrize(
    "body",
    [
        {"compare": [{"key": "!!!", "exists": True}]},
        {"compare": [{"key": b64("k"), "value": "not base64"}]},
        {"success": [{"op": "put", "key": "a", "value": b64("v")}]},
        {"success": [{"op": "put", "key": b64("k"), "value": "v="}]},
        {"failure": [{"op": "get", "key": "a b"}]},
    ],
)
def test_txn_bad_base64_is_400(api: Api, body: Any) -> None:
    assert_error(api.txn(body), 400, "invalid_request")


def test_txn_integral_numbers_with_a_fraction_part_are_integers(api: Api) -> None:
    """JSON Schema (so the document) counts 2.0 as an integer: so does the node."""
    key = b64(new_key("float"))
    body = {
        "compare": [{"key": key, "version": 0.0}],
        "success": [{"op": "incr", "key": key, "by": 2.0}],
    }
    response = api.txn(body)
    assert response.status == 200, response.body
    answer = response.json()
    assert answer["succeeded"] is True and answer["results"][0]["value"] == 2


def test_txn_empty_key_is_invalid_key(api: Api) -> None:
    assert_error(api.txn({"success": [{"op": "get", "key": ""}]}), 400, "invalid_key")


@pytest.mark.parametrize(
    "body",
    [
        {"compare": [{"key": b64(RESERVED_PREFIX + b"x"), "exists": False}]},
        {"success": [{"op": "put", "key": b64(RESERVED_PREFIX + b"x"), "value": b64("v")}]},
        {"success": [{"op": "delete", "key": b64(RESERVED_PREFIX + b"x")}]},
        {"failure": [{"op": "get", "key": b64(RESERVED_PREFIX)}]},
    ],
)
def test_txn_reserved_key_is_400(api: Api, body: Any) -> None:
    assert_error(api.txn(body), 400, "reserved_key")


def test_txn_reserved_key_in_utf8_encoding_is_400(api: Api) -> None:
    body = {"success": [{"op": "get", "key": "\u0000rkv/x"}]}
    assert_error(api.txn(body, "?encoding=utf-8"), 400, "reserved_key")


def test_txn_value_over_the_limit_is_413(api: Api) -> None:
    key = new_key()
    body = {"success": [{"op": "put", "key": b64(key), "value": b64(b"v" * (MIB + 1))}]}
    assert_error(api.txn(body), 413, "payload_too_large")
    assert_error(api.call("GET", kv_path(key)), 404, "not_found")


def test_txn_over_1024_compares_and_ops_is_413_txn_too_large(api: Api) -> None:
    """1024: the default --max-txn-ops."""
    key = b64(new_key())
    body = {
        "compare": [{"key": key, "exists": False}] * 500,
        "success": [{"op": "get", "key": key}] * 400,
        "failure": [{"op": "get", "key": key}] * 125,
    }
    error = assert_error(api.txn(body), 413, "txn_too_large")
    assert "--max-txn-ops" in error["message"]


def test_txn_of_exactly_1024_compares_and_ops_is_applied(api: Api) -> None:
    key = b64(new_key())
    body = {
        "compare": [{"key": key, "exists": False}] * 500,
        "success": [{"op": "get", "key": key}] * 400,
        "failure": [{"op": "get", "key": key}] * 124,
    }
    response = api.txn(body)
    assert response.status == 200, response.body[:300]
    assert response.json()["succeeded"] is True
    assert len(response.json()["results"]) == 400


def test_txn_unknown_encoding_is_400(api: Api) -> None:
    assert_error(api.txn({}, "?encoding=latin1"), 400, "invalid_request")


def test_txn_success_branch(api: Api) -> None:
    a, b = new_key("a"), new_key("b")
    version_b = api.put(b, b"old b")
    response = api.txn(
        {
            "compare": [
                {"key": b64(a), "exists": False},
                {"key": b64(b), "version": version_b},
                {"key": b64(b), "value": b64("old b")},
            ],
            "success": [
                {"op": "put", "key": b64(a), "value": b64(b"\x00new a")},
                {"op": "get", "key": b64(a)},
                {"op": "delete", "key": b64(b)},
                {"op": "get", "key": b64(b)},
            ],
            "failure": [{"op": "put", "key": b64(a), "value": b64("wrong")}],
        }
    )
    assert response.status == 200, response.body
    result = response.json()
    assert result["succeeded"] is True
    version = result["version"]
    assert version > version_b
    ops = result["results"]
    assert [op["op"] for op in ops] == ["put", "get", "delete", "get"]
    assert ops[0]["key"] == b64(a)
    assert ops[1]["found"] is True
    assert ops[1]["value"] == b64(b"\x00new a")
    assert ops[1]["version"] == ops[1]["create_version"] == ops[0]["version"]
    assert ops[2]["found"] is True
    assert ops[3] == {"op": "get", "key": b64(b), "found": False}
    assert api.call("GET", kv_path(a)).body == b"\x00new a"
    assert_error(api.call("GET", kv_path(b)), 404, "not_found")


def test_txn_compare_failure_runs_the_failure_branch(api: Api) -> None:
    key, other = new_key("cas"), new_key("other")
    version = api.put(key, b"current")
    response = api.txn(
        {
            "compare": [{"key": b64(key), "version": version + 1000}],
            "success": [{"op": "put", "key": b64(key), "value": b64("success ran")}],
            "failure": [
                {"op": "get", "key": b64(key)},
                {"op": "put", "key": b64(other), "value": b64("failure ran")},
            ],
        }
    )
    assert response.status == 200, response.body
    result = response.json()
    assert result["succeeded"] is False
    get, put = result["results"]
    assert get == {
        "op": "get",
        "key": b64(key),
        "found": True,
        "value": b64("current"),
        "version": version,
        "create_version": version,
    }
    assert put["op"] == "put"
    assert api.call("GET", kv_path(key)).body == b"current"
    assert api.call("GET", kv_path(other)).body == b"failure ran"


def test_txn_utf8_encoding(api: Api) -> None:
    key = new_key("utf8") + "/ключ".encode()
    response = api.txn(
        {
            "success": [
                {"op": "put", "key": key.decode(), "value": "значение"},
                {"op": "get", "key": key.decode()},
            ]
        },
        "?encoding=utf-8",
    )
    assert response.status == 200, response.body
    assert response.json()["results"][1]["value"] == "значение"
    assert api.call("GET", kv_path(key)).body == "значение".encode()


def test_empty_txn_succeeds(api: Api) -> None:
    response = api.txn({})
    assert response.status == 200, response.body
    assert response.json()["succeeded"] is True
    assert response.json()["results"] == []


# -- routing --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/"),
        ("GET", "/nope"),
        ("GET", "/v1/kvx"),
        ("POST", "/v1/nope"),
        ("GET", "/v2/kv/x"),
        ("GET", "/v1/status/extra"),
        ("DELETE", "/v1/txn/x"),
    ],
)
def test_unknown_route_is_404_json(api: Api, method: str, path: str) -> None:
    assert_error(api.call(method, path), 404, "no_such_endpoint")


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("POST", "/v1/status", {"GET"}),
        ("PUT", "/v1/kv", {"GET"}),
        ("GET", "/v1/txn", {"POST"}),
        ("PATCH", "/v1/kv/x", {"PUT", "GET", "DELETE", "POST"}),
        ("GET", "/v1/producers", {"POST"}),
        ("DELETE", "/healthz", {"GET"}),
        ("POST", "/v1/openapi.json", {"GET"}),
    ],
)
def test_wrong_method_is_405_json(api: Api, method: str, path: str, allowed: set[str]) -> None:
    response = api.call(method, path, b"" if method in ("POST", "PUT", "PATCH") else None)
    assert_error(response, 405, "method_not_allowed")
    allow = header(response, "Allow")
    assert allow is not None
    assert {m.strip() for m in allow.split(",")} == allowed


# -- node endpoints -------------------------------------------------------------------


def test_healthz(api: Api) -> None:
    for node in api.cluster.nodes:
        response = http("GET", node.url + "/healthz")
        assert response.status == 200
        assert response.json() == {"status": "alive"}


def test_readyz(api: Api) -> None:
    for node in api.cluster.nodes:
        response = http("GET", node.url + "/readyz")
        assert response.status == 200, response.body
        body = response.json()
        assert body["ready"] is True
        assert isinstance(body["reason"], str)


def test_status_fields(api: Api) -> None:
    urls = {n.node_id: n.url for n in api.cluster.nodes}
    roles = []
    for node in api.cluster.nodes:
        response = http("GET", node.url + "/v1/status")
        assert response.status == 200
        status = response.json()
        assert status["id"] == node.node_id
        roles.append(status["role"])
        assert status["leader"] == {"id": api.leader.node_id, "url": api.leader.url}
        for field in ("term", "commit_index", "applied_index", "applied_offset"):
            assert type(status[field]) is int and status[field] >= 0, (field, status)
        assert status["term"] >= 1
        assert status["applied_index"] <= status["commit_index"]
        members = status["members"]
        assert {m["id"]: m["url"] for m in members} == urls
        for member in members:
            assert member["reachable"] is True, member
    assert sorted(roles) == ["follower", "follower", "leader"]


def test_openapi_json_is_the_document(api: Api) -> None:
    for node in api.cluster.nodes:
        response = http("GET", node.url + "/v1/openapi.json")
        assert response.status == 200
        assert (header(response, "Content-Type") or "").startswith("application/json")
        assert response.json() == openapi_document()
