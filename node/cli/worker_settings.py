"""``--http-workers``: how many HTTP worker processes serve key-value reads and writes
beside the node's main process (http_api/dispatch.py, node/cli/http_workers.py)."""

from __future__ import annotations

import argparse
import os

from node.errors import ConfigError

DEFAULT_HTTP_WORKERS = "0"
MAX_AUTO_WORKERS = 7
MAX_HTTP_WORKERS = 64


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--http-workers",
        help="HTTP worker processes that serve key-value reads and writes (GET, PUT, DELETE, "
        "POST /v1/kv..., POST /v1/txn) on other cores, beside the main process that owns raft "
        "and proposes the writes they build; 'auto': the CPUs this "
        f"process may use minus 1, at most {MAX_AUTO_WORKERS}; 0: none, main serves "
        f"everything (RKV_HTTP_WORKERS, {DEFAULT_HTTP_WORKERS})",
    )


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def http_workers(text: str | None, cpus: int | None = None) -> int:
    """The number of workers ``--http-workers`` asks for (ConfigError if invalid)."""
    value = (text or DEFAULT_HTTP_WORKERS).strip()
    if value == "auto":
        return max(0, min(MAX_AUTO_WORKERS, (cpus or usable_cpus()) - 1))
    if not value.isdigit() or int(value) > MAX_HTTP_WORKERS:
        raise ConfigError(
            f"--http-workers must be auto or a number from 0 to {MAX_HTTP_WORKERS}, not {value!r}"
        )
    return int(value)
