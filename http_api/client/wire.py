"""What goes over the wire, without doing any I/O: node URLs, the requests
the clients send, and how answers are decoded (typed exceptions included).

A client operation is a *plan*: a generator that yields what to do next
(:class:`_Send` a request, or :class:`_Sleep`) and is sent back what happened
(a :class:`_Reply`, a :class:`_Failure`, or None after a sleep). Plans are
written in :mod:`http_api.client.rules`; each client only performs the
actions, so both share every rule.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

from http_api.client.errors import (
    AuthenticationError,
    ConflictError,
    Fenced,
    IntegerOverflowError,
    InvalidRequestError,
    KeyNotFoundError,
    LeaseNotFoundError,
    LockHeldError,
    NoElectionLeaderError,
    NoSpaceError,
    NotAnIntegerError,
    NotAppliedError,
    NotFoundError,
    NotLockHolderError,
    OverloadedError,
    PayloadTooLargeError,
    PermissionDeniedError,
    ProducerFencedError,
    RkvClientError,
    SequenceError,
    TooManyRequestsError,
    UnavailableError,
    UnknownOutcomeError,
    UnknownProducerError,
    VersionConflictError,
)
from http_api.client.model import Compare, Item, Op, TxnOpResult, TxnResult

DEFAULT_URL = "http://127.0.0.1:8001"
CONSISTENCY_LEVELS = ("linearizable", "leader", "stale")

T = TypeVar("T")


# -- node URLs ---------------------------------------------------------------------------


def normalize_url(url: str) -> str:
    """``scheme://host:port[/prefix]`` without a trailing slash; ValueError if unusable."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"a node URL takes no query or fragment: {url!r}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"bad port in URL {url!r}") from None
    host = parts.hostname
    if any(ch.isspace() or not ch.isprintable() or ch in '<>"{}|\\^`' for ch in host):
        raise ValueError(f"bad host in URL {url!r}")
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    return f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}"


def parse_urls(urls: str | Iterable[str]) -> list[str]:
    """One URL, a comma-separated string or a list, normalized and deduplicated."""
    raw = [urls] if isinstance(urls, str) else list(urls)
    found: list[str] = []
    for entry in raw:
        for part in entry.split(","):
            if part.strip():
                url = normalize_url(part)
                if url not in found:
                    found.append(url)
    if not found:
        raise ValueError("no node URL given")
    return found


# -- what a plan yields and is sent back -----------------------------------------------


@dataclass(frozen=True, slots=True)
class _Send:
    base: str
    method: str
    target: str  # path and query, already percent-encoded
    body: bytes | None
    headers: Mapping[str, str]
    timeout: float


@dataclass(frozen=True, slots=True)
class _Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class _Reply:
    status: int
    headers: Mapping[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class _Failure:
    """No HTTP answer. ``sent``: the request may have reached the server."""

    error: BaseException
    sent: bool


_Action = _Send | _Sleep
_Outcome = _Reply | _Failure | None
_Plan = Generator[_Action, _Outcome, T]


def _exchange(send: _Send) -> Generator[_Action, _Outcome, _Reply | _Failure]:
    outcome = yield send
    assert outcome is not None
    return outcome


# -- building requests -------------------------------------------------------------------


def key_path(key: bytes) -> str:
    """The request path of a key: every byte but unreserved ones percent-encoded."""
    if not key:
        raise ValueError("a key must not be empty")
    return "/v1/kv/" + quote(key, safe="")


def _query(params: Mapping[str, bytes | str | int | None]) -> str:
    """``?a=1&b=...`` with every value percent-encoded (bytes as they are)."""
    parts = [
        f"{name}={quote(value if isinstance(value, bytes | str) else str(value), safe='')}"
        for name, value in params.items()
        if value is not None
    ]
    return "?" + "&".join(parts) if parts else ""


def _check_consistency(consistency: str) -> str:
    if consistency not in CONSISTENCY_LEVELS:
        raise ValueError(f"consistency must be one of {', '.join(CONSISTENCY_LEVELS)}")
    return consistency


def _version_arg(version: int) -> int:
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError("a version must be a non-negative integer")
    return version


def _txn_body(
    compare: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]
) -> dict[str, Any]:
    return {
        "compare": [c.to_json() for c in compare],
        "success": [o.to_json() for o in success],
        "failure": [o.to_json() for o in failure],
    }


# -- decoding answers --------------------------------------------------------------------


def _unb64(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise RkvClientError(f"the server sent a {what} that is not a string", code="bad_response")
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise RkvClientError(
            f"the server sent a {what} that is not base64", code="bad_response"
        ) from None


def _item(raw: Any) -> Item:
    if not isinstance(raw, dict):
        raise RkvClientError("the server sent a malformed scan item", code="bad_response")
    return Item(
        _unb64(raw.get("key"), "key"),
        _unb64(raw.get("value"), "value"),
        int(raw.get("version", 0)),
        int(raw.get("create_version", 0)),
    )


def _txn_result(raw: dict[str, Any]) -> TxnResult:
    results = []
    for op in raw.get("results", []):
        if not isinstance(op, dict):
            raise RkvClientError("the server sent a malformed txn result", code="bad_response")
        kind = str(op.get("op"))
        value = op.get("value")
        integer: int | None = None
        if kind == "incr":
            # The new integer; the key now holds it as decimal text.
            integer = _int_field(op, "value")
            data: bytes | None = str(integer).encode()
        else:
            data = None if value is None else _unb64(value, "value")
        results.append(
            TxnOpResult(
                op=kind,
                key=_unb64(op.get("key"), "key"),
                found=bool(op.get("found", kind in ("put", "incr", "append"))),
                version=int(op.get("version", 0)),
                create_version=int(op.get("create_version", 0)),
                value=data,
                integer=integer,
            )
        )
    return TxnResult(bool(raw.get("succeeded")), int(raw.get("version", 0)), tuple(results))


def _int_field(body: Any, name: str) -> int:
    value = body.get(name) if isinstance(body, dict) else None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RkvClientError(f"the server sent no integer {name}", code="bad_response")
    return value


def _version_of(reply: _Reply) -> int:
    return _int_field(reply.json(), "version")


def _incr_value_of(reply: _Reply) -> int:
    return _int_field(reply.json(), "value")


def _size_of(reply: _Reply) -> int:
    return _int_field(reply.json(), "size")


def _txn_of(reply: _Reply) -> TxnResult:
    return _txn_result(_txn_raw_of(reply))


def _txn_raw_of(reply: _Reply) -> dict[str, Any]:
    result = reply.json()
    if not isinstance(result, dict):
        raise RkvClientError("the server sent a malformed txn result", code="bad_response")
    return result


def is_duplicate(reply: _Reply) -> bool:
    """The answer repeats an idempotent producer's earlier result (``Rkv-Duplicate``)."""
    return reply.headers.get("rkv-duplicate", "").strip().lower() == "true"


def _describe(failure: _Failure, base: str = "") -> str:
    error = failure.error
    text = str(error) or type(error).__name__
    if isinstance(error, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(error, ConnectionResetError) and base.startswith("http://"):
        # What a node serving HTTPS does to a plain HTTP request: it fails the
        # handshake and closes the connection without a word.
        return f"{text} (if the node serves HTTPS, use an https:// URL)"
    if isinstance(error, ConnectionResetError) and base.startswith("https://"):
        # Under TLS 1.3 a node judges the client's certificate after the client's
        # side of the handshake is done, and closes a connection whose certificate
        # it cannot verify without a word either.
        return f"{text} (with mutual TLS: did the node refuse this client's certificate?)"
    return text


def tls_failure(error: BaseException) -> str | None:
    """What went wrong in a TLS handshake, or None when ``error`` is not a TLS
    failure (an EOF or reset in the middle of one is a network failure)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        # aiohttp wraps the ssl module's error (and subclasses it): read the inner one.
        nested = getattr(current, "certificate_error", None) or getattr(current, "os_error", None)
        if isinstance(nested, BaseException) and id(nested) not in seen:
            current = nested
            continue
        reason = getattr(current, "verify_message", None) or getattr(current, "reason", None)
        if isinstance(current, ssl.SSLCertVerificationError):
            return (
                f"the node's certificate was not accepted: {reason or current} (is the CA "
                "given, --cacert or Credentials.cafile, the one that signed the nodes' "
                "certificates, and does the URL name a host the certificate was made for?)"
            )
        if isinstance(current, ssl.SSLError) and not isinstance(
            current, ssl.SSLEOFError | ssl.SSLZeroReturnError
        ):
            hint = ""
            if reason == "WRONG_VERSION_NUMBER":
                hint = " (an https:// URL to a node serving plain HTTP?)"
            elif "ALERT" in str(reason):
                hint = " (the node refused this client's certificate, or wants one)"
            return f"TLS handshake failed: {reason or current}{hint}"
        current = current.__cause__
    return None


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: rkv never sends one


_CONFLICTS: dict[str, type[ConflictError]] = {
    "not_an_integer": NotAnIntegerError,
    "integer_overflow": IntegerOverflowError,
    "producer_fenced": ProducerFencedError,
    "unknown_producer": UnknownProducerError,
    "out_of_order_sequence": SequenceError,
    "duplicate_sequence_too_old": SequenceError,
    "not_lock_holder": NotLockHolderError,
}
_WITH_TOKEN: dict[str, type[Fenced | LockHeldError]] = {
    "fenced": Fenced,
    "lock_held": LockHeldError,
}
_NOT_FOUND: dict[str, type[NotFoundError]] = {
    "not_found": KeyNotFoundError,
    "lease_not_found": LeaseNotFoundError,
    "lease_expired": LeaseNotFoundError,
    "no_leader": NoElectionLeaderError,
}


def _token_in(body: Any) -> int | None:
    """The lock's current fencing token in a refusal (``fenced``, ``lock_held``)."""
    token = body.get("token") if isinstance(body, dict) else None
    if token is None and isinstance(body, dict) and isinstance(body.get("holder"), dict):
        token = body["holder"].get("token")
    return token if isinstance(token, int) and not isinstance(token, bool) else None


def error_from_reply(reply: _Reply, url: str) -> RkvClientError:
    """The typed exception for a non-2xx answer."""
    body = reply.json()
    code: str | None = None
    message = ""
    if isinstance(body, dict):
        code = body.get("code") if isinstance(body.get("code"), str) else None
        message = str(body.get("message", ""))
    if not message:
        message = reply.body[:200].decode("utf-8", "replace").strip() or f"HTTP {reply.status}"
    status = reply.status
    common: dict[str, Any] = {"code": code, "status": status, "url": url}
    if status == 404:
        return _NOT_FOUND.get(code or "", NotFoundError)(message, **common)
    if status == 412:
        current = body.get("current_version") if isinstance(body, dict) else None
        return VersionConflictError(
            message, int(current) if isinstance(current, int) else -1, **common
        )
    if status == 413:
        return PayloadTooLargeError(message, **common)
    if status == 400:
        return InvalidRequestError(message, **common)
    if status == 401:
        return AuthenticationError(message, **common)
    if status == 403:
        return PermissionDeniedError(message, **common)
    if status == 429:
        return TooManyRequestsError(message, retry_after=_retry_after(reply.headers), **common)
    if status == 409 and code in _WITH_TOKEN:
        return _WITH_TOKEN[code](message, token=_token_in(body), **common)
    if status == 409:
        conflict: type[ConflictError] = _CONFLICTS.get(code or "", ConflictError)
        return conflict(message, **common)
    if status == 507:
        return NoSpaceError(message, **common)
    if status == 503:
        retry_after = _retry_after(reply.headers)
        kind: type[UnavailableError] = UnavailableError
        if code in ("not_applied", "no_leader"):
            kind = NotAppliedError
        elif code == "unknown_outcome":
            kind = UnknownOutcomeError
        elif code in ("overloaded", "too_many_connections"):
            kind = OverloadedError
        return kind(message, retry_after=retry_after, **common)
    return RkvClientError(message, code=code or f"http_{status}", status=status, url=url)
