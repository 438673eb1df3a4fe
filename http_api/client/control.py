"""The control-plane calls: members, alarms, compaction, downloads, audits, log ranges.

The key-value calls (RkvClient) retry and classify every answer; these are the
calls that the CLI, a joining node, catch-up and the audit make to one node or
to the cluster's leader. They share one transport (http.client, standard
library only, so a node's raft thread and a light CLI command can use it), one
redirect rule and one error:

- :func:`request_json` sends one JSON request to the first node that answers,
  following 307 redirects to the leader itself (for every method, with the
  body), and returns ``(status, answer)``; status 0 means no node answered;
- :func:`get_json` reads one JSON document from one URL;
- :func:`open_stream` opens a streamed GET (a snapshot, an audit file, a range
  of the commit log) for the caller to read in chunks.

A refusal (an HTTP status of 400 or more) raises :class:`HttpStatusError`,
an :class:`OSError` like every failure to reach a node, so that callers that
must survive any network trouble (the raft thread) catch one family.

Every call takes ``credentials`` (http_api/client/credentials.py): the CA that
``https://`` URLs are verified against, a client certificate, and the
Authorization header every request carries. A failed TLS handshake is an
``ssl.SSLError`` (an OSError too); :func:`request_json` answers it with code
``tls_failed`` and tries no other URL.
"""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

from http_api.client.credentials import NO_CREDENTIALS, Credentials
from http_api.client.wire import tls_failure

MAX_REDIRECTS = 5

HeadersHook = Callable[[], Mapping[str, str]]
"""Extra request headers, asked for on every request (auth, issue 16: a member sends a
fresh member token on its calls to other members)."""


class HttpStatusError(OSError):
    """A node answered with an error status; ``answer`` is its JSON body (or {})."""

    def __init__(self, url: str, status: int, answer: Mapping[str, Any], reason: str) -> None:
        self.url = url
        self.status = status
        self.answer = dict(answer)
        self.reason = reason
        super().__init__(f"{url}: HTTP {status}: {self.describe()}")

    @property
    def code(self) -> str:
        return str(self.answer.get("code") or f"http_{self.status}")

    def describe(self) -> str:
        """``code: message`` from the node's JSON error, else the status line."""
        if "message" in self.answer:
            return f"{self.code}: {self.answer['message']}"
        return f"HTTP {self.status} {self.reason}"


def path_part(text: str) -> str:
    """``text`` quoted as one segment of a URL path (ids, audit ids, file names)."""
    return quote(text, safe="")


def _connect(
    url: str, timeout: float, credentials: Credentials
) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise http.client.InvalidURL(f"not an http(s) URL: {url!r}")
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    if parts.scheme == "https":
        context = credentials.ssl_context()
        return (
            http.client.HTTPSConnection(
                parts.hostname, parts.port, timeout=timeout, context=context
            ),
            target,
        )
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout), target


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw or b"{}")
    except ValueError:
        return None


def _exchange(
    url: str,
    method: str,
    body: bytes | None,
    timeout: float,
    credentials: Credentials | None,
    *,
    extra_headers: HeadersHook | None = None,
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """One request; the caller reads and closes. Network failures raise OSError."""
    credentials = credentials or NO_CREDENTIALS
    conn, target = _connect(url, timeout, credentials)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    headers.update(credentials.headers())
    if extra_headers is not None:  # a member's token (auth, issue 16)
        headers.update(extra_headers())
    try:
        conn.request(method, target, body=body, headers=headers)
        return conn, conn.getresponse()
    except http.client.HTTPException as exc:
        conn.close()
        raise OSError(f"{url}: {exc!r}") from exc
    except BaseException:
        conn.close()
        raise


def _refusal(url: str, response: http.client.HTTPResponse) -> HttpStatusError:
    try:
        answer = _decode(response.read(64 * 1024))
    except (OSError, http.client.HTTPException):
        answer = None
    return HttpStatusError(
        url, response.status, answer if isinstance(answer, dict) else {}, response.reason
    )


def request_json(
    urls: Sequence[str],
    method: str,
    path: str,
    body: Any = None,
    timeout: float = 30.0,
    *,
    credentials: Credentials | None = None,
    headers: HeadersHook | None = None,
) -> tuple[int, Any]:
    """One request to the first of ``urls`` that answers, following 307s to the leader.

    Returns (status, JSON answer); status 0 when no node answered (the answer then
    carries code ``unreachable`` and the last failure, or ``tls_failed``)."""
    data = None if body is None else json.dumps(body).encode()
    last: Any = {"code": "unreachable", "message": "no URL given"}
    for base in urls:
        target = f"{base.rstrip('/')}{path}"
        for _ in range(MAX_REDIRECTS):
            try:
                conn, response = _exchange(
                    target, method, data, timeout, credentials, extra_headers=headers
                )
                try:
                    raw = response.read()
                finally:
                    conn.close()
            except (OSError, ValueError) as exc:  # ValueError: http.client.InvalidURL
                if (problem := tls_failure(exc)) is not None:
                    return 0, {"code": "tls_failed", "message": f"{base}: {problem}"}
                last = {"code": "unreachable", "message": f"{base}: {exc}"}
                break
            location = response.getheader("Location")
            if response.status == 307 and location:
                target = urljoin(target, location)
                continue
            answer = _decode(raw)
            if answer is None:
                answer = {"code": f"http_{response.status}", "message": response.reason}
            return response.status, answer
        else:
            last = {"code": "unreachable", "message": f"{base}: too many redirects"}
    return 0, last


def post_json(
    url: str,
    body: Any,
    timeout: float,
    *,
    credentials: Credentials | None = None,
    headers: HeadersHook | None = None,
) -> tuple[int, dict[str, Any], str | None]:
    """POST ``body`` to ``url`` without following a redirect: (status, answer, Location)."""
    data = json.dumps(body).encode()
    conn, response = _exchange(url, "POST", data, timeout, credentials, extra_headers=headers)
    try:
        answer = _decode(response.read())
    finally:
        conn.close()
    return (
        response.status,
        answer if isinstance(answer, dict) else {},
        response.getheader("Location"),
    )


def get_json(
    url: str,
    timeout: float,
    *,
    credentials: Credentials | None = None,
    headers: HeadersHook | None = None,
) -> Any:
    """The JSON document at ``url``. Raises HttpStatusError, OSError or ValueError."""
    with open_stream(url, timeout, credentials=credentials, headers=headers) as response:
        return json.loads(response.read())


@contextmanager
def open_stream(
    url: str,
    timeout: float,
    *,
    credentials: Credentials | None = None,
    headers: HeadersHook | None = None,
) -> Iterator[http.client.HTTPResponse]:
    """A GET whose body the caller reads in chunks (``.read(n)``, ``.getheader()``).

    Raises HttpStatusError for an error status, OSError when the node cannot be
    reached, ValueError for a URL that is not http(s)."""
    conn, response = _exchange(url, "GET", None, timeout, credentials, extra_headers=headers)
    try:
        if response.status >= 400:
            raise _refusal(url, response)
        yield response
    finally:
        conn.close()


class ControlClient:
    """The control-plane endpoints by name, over :func:`request_json` and :func:`open_stream`.

    Cluster-wide calls (members, membership changes, starting an audit) go to the
    first of ``urls`` that answers and follow redirects to the leader; per-node
    calls (status, compaction, an audit's export, downloads) name their node.
    Calls answer ``(status, JSON answer)``, status 0 when no node answered;
    downloads are context managers yielding the response to read in chunks.
    """

    def __init__(
        self,
        urls: Sequence[str],
        timeout: float = 30.0,
        credentials: Credentials | None = None,
        headers: HeadersHook | None = None,
    ) -> None:
        self.urls = [url.rstrip("/") for url in urls]
        self.timeout = timeout
        self.credentials = credentials or NO_CREDENTIALS
        self.headers = headers  # a member's token (auth, issue 16): sent on every call

    def _json(
        self, urls: Sequence[str], method: str, path: str, body: Any = None
    ) -> tuple[int, Any]:
        return request_json(
            urls,
            method,
            path,
            body,
            self.timeout,
            credentials=self.credentials,
            headers=self.headers,
        )

    def _stream(self, url: str) -> AbstractContextManager[http.client.HTTPResponse]:
        return open_stream(url, self.timeout, credentials=self.credentials, headers=self.headers)

    def members(self) -> tuple[int, Any]:
        return self._json(self.urls, "GET", "/v1/cluster/members", None)

    def add_member(self, node_id: str, raft_address: str, url: str) -> tuple[int, Any]:
        body = {"id": node_id, "raft_address": raft_address, "url": url}
        return self._json(self.urls, "POST", "/v1/cluster/members", body)

    def set_member_url(self, node_id: str, url: str) -> tuple[int, Any]:
        path = "/v1/cluster/members/" + path_part(node_id)
        return self._json(self.urls, "PUT", path, {"url": url})

    def remove_member(self, node_id: str) -> tuple[int, Any]:
        path = "/v1/cluster/members/" + path_part(node_id)
        return self._json(self.urls, "DELETE", path, None)

    def alarms(self) -> tuple[int, Any]:
        return self._json(self.urls, "GET", "/v1/alarms", None)

    def disarm_alarms(self, member: str | None, kind: str) -> tuple[int, Any]:
        body = {"kind": kind} if member is None else {"kind": kind, "member": member}
        return self._json(self.urls, "POST", "/v1/alarms:disarm", body)

    def start_audit(
        self, audit_id: str | None = None, buckets: int | None = None
    ) -> tuple[int, Any]:
        body: dict[str, Any] = {}
        if audit_id is not None:
            body["audit_id"] = audit_id
        if buckets is not None:
            body["buckets"] = buckets
        return self._json(self.urls, "POST", "/v1/audit", body)

    def status(self, node_url: str) -> tuple[int, Any]:
        return self._json([node_url], "GET", "/v1/status", None)

    def audit_status(self, node_url: str, audit_id: str) -> tuple[int, Any]:
        path = "/v1/audit/" + path_part(audit_id)
        return self._json([node_url], "GET", path, None)

    def compact(self, node_url: str) -> tuple[int, Any]:
        """Force a compaction of that node's commit log (it may take minutes)."""
        return self._json([node_url], "POST", "/v1/admin/compact", None)

    def audit_file(
        self, node_url: str, audit_id: str, name: str
    ) -> AbstractContextManager[http.client.HTTPResponse]:
        """One file of that node's export of an audit, streamed."""
        path = f"/v1/audit/{path_part(audit_id)}/files/{path_part(name)}"
        return self._stream(node_url.rstrip("/") + path)

    def snapshot(
        self, node_url: str, transfer: str | None = None, after: bytes | None = None
    ) -> AbstractContextManager[http.client.HTTPResponse]:
        """That node's whole state (GET /v1/snapshot), streamed; with ``transfer`` (the
        Rkv-Transfer-Id of a cut download) and ``after`` (the last key received), the
        rest of it from the same read view (HttpStatusError 410 once it is let go)."""
        url = snapshot_url(node_url)
        if transfer is not None:
            key = base64.urlsafe_b64encode(after or b"").decode().rstrip("=")
            url += f"?transfer={quote(transfer)}&after={key}"
        return self._stream(url)

    def release_snapshot(self, node_url: str, transfer: str) -> tuple[int, Any]:
        """Let that node drop the view it holds for a finished download."""
        path = f"/v1/snapshot?transfer={quote(transfer)}"
        return self._json([node_url.rstrip("/")], "DELETE", path, None)

    def log_range(
        self, node_url: str, first: int, last: int
    ) -> AbstractContextManager[http.client.HTTPResponse]:
        """Offsets ``first``..``last`` of that node's commit log, served only while no
        compaction has touched them (HttpStatusError 409 otherwise), streamed."""
        path = f"/v1/log?from={first}&to={last}&complete=1"
        return self._stream(node_url.rstrip("/") + path)


def snapshot_url(url: str) -> str:
    """The snapshot endpoint of a node given by its base URL (or the endpoint itself)."""
    url = url.rstrip("/")
    return url if url.endswith("/v1/snapshot") else url + "/v1/snapshot"
