"""The blocking client's bulk load: one streamed POST /v1/kv:load.

Over plain HTTP a sender thread writes the body (chunked) while the calling
thread reads the progress lines as they come; over HTTPS the body is written
first and the progress read after (one TLS connection is not written and read
from two threads at once). See :mod:`http_api.client.bulk_load`.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from collections.abc import Callable, Iterator, Mapping

from http_api.client.bulk_load import LoadProgress, LoadTally, blocks
from http_api.client.observing import MAX_LINE
from http_api.client.wire import _Reply

MIN_READ_TIMEOUT = 60.0
"""Seconds without a progress line before the load counts as broken (a chunk takes
well under one proposal timeout to commit)."""


def run_load(
    conn: http.client.HTTPConnection,
    target: str,
    url: str,
    *,
    headers: Mapping[str, str],
    lines: Iterator[bytes],
    tally: LoadTally,
    progress: Callable[[LoadProgress], None] | None,
) -> LoadProgress:
    """Send ``lines`` as the body of a load on ``conn`` (connected, closed here)."""
    failures: list[BaseException] = []
    concurrent = not isinstance(conn, http.client.HTTPSConnection)

    def send() -> None:
        try:
            for block in blocks(lines):
                conn.send(b"%x\r\n%b\r\n" % (len(block), block))
            conn.send(b"0\r\n\r\n")
        except BaseException as exc:  # the caller's iterable may raise anything
            failures.append(exc)
            if concurrent and conn.sock is not None:
                with contextlib.suppress(OSError):
                    conn.sock.shutdown(socket.SHUT_RDWR)  # the reader stops too

    sender = threading.Thread(target=send, name="rkv-load-sender", daemon=True)
    try:
        if conn.sock is not None:
            conn.sock.settimeout(MIN_READ_TIMEOUT)
        conn.putrequest("POST", target, skip_accept_encoding=True)
        for name, value in {
            "Content-Type": "application/x-ndjson",
            "Transfer-Encoding": "chunked",
            **headers,
        }.items():
            conn.putheader(name, value)
        conn.endheaders()
        if concurrent:
            sender.start()
        else:
            send()
        try:
            return _read_answer(conn, url, tally, progress)
        except (OSError, http.client.HTTPException) as exc:
            if failures and not isinstance(failures[0], OSError):
                raise failures[0] from None
            raise tally.broken(exc, url) from exc
    finally:
        conn.close()
        if sender.is_alive():
            sender.join()
        if failures and not isinstance(failures[0], OSError) and not tally.done:
            raise failures[0]


def _read_answer(
    conn: http.client.HTTPConnection,
    url: str,
    tally: LoadTally,
    progress: Callable[[LoadProgress], None] | None,
) -> LoadProgress:
    response = conn.getresponse()
    if response.status != 200:
        headers = {name.lower(): value for name, value in response.getheaders()}
        raise tally.refused(_Reply(response.status, headers, response.read(MAX_LINE)), url)
    while line := response.readline(MAX_LINE):
        counted = tally.feed(line, url)
        if progress is not None:
            progress(counted)
    if not tally.done:
        raise tally.broken(EOFError("the answer ended before the load did"), url)
    return tally.progress
