"""``--log-format json``: one JSON object per log line, for log shippers.

Fields: ``time`` (ISO 8601, UTC, milliseconds), ``level``, ``node`` (the node
id), ``logger``, ``message``; ``exception`` (the formatted traceback) when the
record carries one, ``stack`` with ``stack_info``, and ``request_id`` when the
line is written while an HTTP request is served (http_api/request_id.py).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from http_api.request_id import current_request_id


class JsonLogFormatter(logging.Formatter):
    def __init__(self, node_id: str) -> None:
        super().__init__()
        self._node_id = node_id

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.fromtimestamp(record.created, tz=UTC)
        line: dict[str, str] = {
            "time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "node": self._node_id,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        request_id = current_request_id()
        if request_id is not None:
            line["request_id"] = request_id
        return json.dumps(line)


def use_log_format(log_format: str, node_id: str) -> None:
    """Put the format on the root logger's handlers (main.py's basicConfig made one);
    in json, Python's warnings become log lines too, so stderr holds JSON only."""
    if log_format != "json":
        return
    formatter = JsonLogFormatter(node_id)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter)
    logging.captureWarnings(True)
