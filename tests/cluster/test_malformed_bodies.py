"""Malformed request bodies answer 400 with a JSON error, never 500 (issue 15's findings,
by schemathesis and by hand), and the node goes on serving."""

from __future__ import annotations

import gzip
import json
import socket

import pytest

from tests.cluster.test_http_api import Api, api, assert_error, kv_path, new_key, raw_request

__all__ = ["api"]  # the module-scoped cluster of test_http_api

JSON_ROUTES = [
    ("POST", "/v1/txn", b'{"success": []}'),
    ("POST", "/v1/producers", b"{}"),
    # Bodies the routes refuse anyway once read: the shared cluster must stay as it is.
    ("POST", "/v1/cluster/members", b"{}"),
    ("POST", "/v1/audit", b'{"buckets": 0}'),
]


@pytest.mark.parametrize(("method", "path", "body"), JSON_ROUTES)
def test_an_unknown_charset_is_invalid_request(
    api: Api, method: str, path: str, body: bytes
) -> None:
    headers = {"Content-Type": "application/json; charset=bogus"}
    assert_error(raw_request(api.leader, method, path, body, headers), 400, "invalid_request")


@pytest.mark.parametrize(("method", "path", "body"), JSON_ROUTES)
def test_json_nested_100000_deep_is_invalid_request(
    api: Api, method: str, path: str, body: bytes
) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    headers = {"Content-Type": "application/json"}
    assert_error(raw_request(api.leader, method, path, deep, headers), 400, "invalid_request")


@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/txn"), ("PUT", "value")])
def test_a_body_that_is_not_what_its_content_encoding_says_is_invalid_request(
    api: Api, method: str, path: str
) -> None:
    target = kv_path(new_key("gz")) if path == "value" else path
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    response = raw_request(api.leader, method, target, b'{"success": []}', headers)
    assert_error(response, 400, "invalid_request")


def test_a_body_that_does_not_decode_closes_its_keep_alive_connection(api: Api) -> None:
    """Where the next request would start is unknown: the 400 closes the connection
    instead of leaving it open and serving nothing (a client's next request hung)."""
    body = b"this is not gzip at all" * 10
    head = (
        f"PUT {kv_path(new_key('gz'))} HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n"
        f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", api.leader.http_port), timeout=10) as sock:
        sock.sendall(head + body)
        answer = b""
        while chunk := sock.recv(65536):  # ends: the node closed the connection
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.split()[1] == b"400", answer[:300]
    assert b"Connection: close" in rest, answer[:300]
    assert json.loads(rest.partition(b"\r\n\r\n")[2])["code"] == "invalid_request"


def test_a_gzip_body_that_is_gzip_is_read(api: Api) -> None:
    key = new_key("gz")
    headers = {"Content-Encoding": "gzip"}
    response = raw_request(api.leader, "PUT", kv_path(key), gzip.compress(b"zipped"), headers)
    assert response.status == 200, response.body
    assert api.call("GET", kv_path(key)).body == b"zipped"


@pytest.mark.parametrize("checkpoint", [{}, 0, None, [], True])
def test_a_checkpoint_that_is_not_a_string_is_invalid_request(api: Api, checkpoint: object) -> None:
    body = {"success": [{"op": "get", "checkpoint": checkpoint}]}
    assert_error(api.txn(body), 400, "invalid_request")
    compare = {"compare": [{"checkpoint": checkpoint, "version": 0}], "success": []}
    assert_error(api.txn(compare), 400, "invalid_request")


@pytest.mark.parametrize("member_id", [".", "..", "a/b", "x\\y", "", "tab\there"])
def test_a_member_id_that_could_name_another_directory_is_refused(api: Api, member_id: str) -> None:
    body = {"id": member_id, "raft_address": "127.0.0.1:1", "url": "http://127.0.0.1:1"}
    response = api.call(
        "POST",
        "/v1/cluster/members",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    assert_error(response, 400, "invalid_request")
    members = json.loads(api.call("GET", "/v1/cluster/members").body)["members"]
    assert len(members) == 3


@pytest.mark.parametrize(
    ("raft_address", "url"),
    [
        ("127.0.0.1:0080", "http://127.0.0.1:1"),  # the document's port has no leading 0
        ("127.0.0.1:65536", "http://127.0.0.1:1"),
        ("127.0.0.1:\u0663", "http://127.0.0.1:1"),  # an Arabic-Indic 3: a digit to isdigit()
        ("a host:1", "http://127.0.0.1:1"),
        ("127.0.0.1:1", "http://127.0.0.1:1/a b"),
        ("127.0.0.1:1", "ftp://127.0.0.1:1"),
    ],
)
def test_a_member_address_or_url_off_the_documented_pattern_is_refused(
    api: Api, raft_address: str, url: str
) -> None:
    body = {"id": "n9", "raft_address": raft_address, "url": url}
    response = api.call(
        "POST",
        "/v1/cluster/members",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    assert_error(response, 400, "invalid_request")
    members = json.loads(api.call("GET", "/v1/cluster/members").body)["members"]
    assert len(members) == 3


def test_a_request_the_http_parser_refuses_is_a_json_400_and_no_error_log(api: Api) -> None:
    """aiohttp's parser refuses these before any route; the answer is still JSON, and
    the node logs it at debug level only, never an ERROR with a traceback (a stranger
    must not fill the log; the last test here reads the logs)."""
    request = b"GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Probe: a\x00b\r\n\r\n"
    with socket.create_connection(("127.0.0.1", api.leader.http_port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.split(b" ", 2)[1] == b"400", answer[:200]
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["code"] == "invalid_request"
    log = api.leader.log_path.read_text(errors="replace")
    assert "Error handling request" not in log and "Traceback" not in log, log[-2000:]


def test_the_node_serves_on_after_the_malformed_bodies(api: Api) -> None:
    key = new_key("after")
    api.put(key, b"fine")
    assert api.call("GET", kv_path(key)).body == b"fine"
    body = json.loads(api.call("GET", "/v1/status").body)
    assert body["leader"] is not None
    for node in api.cluster.nodes:  # and nothing above left a traceback in a log
        log = node.log_path.read_text(errors="replace")
        assert "Traceback" not in log and "Unhandled exception" not in log, log[-3000:]
