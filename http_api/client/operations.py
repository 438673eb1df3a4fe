"""Each client operation as an I/O-free plan, and the base both clients share.

:class:`_Core` builds the request of each operation (get, put, delete, incr,
append, scan, txn, status), sends it through the rules of
:class:`http_api.client.rules._Router` and decodes the answer. Writes are
built as :class:`_Write` requests first, so that an idempotent producer
(:mod:`http_api.client.producer`) sends exactly the same requests with its
headers added. :class:`_BaseClient` holds a core and a transport;
:class:`http_api.client.RkvClient` and :class:`http_api.client.AsyncRkvClient`
only run its plans, performing each request and sleep they yield.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from http_api.client.credentials import NO_CREDENTIALS, Credentials
from http_api.client.errors import RkvClientError
from http_api.client.lease_model import (
    FencingLike,
    HasLeaseId,
    check_ttl,
    fencing_headers,
    lease_arg,
)
from http_api.client.model import (
    Alarm,
    BytesLike,
    Compare,
    Item,
    Op,
    ScanPage,
    TxnResult,
    alarms_of,
    int64_arg,
    to_bytes,
)
from http_api.client.rules import RetryPolicy, _Router
from http_api.client.wire import (
    DEFAULT_URL,
    _check_consistency,
    _incr_value_of,
    _item,
    _Plan,
    _query,
    _Reply,
    _size_of,
    _txn_body,
    _txn_of,
    _txn_raw_of,
    _version_arg,
    _version_of,
    key_path,
)

T = TypeVar("T")
TransportT = TypeVar("TransportT")


@dataclass(frozen=True, slots=True)
class _Write(Generic[T]):
    """A write as a request and the decoder of its answer: a plain client sends
    it through :meth:`_Core.write`, a producer with its headers added
    (:mod:`http_api.client.producer`)."""

    method: str
    target: str
    body: bytes | None
    headers: Mapping[str, str]
    decode: Callable[[_Reply], T]


class _Core(_Router):
    """The node list, leader and retry rules, and every operation as a plan."""

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

    def write(self, request: _Write[T]) -> _Plan[T]:
        """A plain write: retried only when it was certainly not applied."""
        reply = yield from self.call(
            request.method, request.target, request.body, request.headers, write=True
        )
        return request.decode(reply)

    # -- writes as requests ----------------------------------------------------------

    @staticmethod
    def put_request(
        key: BytesLike,
        value: BytesLike,
        if_version: int | None,
        create_only: bool,
        *,
        lease: int | HasLeaseId | None = None,
        ttl: int | None = None,
        fencing: FencingLike | None = None,
    ) -> _Write[int]:
        raw = to_bytes(key, "key")
        headers = {"Content-Type": "application/octet-stream", **fencing_headers(fencing)}
        if if_version is not None and create_only:
            raise ValueError("use if_version or create_only, not both")
        if lease is not None and ttl is not None:
            raise ValueError("use lease or ttl, not both")
        if if_version is not None:
            headers["If-Match"] = f'"{_version_arg(if_version)}"'
        if create_only:
            headers["If-None-Match"] = "*"
        target = key_path(raw) + _query(
            {
                "lease": None if lease is None else lease_arg(lease),
                "ttl": None if ttl is None else check_ttl(ttl),
            }
        )
        return _Write("PUT", target, to_bytes(value), headers, _version_of)

    @staticmethod
    def delete_request(
        key: BytesLike, if_version: int | None, fencing: FencingLike | None = None
    ) -> _Write[int]:
        raw = to_bytes(key, "key")
        headers = fencing_headers(fencing)
        if if_version is not None:
            headers["If-Match"] = f'"{_version_arg(if_version)}"'
        return _Write("DELETE", key_path(raw), None, headers, _version_of)

    @staticmethod
    def incr_request(key: BytesLike, by: int, fencing: FencingLike | None = None) -> _Write[int]:
        target = key_path(to_bytes(key, "key")) + _query({"op": "incr", "by": int64_arg(by)})
        return _Write("POST", target, None, fencing_headers(fencing), _incr_value_of)

    @staticmethod
    def append_request(
        key: BytesLike, value: BytesLike, fencing: FencingLike | None = None
    ) -> _Write[int]:
        target = key_path(to_bytes(key, "key")) + _query({"op": "append"})
        headers = {"Content-Type": "application/octet-stream", **fencing_headers(fencing)}
        return _Write("POST", target, to_bytes(value), headers, _size_of)

    @staticmethod
    def txn_raw_request(
        body: Mapping[str, Any], encoding: str, fencing: FencingLike | None = None
    ) -> _Write[dict[str, Any]]:
        if encoding not in ("base64", "utf-8"):
            raise ValueError("encoding must be base64 or utf-8")
        payload = json.dumps(body).encode()
        target = "/v1/txn" + ("?encoding=utf-8" if encoding == "utf-8" else "")
        headers = {"Content-Type": "application/json", **fencing_headers(fencing)}
        return _Write("POST", target, payload, headers, _txn_raw_of)

    @staticmethod
    def txn_request(
        compare: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op],
        fencing: FencingLike | None = None,
    ) -> _Write[TxnResult]:
        payload = json.dumps(_txn_body(compare, success, failure)).encode()
        headers = {"Content-Type": "application/json", **fencing_headers(fencing)}
        return _Write("POST", "/v1/txn", payload, headers, _txn_of)

    # -- plain writes ------------------------------------------------------------------

    def put(
        self,
        key: BytesLike,
        value: BytesLike,
        if_version: int | None,
        create_only: bool,
        *,
        lease: int | HasLeaseId | None = None,
        ttl: int | None = None,
        fencing: FencingLike | None = None,
    ) -> _Plan[int]:
        request = self.put_request(
            key, value, if_version, create_only, lease=lease, ttl=ttl, fencing=fencing
        )
        return self.write(request)

    def delete(
        self, key: BytesLike, if_version: int | None, fencing: FencingLike | None = None
    ) -> _Plan[int]:
        return self.write(self.delete_request(key, if_version, fencing))

    def incr(self, key: BytesLike, by: int, fencing: FencingLike | None = None) -> _Plan[int]:
        return self.write(self.incr_request(key, by, fencing))

    def append(
        self, key: BytesLike, value: BytesLike, fencing: FencingLike | None = None
    ) -> _Plan[int]:
        return self.write(self.append_request(key, value, fencing))

    def txn_raw(
        self, body: Mapping[str, Any], encoding: str, fencing: FencingLike | None = None
    ) -> _Plan[dict[str, Any]]:
        return self.write(self.txn_raw_request(body, encoding, fencing))

    def txn(
        self,
        compare: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op],
        fencing: FencingLike | None = None,
    ) -> _Plan[TxnResult]:
        return self.write(self.txn_request(compare, success, failure, fencing))

    # -- reads -------------------------------------------------------------------------

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

    def scan_pages(
        self, prefix: BytesLike, limit: int, consistency: str, min_version: int | None
    ) -> _ScanPages:
        """Every page of a scan, each a plan: ``while (plan := pages.next()) is not None``."""
        return _ScanPages(self, prefix, limit, consistency, min_version)

    def alarms(self) -> _Plan[list[Alarm]]:
        reply = yield from self.call("GET", "/v1/alarms", write=False, stale=True)
        return _alarms_in(reply.json())

    def disarm_alarms(self, member: str | None, kind: str) -> _Plan[list[Alarm]]:
        body: dict[str, str] = {"kind": kind}
        if member is not None:
            body["member"] = member
        headers = {"Content-Type": "application/json"}
        reply = yield from self.call(
            "POST", "/v1/alarms:disarm", json.dumps(body).encode(), headers, write=True
        )
        return _alarms_in(reply.json())

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


def _alarms_in(body: Any) -> list[Alarm]:
    try:
        return alarms_of(body)
    except (ValueError, KeyError, TypeError):
        raise RkvClientError(
            "the server sent a malformed alarm list", code="bad_response"
        ) from None


class _ScanPages:
    """A scan's pages in order: each ``next()`` plan fetches the page after the last."""

    def __init__(
        self,
        core: _Core,
        prefix: BytesLike,
        limit: int,
        consistency: str,
        min_version: int | None,
    ) -> None:
        self._core = core
        self._args = (prefix, limit, consistency, min_version)
        self._cursor: str | None = None
        self._done = False

    def next(self) -> _Plan[ScanPage] | None:
        """The plan of the next page; None after the last one."""
        return None if self._done else self._page()

    def _page(self) -> _Plan[ScanPage]:
        prefix, limit, consistency, min_version = self._args
        page = yield from self._core.scan_page(
            prefix, limit, self._cursor, consistency, min_version
        )
        self._cursor = page.next
        self._done = page.next is None
        return page


class _BaseClient(Generic[TransportT]):
    """What both clients share: the core (its nodes and leader) and a transport."""

    def __init__(
        self,
        urls: str | Iterable[str] = DEFAULT_URL,
        *,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        self._core = _Core(urls, timeout, retry or RetryPolicy())
        self.credentials = credentials or NO_CREDENTIALS
        """What the client presents: its CA, certificate, user or token."""
        self._transport = self._new_transport(self.credentials)

    def _new_transport(self, credentials: Credentials) -> TransportT:
        raise NotImplementedError

    @property
    def nodes(self) -> list[str]:
        """Every node URL known: those given, then those learned from the cluster."""
        return list(self._core.nodes)

    @property
    def leader_url(self) -> str | None:
        """The leader as last seen (None until found)."""
        return self._core.leader
