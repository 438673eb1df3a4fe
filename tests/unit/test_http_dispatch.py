"""Which first request lines main hands to an HTTP worker (http_api/dispatch.py)."""

from __future__ import annotations

import pytest

from http_api.dispatch import first_line, is_read_line, is_worker_line


@pytest.mark.parametrize(
    "line",
    [
        b"GET /v1/kv/a HTTP/1.1",
        b"GET /v1/kv/a HTTP/1.1\r",
        b"GET /v1/kv/a%2Fb?consistency=stale&min_version=3 HTTP/1.1",
        b"GET /v1/kv HTTP/1.1",
        b"GET /v1/kv?prefix=abc&limit=10&consistency=linearizable HTTP/1.0",
        b"GET /v1/kv/ HTTP/1.1",  # an empty key: the worker answers invalid_key like main
    ],
)
def test_key_value_reads_go_to_a_worker(line: bytes) -> None:
    assert is_read_line(line)
    assert is_worker_line(line)


@pytest.mark.parametrize(
    "line",
    [
        b"PUT /v1/kv/a HTTP/1.1",
        b"PUT /v1/kv/a%2Fb?encoding=base64 HTTP/1.1\r",
        b"PUT /v1/kv/a?release=1&attl=2 HTTP/1.1",  # not lease= nor ttl=
        b"POST /v1/kv/a?op=incr&by=3 HTTP/1.1",
        b"POST /v1/kv/a?op=append HTTP/1.0",
        b"DELETE /v1/kv/a HTTP/1.1",
        b"POST /v1/txn HTTP/1.1",
        b"POST /v1/txn?encoding=utf-8 HTTP/1.1",
    ],
)
def test_key_value_writes_go_to_a_worker(line: bytes) -> None:
    assert is_worker_line(line)
    assert not is_read_line(line)


@pytest.mark.parametrize(
    "line",
    [
        b"PUT /v1/kv/a?lease=5 HTTP/1.1",
        b"PUT /v1/kv/a?encoding=utf-8&ttl=10 HTTP/1.1",
        b"PUT /v1/kv/a?ttl HTTP/1.1",
        b"PUT /v1/kv/ HTTP/1.1",
        b"PUT /v1/kv HTTP/1.1",
        b"POST /v1/kv HTTP/1.1",
        b"POST /v1/txnx HTTP/1.1",
        b"PUT /v1/txn HTTP/1.1",
        b"POST /v1/producers HTTP/1.1",
        b"PUT /v1/locks/a HTTP/1.1",
        b"PATCH /v1/kv/a HTTP/1.1",
        b"put /v1/kv/a HTTP/1.1",
    ],
)
def test_writes_on_leases_and_other_writes_stay_with_main(line: bytes) -> None:
    assert not is_worker_line(line)


@pytest.mark.parametrize(
    "line",
    [
        b"PUT /v1/kv/a HTTP/1.1",
        b"POST /v1/kv/a HTTP/1.1",
        b"DELETE /v1/kv/a HTTP/1.1",
        b"HEAD /v1/kv/a HTTP/1.1",
        b"GET /v1/kvx HTTP/1.1",
        b"GET /v1/kv2/a HTTP/1.1",
        b"GET /v1/watch?prefix=a HTTP/1.1",
        b"GET /v1/status HTTP/1.1",
        b"GET /metrics HTTP/1.1",
        b"GET /v1/leases/keepalive HTTP/1.1",
        b"GET http://host/v1/kv/a HTTP/1.1",
        b"GET /v1/kv/a HTTP/2.0",
        b"GET /v1/kv/a",
        b"get /v1/kv/a HTTP/1.1",
        b"GET /v1/kv/a b HTTP/1.1",
        b"",
        b"\x16\x03\x01\x02\x00",  # a TLS ClientHello sent to the plain port
    ],
)
def test_everything_else_stays_with_main(line: bytes) -> None:
    assert not is_read_line(line)
    if not line.startswith((b"PUT ", b"POST ", b"DELETE ")):
        assert not is_worker_line(line)


def test_the_first_line_is_known_once_its_end_arrived() -> None:
    assert first_line(b"GET /v1/kv/a HT") is None
    assert first_line(b"") is None
    assert first_line(b"GET /v1/kv/a HTTP/1.1\r\nHost: x\r\n") == b"GET /v1/kv/a HTTP/1.1\r"
    assert is_read_line(first_line(b"GET /v1/kv/a HTTP/1.1\r\nHost: x\r\n") or b"")
