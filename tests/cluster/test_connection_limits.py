"""Connections, watches and slow requests a node bounds (issue 15): every cap is a
setting, hitting one answers JSON with a code naming it, and the node serves others.

Client addresses: all of 127.0.0.0/8 reaches loopback, so the tests bind their
sockets to 127.0.0.2, 127.0.0.3... to be several clients at once.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from http.client import HTTPConnection
from urllib.parse import urlsplit

import pytest

from tests.support.cluster import LocalCluster, http

READ_TIMEOUT = 2.0
MAX_CONNECTIONS = 40
PER_ADDRESS = 10
MAX_WATCHES = 6
WATCHES_PER_ADDRESS = 3
BODY_LIMIT = 16 * 1024 * 1024  # the largest request body at the default --max-value-bytes
BODY_BUDGET = BODY_LIMIT + 64 * 1024  # the least --max-body-bytes-in-flight takes


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        tmp_path_factory.mktemp("connections") / "cluster",
        extra_args=[
            "--http-read-timeout", str(READ_TIMEOUT),
            "--max-connections", str(MAX_CONNECTIONS),
            "--max-connections-per-address", str(PER_ADDRESS),
            "--max-watches", str(MAX_WATCHES),
            "--max-watches-per-address", str(WATCHES_PER_ADDRESS),
            "--max-body-bytes-in-flight", str(BODY_BUDGET),
        ],
    )  # fmt: skip
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def _connect(url: str, source: str) -> socket.socket:
    sock = socket.create_connection(_address(url), timeout=10, source_address=(source, 0))
    return sock


def _answer(sock: socket.socket) -> tuple[int, dict[str, object]]:
    """Send one GET /v1/status and read the answer's status and JSON body."""
    sock.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split()[1]), json.loads(body)


def test_connections_over_the_per_address_cap_get_429_and_others_are_served(
    capped: LocalCluster,
) -> None:
    url = capped.nodes[0].url
    held = [_connect(url, "127.0.0.2") for _ in range(PER_ADDRESS)]
    try:
        assert all(_answer(sock)[0] == 200 for sock in held)  # accepted, kept alive
        with _connect(url, "127.0.0.2") as extra:
            status, body = _answer(extra)
        assert status == 429, body
        assert body["code"] == "too_many_connections_per_address"
        assert "--max-connections-per-address" in str(body["message"])
        with _connect(url, "127.0.0.3") as other:  # another client is served
            assert _answer(other)[0] == 200
    finally:
        for sock in held:
            sock.close()
    # Once they are closed the address may connect again.
    assert http("GET", url + "/v1/status").status == 200
    with _connect(url, "127.0.0.2") as again:
        assert _answer(again)[0] == 200


def test_connections_over_the_node_cap_get_503_then_room_comes_back(
    capped: LocalCluster,
) -> None:
    url = capped.nodes[1].url
    held: list[socket.socket] = []
    refused: tuple[int, dict[str, object]] | None = None
    try:
        for i in range(MAX_CONNECTIONS + 5):
            sock = _connect(url, f"127.0.1.{i + 1}")  # one per address: only the node cap
            held.append(sock)
            status, body = _answer(sock)
            if status != 200:
                refused = (status, body)
                break
        assert refused is not None, "no connection was refused"
        assert refused[0] == 503, refused
        assert refused[1]["code"] == "too_many_connections"
        assert len(held) <= MAX_CONNECTIONS + 1
    finally:
        for sock in held:
            sock.close()

    def served() -> bool:
        return http("GET", url + "/v1/status").status == 200

    deadline = time.monotonic() + 30
    while not served():
        assert time.monotonic() < deadline, "the node never took connections again"
        time.sleep(0.2)


def _open_watch(url: str, source: str) -> HTTPConnection:
    host, port = _address(url)
    conn = HTTPConnection(host, port, timeout=10, source_address=(source, 0))
    conn.request("GET", "/v1/watch?prefix=w/")
    return conn


def test_watches_are_capped_per_address_and_per_node(capped: LocalCluster) -> None:
    url = capped.nodes[2].url
    opened: list[HTTPConnection] = []
    try:
        for source in ("127.0.0.4",) * WATCHES_PER_ADDRESS:
            conn = _open_watch(url, source)
            opened.append(conn)
            assert conn.getresponse().status == 200
        extra = _open_watch(url, "127.0.0.4")
        opened.append(extra)
        answer = extra.getresponse()
        assert answer.status == 429
        assert json.loads(answer.read())["code"] == "too_many_watches_per_address"
        for source in ("127.0.0.5",) * (MAX_WATCHES - WATCHES_PER_ADDRESS):
            conn = _open_watch(url, source)
            opened.append(conn)
            assert conn.getresponse().status == 200
        over = _open_watch(url, "127.0.0.6")
        opened.append(over)
        answer = over.getresponse()
        assert answer.status == 503
        body = json.loads(answer.read())
        assert body["code"] == "too_many_watches", body
        assert answer.getheader("Retry-After") == "1"
    finally:
        for conn in opened:
            conn.close()


def test_a_request_head_sent_a_byte_at_a_time_is_cut(capped: LocalCluster) -> None:
    url = capped.nodes[0].url
    sent = 0
    with _connect(url, "127.0.0.7") as sock:
        sock.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        closed = False
        for _ in range(200):  # 200 x 0.2 s: far longer than --http-read-timeout
            try:
                sock.sendall(b"a")
                sent += 1
            except OSError:
                closed = True
                break
            time.sleep(0.2)
            sock.settimeout(0.01)
            with contextlib.suppress(TimeoutError):
                if sock.recv(1) == b"":
                    closed = True
                    break
        assert closed, "the node waited for the head for ever"
    assert http("GET", url + "/v1/status").status == 200


def test_a_body_that_stops_arriving_gets_408(capped: LocalCluster) -> None:
    leader = capped.leader()
    host, port = _address(leader.url)
    conn = HTTPConnection(host, port, timeout=30)
    conn.putrequest("PUT", "/v1/kv/slow-body")
    conn.putheader("Content-Length", "100")
    conn.endheaders(b"0123456789")  # 10 of the 100 bytes, then nothing
    answer = conn.getresponse()
    assert answer.status == 408
    body = json.loads(answer.read())
    assert body["code"] == "request_timeout" and "--http-read-timeout" in body["message"]
    conn.close()
    assert http("GET", f"{leader.url}/v1/kv/slow-body").status == 404  # nothing written


def test_a_line_too_long_and_garbage_are_answered_in_json(capped: LocalCluster) -> None:
    url = capped.nodes[0].url
    answer = http("GET", url + "/v1/kv/" + "k" * 70_000)
    assert answer.status == 400
    body = answer.json()
    assert body["code"] == "line_too_long", body
    with _connect(url, "127.0.0.8") as sock:
        sock.sendall(b"HELLO THERE\r\n\r\n")
        data = b""
        sock.settimeout(10)
        while chunk := sock.recv(65536):
            data += chunk
    head, _, raw = data.partition(b"\r\n\r\n")
    assert head.split()[1] == b"400", data[:200]
    assert json.loads(raw)["code"] == "invalid_request"
    log = capped.nodes[0].log_path.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]


def test_request_bodies_in_flight_are_bounded_in_bytes(capped: LocalCluster) -> None:
    leader = capped.leader()
    host, port = _address(leader.url)
    # A request announcing the largest body, which it sends slowly: it holds its share.
    holder = HTTPConnection(host, port, timeout=30)
    holder.putrequest("POST", "/v1/txn")  # a txn body may be as large as the limit
    holder.putheader("Content-Length", str(BODY_LIMIT))
    holder.endheaders(b"x" * 1000)
    time.sleep(0.3)
    try:
        # Another 100 KB body does not fit beside it: it waits, then 503 overloaded.
        second = http("PUT", f"{leader.url}/v1/kv/budget-second", b"y" * 100_000, timeout=30)
        assert second.status == 503, second.body
        body = second.json()
        assert body["code"] == "overloaded", body
        assert "--max-body-bytes-in-flight" in body["message"]
        assert second.headers.get("Retry-After") == "1"
        # Reads carry no body: they are served meanwhile.
        assert http("GET", f"{leader.url}/v1/status").status == 200
        answer = holder.getresponse()  # its body never came: 408, and its share is free
        assert answer.status == 408
    finally:
        holder.close()
    third = http("PUT", f"{leader.url}/v1/kv/budget-third", b"z" * 100_000, timeout=30)
    assert third.status == 200, third.body
    assert http("GET", f"{leader.url}/v1/kv/budget-second").status == 404


def test_a_bulk_load_holds_its_chunks_share_whatever_its_length(capped: LocalCluster) -> None:
    leader = capped.leader()
    host, port = _address(leader.url)
    # A load announces 1 GiB: not refused on its length (it is read a line at a time),
    # it reserves what its chunks may hold: here all of the node's budget.
    holder = HTTPConnection(host, port, timeout=30)
    holder.putrequest("POST", "/v1/kv:load?encoding=utf-8")
    holder.putheader("Content-Length", str(1 << 30))
    holder.endheaders(b'{"key": "budget-load/1", "value": "v"}\n')
    time.sleep(0.3)
    try:
        second = http("PUT", f"{leader.url}/v1/kv/budget-load-second", b"y" * 100_000, timeout=30)
        assert second.status == 503 and second.json()["code"] == "overloaded", second.body
        answer = holder.getresponse()  # the rest never came: 408, what came is committed
        assert answer.status == 408
        error = json.loads(answer.read())
        assert (error["code"], error["line"], error["loaded"]) == ("request_timeout", 2, 1)
    finally:
        holder.close()
    third = http("PUT", f"{leader.url}/v1/kv/budget-load-third", b"z" * 100_000, timeout=30)
    assert third.status == 200, third.body
    assert http("GET", f"{leader.url}/v1/kv/budget-load/1").body == b"v"
