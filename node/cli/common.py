"""What the `rkv` commands share: argument types, the node URLs, exit codes, output.

Every command family (serve, client, cluster, snapshot, audit, redis) keeps
its own arguments and handler in its own module; this one holds only what
several of them use, and imports nothing of rkv but the Python client.
"""

from __future__ import annotations

import argparse
import base64
import os
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from http_api.client import DEFAULT_URL, parse_urls

URL_ENV = "RKV_URL"
"""The environment variable naming the node URL(s) when --url is not given."""
BASE64_MARK = "base64:"
"""How the client commands show bytes that are not printable text."""

EXIT_OK = 0
EXIT_REFUSED = 1
"""The server said no: not found, version conflict, invalid request."""
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
"""No node answered, or the cluster could not serve the request."""

MAX_INT64 = 2**63 - 1


def rkv_version() -> str:
    """The installed rkv's version, "unknown" when it is not installed."""
    try:
        return version("rkv")
    except PackageNotFoundError:
        return "unknown"


def node_urls(given: list[str] | str | None) -> list[str]:
    """The URLs from --url (repeated or comma-separated), else $RKV_URL, else the default.

    Raises ValueError for a URL that is not http(s)."""
    if not given:
        given = [default_url()]
    return parse_urls(given)


def default_url() -> str:
    """$RKV_URL, else the default node URL."""
    return os.environ.get(URL_ENV) or DEFAULT_URL


def default_url_help() -> str:
    return f"${URL_ENV} or {DEFAULT_URL}"


def url_help(extra: str = "") -> str:
    return (
        f"a node URL; repeat it or separate URLs with commas (default: {default_url_help()}){extra}"
    )


def add_urls_argument(parser: Any, extra: str = "") -> None:
    parser.add_argument("--url", action="append", metavar="URL", help=url_help(extra))


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def non_negative_int(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, not {text!r}")
    return int(text)


def positive_int(text: str) -> int:
    value = non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def signed_int64(text: str) -> int:
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()):
        raise argparse.ArgumentTypeError(f"must be an integer, not {text!r}")
    value = int(text)
    if not -MAX_INT64 - 1 <= value <= MAX_INT64:
        raise argparse.ArgumentTypeError("must be a signed 64-bit integer")
    return value


def producer_triple(text: str) -> tuple[int, int, int]:
    """``ID:EPOCH:SEQ``, three non-negative integers (what ``--producer`` takes)."""
    parts = text.split(":")
    if len(parts) != 3 or not all(
        p.isascii() and p.isdigit() and len(p) <= 19 and int(p) <= MAX_INT64 for p in parts
    ):
        raise argparse.ArgumentTypeError(
            f"must be ID:EPOCH:SEQ, three non-negative integers (as from "
            f"'rkv producer init' and a sequence counted from 0), not {text!r}"
        )
    producer_id, epoch, sequence = (int(p) for p in parts)
    return producer_id, epoch, sequence


def fencing_pair(text: str) -> tuple[str, int]:
    """``NAME=TOKEN`` (what ``--fencing`` and $RKV_FENCING hold): a lock's name and
    its fencing token."""
    name, sep, token = text.rpartition("=")
    if not sep or not name or not (token.isascii() and token.isdigit()) or len(token) > 19:
        raise argparse.ArgumentTypeError(
            f"must be NAME=TOKEN, a lock's name and its fencing token (as in $RKV_FENCING "
            f"under 'rkv lock'), not {text!r}"
        )
    return name, int(token)


def shown_bytes(data: bytes) -> str:
    """Text when it is printable UTF-8, else ``base64:<base64>``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.isprintable() and not text.startswith(BASE64_MARK):
        return text
    return BASE64_MARK + base64.b64encode(data).decode("ascii")
