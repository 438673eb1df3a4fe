"""How a node reports on itself: its log format and its readiness bound.

``--log-format text|json`` (RKV_LOG_FORMAT, text): json writes one object per
line (node/cli/json_logs.py). ``--ready-min-free-bytes N`` (RKV_READY_MIN_FREE_BYTES,
64 MiB): /readyz's ``storage`` check fails while the data directory's
filesystem has less free space; 0 checks only that it is not read-only.

Parsed by node/cli/settings.py, which owns the environment.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from node.errors import ConfigError
from node.service.readiness import DEFAULT_MIN_FREE_BYTES

LOG_FORMATS = ("text", "json")


@dataclass(frozen=True, slots=True)
class DiagnosticSettings:
    log_format: str = "text"
    ready_min_free_bytes: int = DEFAULT_MIN_FREE_BYTES


def add_diagnostic_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--log-level", help="DEBUG, INFO, WARNING (RKV_LOG_LEVEL, INFO)")
    add(
        "--log-format",
        help="text, or json: one JSON object per line with time, level, node, logger, "
        "message, exception and request_id (RKV_LOG_FORMAT, text)",
    )
    add(
        "--ready-min-free-bytes",
        help="/readyz's storage check fails while the data directory's filesystem has "
        "less free space; 0: only a read-only filesystem fails it "
        f"(RKV_READY_MIN_FREE_BYTES, {DEFAULT_MIN_FREE_BYTES // (1024 * 1024)} MiB)",
    )


def diagnostic_settings(value: Callable[[str], str | None]) -> DiagnosticSettings:
    """The flags, read through settings.py's ``value(name)``."""
    log_format = (value("log_format") or "text").lower()
    if log_format not in LOG_FORMATS:
        raise ConfigError(f"--log-format must be text or json, not {log_format!r:.40}")
    free = value("ready_min_free_bytes")
    if free is not None and not (free.isascii() and free.isdigit()):
        raise ConfigError(
            f"--ready-min-free-bytes must be a whole number of bytes, not {free!r:.40}"
        )
    return DiagnosticSettings(
        log_format=log_format,
        ready_min_free_bytes=DEFAULT_MIN_FREE_BYTES if free is None else int(free),
    )
