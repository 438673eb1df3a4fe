"""Keys, values and cursors on the wire.

Keys are arbitrary bytes: percent-encoded in paths and query strings (so the
raw, undecoded path is read here). In JSON, keys and values are base64 by
default; ``?encoding=utf-8`` carries them as text instead (400 if a value is
not valid UTF-8). Scan cursors are opaque (base64url of the last key).
"""

from __future__ import annotations

import base64
import binascii
import re
from urllib.parse import unquote_to_bytes

from aiohttp import web

from node.errors import InvalidRequest
from node.service.kv import Consistency
from node.state.producers import ProducerTag

KV_PATH_PREFIX = "/v1/kv/"
ENCODINGS = ("base64", "utf-8")
# Versions are commit-log offsets; a larger one could not even be encoded into a
# raft entry (msgpack stops at 2**64 - 1), so it is refused here as a bad request.
MAX_VERSION = 2**63 - 1
# The OpenAPI document states these same patterns (http_api/openapi_common.py).
# Unpadded base64url: groups of 4, then 2 or 3 (a single trailing character is no byte).
BASE64URL_PATTERN = "^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2,3})?$"
IF_MATCH_PATTERN = '^(W/)?"?[0-9]{1,19}"?$'
_BASE64URL_RE = re.compile(BASE64URL_PATTERN.encode())
_IF_MATCH_RE = re.compile(IF_MATCH_PATTERN)


def key_from_path(request: web.Request) -> bytes:
    raw_path = request.raw_path.split("?", 1)[0]
    if not raw_path.startswith(KV_PATH_PREFIX):
        raise InvalidRequest("the key goes after /v1/kv/")
    return unquote_to_bytes(raw_path[len(KV_PATH_PREFIX) :])


def raw_query(request: web.Request) -> dict[str, bytes]:
    """Query parameters as bytes (percent-decoded, '+' is a space); the last one wins."""
    params: dict[str, bytes] = {}
    for part in request.rel_url.raw_query_string.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        params[unquote_to_bytes(name.replace("+", " ")).decode("utf-8", "replace")] = (
            unquote_to_bytes(value.replace("+", " "))
        )
    return params


def text_param(params: dict[str, bytes], name: str) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise InvalidRequest(f"parameter {name} must be UTF-8 text") from None


def parse_uint(text: str, maximum: int = MAX_VERSION) -> int | None:
    """A non-negative decimal integer up to ``maximum``, or None (ASCII digits only:
    str.isdigit() also accepts "²", which int() refuses)."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(maximum)):
        return None
    value = int(text)
    return value if value <= maximum else None


def int_param(params: dict[str, bytes], name: str, minimum: int = 0) -> int | None:
    text = text_param(params, name)
    if text is None:
        return None
    value = parse_uint(text)
    if value is None or value < minimum:
        raise InvalidRequest(f"parameter {name} must be an integer >= {minimum}, not {text!r}")
    return value


def consistency_param(params: dict[str, bytes]) -> Consistency:
    # Only an absent parameter means the default: "consistency=" is a mistake.
    text = text_param(params, "consistency")
    if text is None:
        return Consistency.LINEARIZABLE
    try:
        return Consistency(text)
    except ValueError:
        choices = ", ".join(c.value for c in Consistency)
        raise InvalidRequest(f"consistency must be one of {choices}, not {text!r}") from None


def encoding_param(params: dict[str, bytes]) -> str:
    text = text_param(params, "encoding")
    if text is None:
        return "base64"
    if text not in ENCODINGS:
        raise InvalidRequest(f"encoding must be base64 or utf-8, not {text!r}")
    return text


def encode_bytes(data: bytes, encoding: str, what: str) -> str:
    if encoding == "base64":
        return base64.b64encode(data).decode()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequest(
            f"a {what} is not valid UTF-8; use encoding=base64", code="not_utf8"
        ) from None


def decode_bytes(text: object, encoding: str, what: str) -> bytes:
    if not isinstance(text, str):
        raise InvalidRequest(f"{what} must be a string")
    if encoding == "utf-8":
        return text.encode("utf-8")
    try:
        return base64.b64decode(text.encode(), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{what} is not valid base64 (or pass encoding=utf-8)") from None


def encode_cursor(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode().rstrip("=")


def decode_base64url(text: bytes) -> bytes | None:
    """Unpadded base64url (cursors, snapshot resume keys) as bytes, or None if it is not."""
    # urlsafe_b64decode silently drops characters outside the alphabet: check them first.
    if not _BASE64URL_RE.fullmatch(text):
        return None
    try:
        return base64.urlsafe_b64decode(text + b"=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None


def decode_cursor(cursor: bytes) -> bytes:
    key = decode_base64url(cursor)
    if key is None:
        raise InvalidRequest("start_after must be a cursor returned by a previous scan")
    return key


def expected_version_from_headers(request: web.Request) -> int | None:
    """If-Match: "<version>" -> that version; If-None-Match: * -> 0 (must not exist)."""
    if_match = request.headers.get("If-Match")
    if_none_match = request.headers.get("If-None-Match")
    if if_match is not None and if_none_match is not None:
        raise InvalidRequest("use If-Match or If-None-Match, not both")
    if if_none_match is not None:
        if if_none_match.strip() != "*":
            raise InvalidRequest('If-None-Match supports only "*" (create only)')
        return 0
    if if_match is None:
        return None
    text = if_match.strip()
    matched = _IF_MATCH_RE.fullmatch(text)
    version = parse_uint(text.removeprefix("W/").strip('"')) if matched else None
    if version is None:
        raise InvalidRequest(f'If-Match must be a version like "42", not {if_match!r}')
    return version


PRODUCER_HEADERS = ("Rkv-Producer-Id", "Rkv-Producer-Epoch", "Rkv-Sequence")


def producer_from_headers(request: web.Request) -> ProducerTag | None:
    """Rkv-Producer-Id, Rkv-Producer-Epoch and Rkv-Sequence, all three or none."""
    texts = [request.headers.get(name) for name in PRODUCER_HEADERS]
    if all(text is None for text in texts):
        return None
    numbers: list[int] = []
    for name, text in zip(PRODUCER_HEADERS, texts, strict=True):
        if text is None:
            raise InvalidRequest(
                f"{name} is missing: an idempotent write carries "
                f"{', '.join(PRODUCER_HEADERS)} together",
                code="invalid_producer_header",
            )
        number = parse_uint(text.strip())
        if number is None:
            raise InvalidRequest(
                f"{name} must be an integer in 0..{MAX_VERSION}, not {text!r:.40}",
                code="invalid_producer_header",
            )
        numbers.append(number)
    return ProducerTag(*numbers)


def signed_int_param(params: dict[str, bytes], name: str, default: int) -> int:
    """A signed 64-bit decimal integer parameter, or ``default`` when absent."""
    text = text_param(params, name)
    if text is None:
        return default
    digits = text[1:] if text.startswith("-") else text
    magnitude = parse_uint(digits, 2**63)
    if magnitude is None or (magnitude == 2**63 and not text.startswith("-")):
        raise InvalidRequest(f"parameter {name} must be a signed 64-bit integer, not {text!r:.40}")
    return -magnitude if text.startswith("-") else magnitude
