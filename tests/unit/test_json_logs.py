"""The JSON log formatter: one object per line, the exception and the request id."""

from __future__ import annotations

import json
import logging
import sys

from http_api.request_id import REQUEST_ID
from node.cli.json_logs import JsonLogFormatter


def _record(message: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("bad\nthing")
        except ValueError:
            exc_info = sys.exc_info()
    return logging.LogRecord("raft.x", logging.ERROR, __file__, 1, message, args, exc_info)


def test_fields_exception_and_one_line() -> None:
    text = JsonLogFormatter("n7").format(_record("applying %d failed\n", 5, exc=True))
    assert "\n" not in text
    line = json.loads(text)
    assert line["node"] == "n7" and line["level"] == "ERROR" and line["logger"] == "raft.x"
    assert line["message"] == "applying 5 failed\n"
    assert line["time"].endswith("Z")
    assert "ValueError: bad" in line["exception"] and "Traceback" in line["exception"]
    assert "request_id" not in line


def test_the_request_id_of_the_context() -> None:
    token = REQUEST_ID.set("req-9")
    try:
        line = json.loads(JsonLogFormatter("n1").format(_record("served")))
    finally:
        REQUEST_ID.reset(token)
    assert line["request_id"] == "req-9" and "exception" not in line
