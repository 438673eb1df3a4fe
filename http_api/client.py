"""Python clients for rkv's REST API: :class:`RkvClient` (blocking, standard
library only) and :class:`AsyncRkvClient` (asyncio, aiohttp's client).

Both take one node URL or several, find the leader through ``GET /v1/status``
and send writes (and linearizable reads) there; ``stale`` reads go to the
first reachable node in the order given. They learn the other members' URLs
from the status, so one reachable URL is enough (every node's advertised URL
must be reachable from the client). Keys and values are ``bytes`` or ``str``
(encoded as UTF-8); results are ``bytes``.

Retries (bounded by :class:`RetryPolicy`):

- reads (get, scan, status) retry on connection errors, timeouts and 503 on
  the other nodes, with a growing, jittered pause between rounds;
- writes (put, delete, txn) retry only when the write was certainly not
  applied: the connection could not be opened (nothing was sent), or the node
  answered 503 with code ``not_applied``, ``no_leader`` or ``overloaded``
  (honouring Retry-After). A connection lost after the request went out, a
  timeout waiting for the answer, or a 503 ``unknown_outcome`` raise
  :class:`UnknownOutcomeError`: the caller decides (read the key back, or
  retry when the write is idempotent);
- a 307 (a ``consistency=leader`` read on a follower) is followed to the
  leader named in Location.

Exceptions; each carries the server's ``code`` and ``message``, the HTTP
``status`` (None when no answer came) and the node ``url``::

    RkvClientError
    ├── KeyNotFoundError          404 not_found
    ├── VersionConflictError      412 version_conflict; .current_version
    ├── InvalidRequestError       400 (invalid_key, reserved_key, not_utf8, ...)
    ├── PayloadTooLargeError      413 payload_too_large
    ├── UnavailableError          503: the cluster cannot serve it now; .retry_after
    │   ├── NotAppliedError       not_applied / no_leader: the write was not applied
    │   ├── UnknownOutcomeError   the write may or may not have been applied
    │   └── OverloadedError       overloaded: too many requests in flight
    └── ClusterUnreachableError   no node could be reached (code "unreachable")

Neither client is safe to share between threads; the async one belongs to the
event loop that first used it. Close them (or use ``with`` / ``async with``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import json
import random
import select
import socket
import time
from collections.abc import AsyncIterator, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace, TracebackType
from typing import Any, TypeVar, cast
from urllib.parse import quote, urlsplit

import aiohttp
from yarl import URL

__all__ = [
    "AsyncRkvClient",
    "ClusterUnreachableError",
    "Compare",
    "InvalidRequestError",
    "Item",
    "KeyNotFoundError",
    "NotAppliedError",
    "Op",
    "OverloadedError",
    "PayloadTooLargeError",
    "RetryPolicy",
    "RkvClient",
    "RkvClientError",
    "ScanPage",
    "TxnOpResult",
    "TxnResult",
    "UnavailableError",
    "UnknownOutcomeError",
    "VersionConflictError",
]

DEFAULT_URL = "http://127.0.0.1:8001"
CONSISTENCY_LEVELS = ("linearizable", "leader", "stale")
DISCOVERY_TIMEOUT = 2.0  # seconds for one GET /v1/status while looking for the leader
IDLE_RECONNECT = 15.0  # a pooled connection idle this long is reopened (servers drop them)
MAX_REDIRECTS = 5
SAFE_WRITE_RETRY_CODES = frozenset({"not_applied", "no_leader", "overloaded"})

BytesLike = bytes | bytearray | memoryview | str
T = TypeVar("T")


# -- exceptions ------------------------------------------------------------------------


class RkvClientError(Exception):
    """Base of everything the client raises on purpose."""

    default_code = "error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code or self.default_code
        self.status = status
        self.url = url

    @property
    def message(self) -> str:
        return str(self)


class KeyNotFoundError(RkvClientError):
    default_code = "not_found"


class VersionConflictError(RkvClientError):
    default_code = "version_conflict"

    def __init__(
        self,
        message: str,
        current_version: int,
        *,
        code: str | None = None,
        status: int | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(message, code=code, status=status, url=url)
        self.current_version = current_version


class InvalidRequestError(RkvClientError):
    default_code = "invalid_request"


class PayloadTooLargeError(RkvClientError):
    default_code = "payload_too_large"


class UnavailableError(RkvClientError):
    default_code = "unavailable"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        url: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code=code, status=status, url=url)
        self.retry_after = retry_after


class NotAppliedError(UnavailableError):
    default_code = "not_applied"


class UnknownOutcomeError(UnavailableError):
    default_code = "unknown_outcome"


class OverloadedError(UnavailableError):
    default_code = "overloaded"


class ClusterUnreachableError(RkvClientError):
    default_code = "unreachable"


# -- values ----------------------------------------------------------------------------


def to_bytes(data: BytesLike, what: str = "value") -> bytes:
    """``str`` as UTF-8, bytes-like objects as they are."""
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"{what} must be bytes or str, not {type(data).__name__}")


@dataclass(frozen=True, slots=True)
class Item:
    key: bytes
    value: bytes
    version: int
    create_version: int


@dataclass(frozen=True, slots=True)
class ScanPage:
    items: list[Item]
    next: str | None
    """The cursor for the next page (``start_after=``), None on the last page."""


@dataclass(frozen=True, slots=True)
class Compare:
    """One condition of a transaction; build with the class methods."""

    key: bytes
    target: str  # "version" | "value" | "exists"
    expected: int | bytes | bool

    @classmethod
    def version(cls, key: BytesLike, version: int) -> Compare:
        """The key's version is ``version`` (0: the key does not exist)."""
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError("a compared version must be a non-negative integer")
        return cls(to_bytes(key, "key"), "version", version)

    @classmethod
    def value(cls, key: BytesLike, value: BytesLike) -> Compare:
        """The key exists and holds exactly ``value``."""
        return cls(to_bytes(key, "key"), "value", to_bytes(value))

    @classmethod
    def exists(cls, key: BytesLike, flag: bool = True) -> Compare:
        """The key exists (``flag`` True) or does not (False)."""
        return cls(to_bytes(key, "key"), "exists", bool(flag))

    def to_json(self) -> dict[str, Any]:
        expected = self.expected
        if isinstance(expected, bytes):
            return {"key": _b64(self.key), "value": _b64(expected)}
        return {"key": _b64(self.key), self.target: expected}


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a transaction branch; build with the class methods."""

    kind: str  # "put" | "delete" | "get"
    key: bytes
    value: bytes | None = None

    @classmethod
    def put(cls, key: BytesLike, value: BytesLike) -> Op:
        return cls("put", to_bytes(key, "key"), to_bytes(value))

    @classmethod
    def delete(cls, key: BytesLike) -> Op:
        return cls("delete", to_bytes(key, "key"))

    @classmethod
    def get(cls, key: BytesLike) -> Op:
        return cls("get", to_bytes(key, "key"))

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"op": self.kind, "key": _b64(self.key)}
        if self.value is not None:
            body["value"] = _b64(self.value)
        return body


@dataclass(frozen=True, slots=True)
class TxnOpResult:
    """What one op of the branch that ran did.

    put: ``version`` written. delete: ``found``, ``version`` of the tombstone
    (0 when nothing was deleted). get: ``found`` and, when found, ``value``,
    ``version`` and ``create_version``.
    """

    op: str
    key: bytes
    found: bool
    version: int
    create_version: int = 0
    value: bytes | None = None

    def item(self) -> Item | None:
        """A found get as an :class:`Item`."""
        if self.op != "get" or not self.found or self.value is None:
            return None
        return Item(self.key, self.value, self.version, self.create_version)


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    """True when every compare held (the success branch ran)."""
    version: int
    results: tuple[TxnOpResult, ...]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard a client tries before giving up.

    ``max_attempts`` requests in all (discovery's status requests not
    counted); pauses grow from ``initial_backoff`` to ``max_backoff`` (with
    jitter); no new attempt starts ``max_elapsed`` seconds after the first.
    ``RetryPolicy(max_attempts=1)`` never retries.
    """

    max_attempts: int = 8
    initial_backoff: float = 0.1
    max_backoff: float = 1.0
    max_elapsed: float = 15.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.initial_backoff < 0 or self.max_backoff < self.initial_backoff:
            raise ValueError("backoffs must satisfy 0 <= initial_backoff <= max_backoff")
        if self.max_elapsed < 0:
            raise ValueError("max_elapsed must be non-negative")

    def backoff(self, retry: int) -> float:
        """The pause before retry number ``retry`` (1, 2, ...): equal jitter."""
        ceiling = min(self.max_backoff, self.initial_backoff * 2.0 ** max(0, retry - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)


# -- encoding helpers --------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise RkvClientError(f"the server sent a {what} that is not a string", code="bad_response")
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise RkvClientError(
            f"the server sent a {what} that is not base64", code="bad_response"
        ) from None


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
        kind = str(op.get("op"))
        value = op.get("value")
        results.append(
            TxnOpResult(
                op=kind,
                key=_unb64(op.get("key"), "key"),
                found=bool(op.get("found", kind == "put")),
                version=int(op.get("version", 0)),
                create_version=int(op.get("create_version", 0)),
                value=None if value is None else _unb64(value, "value"),
            )
        )
    return TxnResult(bool(raw.get("succeeded")), int(raw.get("version", 0)), tuple(results))


# -- the I/O-free core ---------------------------------------------------------------------
#
# Every operation is a generator that yields what to do (send a request, or
# sleep) and is sent back what happened; RkvClient and AsyncRkvClient only
# perform those actions, so both share the retry and leader logic.


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


def _describe(failure: _Failure) -> str:
    error = failure.error
    text = str(error) or type(error).__name__
    if isinstance(error, TimeoutError | socket.timeout):
        return "timed out"
    return text


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: rkv never sends one


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
    if status == 404 and code == "not_found":
        return KeyNotFoundError(message, **common)
    if status == 412:
        current = body.get("current_version") if isinstance(body, dict) else None
        return VersionConflictError(
            message, int(current) if isinstance(current, int) else -1, **common
        )
    if status == 413:
        return PayloadTooLargeError(message, **common)
    if status == 400:
        return InvalidRequestError(message, **common)
    if status == 503:
        retry_after = _retry_after(reply.headers)
        kind: type[UnavailableError] = UnavailableError
        if code in ("not_applied", "no_leader"):
            kind = NotAppliedError
        elif code == "unknown_outcome":
            kind = UnknownOutcomeError
        elif code == "overloaded":
            kind = OverloadedError
        return kind(message, retry_after=retry_after, **common)
    return RkvClientError(message, code=code or f"http_{status}", status=status, url=url)


@dataclass
class _CallState:
    """One call's progress across its attempts."""

    write: bool
    attempt: int = 0
    failed: set[str] = field(default_factory=set)  # nodes that did not answer or serve
    last_error: RkvClientError | None = None
    redirect: tuple[str, str] | None = None
    redirects: int = 0
    pause: float = 0.0


class _Core:
    """Node list, leader and retry rules: everything but the I/O."""

    def __init__(self, urls: str | Iterable[str], timeout: float, retry: RetryPolicy) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.nodes = parse_urls(urls)
        self.timeout = timeout
        self.retry = retry
        self.leader: str | None = None
        self.last_failure: str | None = None  # why the last connection failed

    def learn(self, url: str) -> str:
        """Normalize ``url`` and remember it as a node."""
        normalized = normalize_url(url)
        if normalized not in self.nodes:
            self.nodes.append(normalized)
        return normalized

    def forget_leader(self, base: str | None = None) -> None:
        if base is None or self.leader == base:
            self.leader = None

    # -- plans ---------------------------------------------------------------------------

    def _discover(self, failed: set[str]) -> _Plan[str | None]:
        """Ask nodes for the leader; a leader in ``failed`` (unreachable) does not count."""
        for base in [n for n in self.nodes if n not in failed]:
            send = _Send(base, "GET", "/v1/status", None, {}, min(self.timeout, DISCOVERY_TIMEOUT))
            outcome = yield from _exchange(send)
            if isinstance(outcome, _Failure):
                failed.add(base)
                self.last_failure = f"{base}: {_describe(outcome)}"
                continue
            body = outcome.json() if outcome.status == 200 else None
            if not isinstance(body, dict):
                continue
            for member in body.get("members") or []:
                if isinstance(member, dict) and isinstance(member.get("url"), str):
                    with contextlib.suppress(ValueError):
                        self.learn(member["url"])
            leader = body.get("leader")
            if isinstance(leader, dict) and isinstance(leader.get("url"), str):
                try:
                    url = self.learn(leader["url"])
                except ValueError:
                    continue
                if url not in failed:
                    self.leader = url
                    return url
        return None

    def _pick(self, failed: set[str], *, write: bool, stale: bool) -> _Plan[str | None]:
        """Where the next attempt goes; None: nowhere sensible yet (pause, then retry)."""
        if stale:
            for base in self.nodes:
                if base not in failed:
                    return base
            return None
        if self.leader is not None and self.leader not in failed:
            return self.leader
        leader = yield from self._discover(failed)
        if leader is not None:
            return leader
        if write and any(n not in failed for n in self.nodes):
            # Nodes answer but none names a live leader: an election is under way.
            return None
        for base in self.nodes:
            if base not in failed:
                return base  # a follower serves reads (and would forward writes)
        return None

    def call(
        self,
        method: str,
        target: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        *,
        write: bool,
        stale: bool = False,
        only: str | None = None,
        timeout: float | None = None,
    ) -> _Plan[_Reply]:
        """One request with leader routing and retries; returns a 2xx answer or raises.

        ``only``: ask that node, once. ``stale``: any node will do (no leader needed).
        """
        state = _CallState(write)
        started = time.monotonic()
        for attempt in range(1, (1 if only is not None else self.retry.max_attempts) + 1):
            if attempt > 1:
                if time.monotonic() - started + state.pause > self.retry.max_elapsed:
                    break
                if state.pause > 0:
                    yield _Sleep(state.pause)
            state.attempt, state.pause = attempt, 0.0
            if state.redirect is not None:
                (base, path), state.redirect = state.redirect, None
            elif only is not None:
                base, path = only, target
            else:
                picked = yield from self._pick(state.failed, write=write, stale=stale)
                if picked is None:
                    self._nowhere_to_send(state)
                    continue
                base, path = picked, target
            send = _Send(base, method, path, body, headers or {}, timeout or self.timeout)
            outcome = yield from _exchange(send)
            if isinstance(outcome, _Failure):
                self._connection_failed(state, base, outcome)
            elif 200 <= outcome.status < 300:
                return outcome
            else:
                self._refused(state, base, outcome)
        raise state.last_error or self._unreachable()

    def _nowhere_to_send(self, state: _CallState) -> None:
        if all(n in state.failed for n in self.nodes):
            state.last_error = self._unreachable()
            state.failed.clear()  # the next round tries every node again
        elif not isinstance(state.last_error, UnavailableError):
            state.last_error = NotAppliedError(
                "no reachable node knows a live leader (an election may be under way)",
                code="no_leader",
            )
        state.pause = self.retry.backoff(state.attempt)

    def _connection_failed(self, state: _CallState, base: str, failure: _Failure) -> None:
        state.failed.add(base)
        self.forget_leader(base)
        if state.write and failure.sent:
            raise UnknownOutcomeError(
                f"lost the connection to {base} after sending the write "
                f"({_describe(failure)}): it may or may not have been applied",
                url=base,
            )
        self.last_failure = f"{base}: {_describe(failure)}"
        state.last_error = ClusterUnreachableError(f"cannot reach {self.last_failure}", url=base)
        if all(n in state.failed for n in self.nodes):
            state.last_error = self._unreachable()
            state.failed.clear()
            state.pause = self.retry.backoff(state.attempt)

    def _refused(self, state: _CallState, base: str, reply: _Reply) -> None:
        """A non-2xx answer: raise, or arrange the retry (a redirect or a pause)."""
        error = error_from_reply(reply, base)
        location = reply.headers.get("location")
        if reply.status in (301, 302, 307, 308) and location and state.redirects < MAX_REDIRECTS:
            state.redirects += 1
            state.last_error = error
            moved = urlsplit(location)
            try:
                new_base = self.learn(f"{moved.scheme}://{moved.netloc}")
            except ValueError:
                raise error from None
            if reply.status == 307:
                self.leader = new_base  # rkv redirects only to the leader
            if new_base in state.failed:
                state.pause = self.retry.backoff(state.attempt)
            else:
                state.redirect = (new_base, moved.path + (f"?{moved.query}" if moved.query else ""))
            return
        if reply.status != 503:
            if state.write and reply.status >= 500:
                raise UnknownOutcomeError(
                    f"{base} answered HTTP {reply.status} ({error.code}: {error.message}): "
                    "the write may or may not have been applied",
                    code=error.code,
                    status=reply.status,
                    url=base,
                )
            raise error
        if state.write and error.code not in SAFE_WRITE_RETRY_CODES:
            raise error  # unknown_outcome, or nothing says the write was not applied
        state.last_error = error
        if not state.write:
            state.failed.add(base)  # let another node serve the read
            if all(n in state.failed for n in self.nodes):
                state.failed.clear()
        if error.code in ("not_applied", "no_leader") or not state.write:
            self.forget_leader(base)
        retry_after = error.retry_after if isinstance(error, UnavailableError) else None
        state.pause = max(self.retry.backoff(state.attempt), retry_after or 0.0)

    def _unreachable(self) -> ClusterUnreachableError:
        detail = f" (last: {self.last_failure})" if self.last_failure else ""
        return ClusterUnreachableError(
            f"no rkv node could be reached: tried {', '.join(self.nodes)}{detail}"
        )

    # -- operations ----------------------------------------------------------------------

    def get(self, key: BytesLike, consistency: str, min_version: int | None) -> _Plan[Item]:
        raw = to_bytes(key, "key")
        target = key_path(raw) + _query(
            {"consistency": _check_consistency(consistency), "min_version": min_version}
        )
        reply = yield from self.call("GET", target, write=False, stale=consistency == "stale")
        try:
            version = int(reply.headers.get("rkv-version", "0"))
            create_version = int(reply.headers.get("rkv-create-version", "0"))
        except ValueError:
            raise RkvClientError(
                "the server sent a bad version header", code="bad_response"
            ) from None
        return Item(raw, reply.body, version, create_version)

    def put(
        self, key: BytesLike, value: BytesLike, if_version: int | None, create_only: bool
    ) -> _Plan[int]:
        raw = to_bytes(key, "key")
        headers = {"Content-Type": "application/octet-stream"}
        if if_version is not None and create_only:
            raise ValueError("use if_version or create_only, not both")
        if if_version is not None:
            headers["If-Match"] = f'"{_version_arg(if_version)}"'
        if create_only:
            headers["If-None-Match"] = "*"
        reply = yield from self.call("PUT", key_path(raw), to_bytes(value), headers, write=True)
        return _version_of(reply)

    def delete(self, key: BytesLike, if_version: int | None) -> _Plan[int]:
        raw = to_bytes(key, "key")
        headers = {} if if_version is None else {"If-Match": f'"{_version_arg(if_version)}"'}
        reply = yield from self.call("DELETE", key_path(raw), None, headers, write=True)
        return _version_of(reply)

    def scan_page(
        self,
        prefix: BytesLike,
        limit: int,
        start_after: str | None,
        consistency: str,
        min_version: int | None,
    ) -> _Plan[ScanPage]:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        target = "/v1/kv" + _query(
            {
                "prefix": to_bytes(prefix, "prefix") or None,
                "limit": limit,
                "start_after": start_after,
                "consistency": _check_consistency(consistency),
                "min_version": min_version,
            }
        )
        reply = yield from self.call("GET", target, write=False, stale=consistency == "stale")
        body = reply.json()
        if not isinstance(body, dict) or not isinstance(body.get("items"), list):
            raise RkvClientError("the server sent a malformed scan page", code="bad_response")
        cursor = body.get("next")
        return ScanPage(
            [_item(raw) for raw in body["items"]], cursor if isinstance(cursor, str) else None
        )

    def txn_raw(self, body: Mapping[str, Any], encoding: str) -> _Plan[dict[str, Any]]:
        if encoding not in ("base64", "utf-8"):
            raise ValueError("encoding must be base64 or utf-8")
        payload = json.dumps(body).encode()
        target = "/v1/txn" + ("?encoding=utf-8" if encoding == "utf-8" else "")
        headers = {"Content-Type": "application/json"}
        reply = yield from self.call("POST", target, payload, headers, write=True)
        result = reply.json()
        if not isinstance(result, dict):
            raise RkvClientError("the server sent a malformed txn result", code="bad_response")
        return result

    def status(self, url: str | None, timeout: float | None) -> _Plan[dict[str, Any]]:
        only = None if url is None else self.learn(url)
        reply = yield from self.call(
            "GET", "/v1/status", write=False, stale=True, only=only, timeout=timeout
        )
        body = reply.json()
        if not isinstance(body, dict):
            raise RkvClientError("the server sent a malformed status", code="bad_response")
        leader = body.get("leader")
        if only is None and isinstance(leader, dict) and isinstance(leader.get("url"), str):
            with contextlib.suppress(ValueError):
                self.leader = self.learn(leader["url"])
        return body


def _version_arg(version: int) -> int:
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError("a version must be a non-negative integer")
    return version


def _version_of(reply: _Reply) -> int:
    body = reply.json()
    if not isinstance(body, dict) or not isinstance(body.get("version"), int):
        raise RkvClientError("the server sent no version", code="bad_response")
    return int(body["version"])


def _txn_body(
    compare: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]
) -> dict[str, Any]:
    return {
        "compare": [c.to_json() for c in compare],
        "success": [o.to_json() for o in success],
        "failure": [o.to_json() for o in failure],
    }


# -- the blocking client -----------------------------------------------------------------


@dataclass
class _Pooled:
    conn: http.client.HTTPConnection
    prefix: str
    last_used: float = field(default_factory=time.monotonic)


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """True when an idle connection was closed by the server (readable means EOF)."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class _SyncTransport:
    """One persistent keep-alive connection per node (http.client)."""

    def __init__(self) -> None:
        self._pool: dict[str, _Pooled] = {}

    def _connection(self, base: str, timeout: float) -> _Pooled:
        pooled = self._pool.get(base)
        if pooled is not None and (
            time.monotonic() - pooled.last_used > IDLE_RECONNECT or _dropped(pooled.conn)
        ):
            self._drop(base)
            pooled = None
        if pooled is None:
            parts = urlsplit(base)
            kind = (
                http.client.HTTPSConnection
                if parts.scheme == "https"
                else http.client.HTTPConnection
            )
            conn = kind(parts.hostname or "", parts.port, timeout=timeout)
            conn.connect()  # raises before anything is sent
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pooled = _Pooled(conn, parts.path)
            self._pool[base] = pooled
        return pooled

    def _drop(self, base: str) -> None:
        pooled = self._pool.pop(base, None)
        if pooled is not None:
            pooled.conn.close()

    def send(self, action: _Send) -> _Reply | _Failure:
        try:
            pooled = self._connection(action.base, action.timeout)
        except (OSError, http.client.HTTPException) as exc:
            self._drop(action.base)
            return _Failure(exc, sent=False)
        conn = pooled.conn
        try:
            if conn.sock is not None:
                conn.sock.settimeout(action.timeout)
            conn.request(
                action.method,
                pooled.prefix + action.target,
                body=action.body,
                headers=dict(action.headers),
            )
            response = conn.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException) as exc:
            self._drop(action.base)
            return _Failure(exc, sent=True)
        headers = {name.lower(): value for name, value in response.getheaders()}
        if response.will_close:
            self._drop(action.base)
        else:
            pooled.last_used = time.monotonic()
        return _Reply(response.status, headers, body)

    def close(self) -> None:
        for base in list(self._pool):
            self._drop(base)


class RkvClient:
    """A blocking rkv client. ``urls``: one node URL, several, or a comma-separated string."""

    def __init__(
        self,
        urls: str | Iterable[str] = DEFAULT_URL,
        *,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._core = _Core(urls, timeout, retry or RetryPolicy())
        self._transport = _SyncTransport()

    @property
    def nodes(self) -> list[str]:
        """Every node URL known: those given, then those learned from the cluster."""
        return list(self._core.nodes)

    @property
    def leader_url(self) -> str | None:
        """The leader as last seen (None until found)."""
        return self._core.leader

    def _run(self, plan: _Plan[T]) -> T:
        outcome: _Outcome = None
        try:
            while True:
                action = plan.send(outcome)
                if isinstance(action, _Sleep):
                    time.sleep(action.seconds)
                    outcome = None
                else:
                    outcome = self._transport.send(action)
        except StopIteration as stop:
            return cast(T, stop.value)

    def get(
        self,
        key: BytesLike,
        consistency: str = "linearizable",
        min_version: int | None = None,
    ) -> Item:
        """The key's value and versions; raises KeyNotFoundError."""
        return self._run(self._core.get(key, consistency, min_version))

    def put(
        self,
        key: BytesLike,
        value: BytesLike,
        *,
        if_version: int | None = None,
        create_only: bool = False,
    ) -> int:
        """Set the key; returns its new version. ``if_version``: compare-and-set."""
        return self._run(self._core.put(key, value, if_version, create_only))

    def delete(self, key: BytesLike, *, if_version: int | None = None) -> int:
        """Delete the key; returns the tombstone's version. Raises KeyNotFoundError."""
        return self._run(self._core.delete(key, if_version))

    def scan_page(
        self,
        prefix: BytesLike = b"",
        *,
        limit: int = 100,
        start_after: str | None = None,
        consistency: str = "linearizable",
        min_version: int | None = None,
    ) -> ScanPage:
        """One page of keys starting with ``prefix``, in key order."""
        return self._run(self._core.scan_page(prefix, limit, start_after, consistency, min_version))

    def scan(
        self,
        prefix: BytesLike = b"",
        *,
        limit: int = 100,
        consistency: str = "linearizable",
        min_version: int | None = None,
    ) -> Iterator[Item]:
        """Every key starting with ``prefix``, in order, fetched ``limit`` per page."""
        cursor: str | None = None
        while True:
            page = self.scan_page(
                prefix,
                limit=limit,
                start_after=cursor,
                consistency=consistency,
                min_version=min_version,
            )
            yield from page.items
            if page.next is None:
                return
            cursor = page.next

    def txn(
        self,
        compare: Sequence[Compare] = (),
        success: Sequence[Op] = (),
        failure: Sequence[Op] = (),
    ) -> TxnResult:
        """Atomically: if every compare holds run ``success``, else ``failure``."""
        return _txn_result(
            self._run(self._core.txn_raw(_txn_body(compare, success, failure), "base64"))
        )

    def txn_raw(self, body: Mapping[str, Any], *, encoding: str = "base64") -> dict[str, Any]:
        """POST /v1/txn with a body as the API takes it; returns the answer as JSON."""
        return self._run(self._core.txn_raw(body, encoding))

    def status(self, url: str | None = None, *, timeout: float | None = None) -> dict[str, Any]:
        """GET /v1/status of ``url``, or of the first node that answers."""
        return self._run(self._core.status(url, timeout))

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> RkvClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# -- the asyncio client ------------------------------------------------------------------


async def _headers_sent(
    session: aiohttp.ClientSession,
    context: SimpleNamespace,
    params: aiohttp.TraceRequestHeadersSentParams,
) -> None:
    marker = context.trace_request_ctx
    if isinstance(marker, SimpleNamespace):
        marker.sent = True


class _AsyncTransport:
    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            trace = aiohttp.TraceConfig()
            trace.on_request_headers_sent.append(_headers_sent)
            session = aiohttp.ClientSession(
                trace_configs=[trace],
                connector=aiohttp.TCPConnector(keepalive_timeout=IDLE_RECONNECT),
                auto_decompress=False,
            )
            # aiohttp resends a PUT or DELETE once when the connection drops after
            # sending it; for rkv that could apply a write twice, so turn it off.
            if hasattr(session, "_retry_connection"):
                session._retry_connection = False
            self._session = session
        return self._session

    async def send(self, action: _Send) -> _Reply | _Failure:
        marker = SimpleNamespace(sent=False)
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=action.timeout, sock_read=action.timeout
        )
        try:
            async with self._get_session().request(
                action.method,
                URL(action.base + action.target, encoded=True),
                data=action.body,
                headers=dict(action.headers),
                timeout=timeout,
                allow_redirects=False,
                trace_request_ctx=marker,
            ) as response:
                body = await response.read()
                headers = {name.lower(): value for name, value in response.headers.items()}
                return _Reply(response.status, headers, body)
        except (aiohttp.ClientError, OSError) as exc:  # TimeoutError is an OSError
            return _Failure(exc, sent=bool(marker.sent))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class AsyncRkvClient:
    """The asyncio twin of :class:`RkvClient`: the same methods, as coroutines
    (``scan`` is an async iterator: ``async for item in client.scan(...)``)."""

    def __init__(
        self,
        urls: str | Iterable[str] = DEFAULT_URL,
        *,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._core = _Core(urls, timeout, retry or RetryPolicy())
        self._transport = _AsyncTransport()

    @property
    def nodes(self) -> list[str]:
        return list(self._core.nodes)

    @property
    def leader_url(self) -> str | None:
        return self._core.leader

    async def _run(self, plan: _Plan[T]) -> T:
        outcome: _Outcome = None
        try:
            while True:
                action = plan.send(outcome)
                if isinstance(action, _Sleep):
                    await asyncio.sleep(action.seconds)
                    outcome = None
                else:
                    outcome = await self._transport.send(action)
        except StopIteration as stop:
            return cast(T, stop.value)

    async def get(
        self,
        key: BytesLike,
        consistency: str = "linearizable",
        min_version: int | None = None,
    ) -> Item:
        return await self._run(self._core.get(key, consistency, min_version))

    async def put(
        self,
        key: BytesLike,
        value: BytesLike,
        *,
        if_version: int | None = None,
        create_only: bool = False,
    ) -> int:
        return await self._run(self._core.put(key, value, if_version, create_only))

    async def delete(self, key: BytesLike, *, if_version: int | None = None) -> int:
        return await self._run(self._core.delete(key, if_version))

    async def scan_page(
        self,
        prefix: BytesLike = b"",
        *,
        limit: int = 100,
        start_after: str | None = None,
        consistency: str = "linearizable",
        min_version: int | None = None,
    ) -> ScanPage:
        return await self._run(
            self._core.scan_page(prefix, limit, start_after, consistency, min_version)
        )

    async def scan(
        self,
        prefix: BytesLike = b"",
        *,
        limit: int = 100,
        consistency: str = "linearizable",
        min_version: int | None = None,
    ) -> AsyncIterator[Item]:
        cursor: str | None = None
        while True:
            page = await self.scan_page(
                prefix,
                limit=limit,
                start_after=cursor,
                consistency=consistency,
                min_version=min_version,
            )
            for item in page.items:
                yield item
            if page.next is None:
                return
            cursor = page.next

    async def txn(
        self,
        compare: Sequence[Compare] = (),
        success: Sequence[Op] = (),
        failure: Sequence[Op] = (),
    ) -> TxnResult:
        body = _txn_body(compare, success, failure)
        return _txn_result(await self._run(self._core.txn_raw(body, "base64")))

    async def txn_raw(self, body: Mapping[str, Any], *, encoding: str = "base64") -> dict[str, Any]:
        return await self._run(self._core.txn_raw(body, encoding))

    async def status(
        self, url: str | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        return await self._run(self._core.status(url, timeout))

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> AsyncRkvClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
