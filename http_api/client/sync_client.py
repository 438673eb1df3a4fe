"""The blocking client: :class:`RkvClient` over http.client (standard library
only), one persistent keep-alive connection per node (its idempotent producer,
:class:`Producer`, is in :mod:`http_api.client.sync_producer`).

Not safe to share between threads. Close it (or use ``with``).
"""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

from http_api.client.auth_methods import _SyncAuthMethods
from http_api.client.bulk_load import LOAD_PATH, LoadProgress, LoadSource, LoadTally, source_lines
from http_api.client.credentials import Credentials
from http_api.client.errors import ClusterUnreachableError, RkvClientError
from http_api.client.lease_methods import _SyncLeaseMethods
from http_api.client.lease_model import FencingLike, HasLeaseId, Lease
from http_api.client.lease_plans import _LeasePlans
from http_api.client.model import Alarm, BytesLike, Compare, Item, Op, ScanPage, TxnResult
from http_api.client.observing import MAX_LINE
from http_api.client.operations import _BaseClient
from http_api.client.producer import DEFAULT_DEADLINE, _ProducerCore
from http_api.client.rules import IDLE_RECONNECT, RetryPolicy
from http_api.client.sync_load import run_load
from http_api.client.sync_producer import Producer
from http_api.client.wire import _Failure, _Outcome, _Plan, _Reply, _Send, _Sleep

T = TypeVar("T")

KEEPALIVE_RETRY = RetryPolicy(
    max_attempts=4, initial_backoff=0.05, max_backoff=0.25, max_elapsed=1.0
)
"""A keeper's retries within one keepalive (it tries again itself until the TTL)."""


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


def _no_lines() -> Generator[bytes, None, None]:
    yield from ()


def _lines(
    conn: http.client.HTTPConnection, response: http.client.HTTPResponse
) -> Generator[bytes, None, None]:
    try:
        while line := response.readline(MAX_LINE):
            yield line
    except http.client.HTTPException as exc:
        raise OSError(f"the stream broke: {exc!r}") from exc
    finally:
        conn.close()


class _SyncTransport:
    """One persistent keep-alive connection per node (http.client)."""

    def __init__(self, credentials: Credentials) -> None:
        self._pool: dict[str, _Pooled] = {}
        self._ssl = credentials.ssl_context()  # read once: the files are not read per call
        self._auth = credentials.headers()

    @property
    def auth(self) -> dict[str, str]:
        """The headers that present the client's credentials."""
        return self._auth

    def connect(self, base: str, timeout: float) -> _Pooled:
        """A new connection of its own to ``base`` (a bulk load streams on it)."""
        return self._connect(base, timeout)

    def _connect(self, base: str, timeout: float) -> _Pooled:
        """A new connection to ``base`` (raises before anything is sent)."""
        parts = urlsplit(base)
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(
                parts.hostname or "", parts.port, timeout=timeout, context=self._ssl
            )
        else:
            conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Pooled(conn, parts.path)

    def _connection(self, base: str, timeout: float) -> _Pooled:
        pooled = self._pool.get(base)
        if pooled is not None and (
            time.monotonic() - pooled.last_used > IDLE_RECONNECT or _dropped(pooled.conn)
        ):
            self._drop(base)
            pooled = None
        if pooled is None:
            pooled = self._connect(base, timeout)
            self._pool[base] = pooled
        return pooled

    def stream(self, action: _Send) -> tuple[_Reply | _Failure, Generator[bytes, None, None]]:
        """A GET whose answer is read line by line (NDJSON), on a connection of its own:
        the answer (a 200 with an empty body, or the whole refusal) and the lines (a
        read failure raises OSError from them; closing them closes the connection)."""
        try:
            pooled = self._connect(action.base, action.timeout)
        except (OSError, http.client.HTTPException) as exc:
            return _Failure(exc, sent=False), _no_lines()
        conn = pooled.conn
        try:
            conn.request(
                action.method,
                pooled.prefix + action.target,
                headers={**action.headers, **self._auth},
            )
            response = conn.getresponse()
            headers = {name.lower(): value for name, value in response.getheaders()}
            if response.status != 200:
                body = response.read(MAX_LINE)
                conn.close()
                return _Reply(response.status, headers, body), _no_lines()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            return _Failure(exc, sent=True), _no_lines()
        return _Reply(200, headers, b""), _lines(conn, response)

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
                headers={**action.headers, **self._auth},
            )
            response = conn.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException) as exc:
            self._drop(action.base)
            return _Failure(exc, sent=True)
        except BaseException:
            # Interrupted half-way (a signal handler's exception): the connection is in
            # the middle of an exchange and cannot carry the next request.
            self._drop(action.base)
            raise
        headers = {name.lower(): value for name, value in response.getheaders()}
        if response.will_close:
            self._drop(action.base)
        else:
            pooled.last_used = time.monotonic()
        return _Reply(response.status, headers, body)

    def close(self) -> None:
        for base in list(self._pool):
            self._drop(base)


class RkvClient(_SyncAuthMethods, _SyncLeaseMethods, _BaseClient[_SyncTransport]):
    """A blocking rkv client. ``urls``: one node URL, several, or a comma-separated string;
    ``credentials``: the CA to trust, a client certificate, a user or a token
    (:class:`http_api.client.Credentials`). Users and roles: the methods of
    :mod:`http_api.client.auth_methods`; leases, locks and elections: those of
    :mod:`http_api.client.lease_methods`."""

    def _new_transport(self, credentials: Credentials) -> _SyncTransport:
        return _SyncTransport(credentials)

    def _stream(self, action: _Send) -> tuple[_Reply | _Failure, Generator[bytes, None, None]]:
        return self._transport.stream(action)

    def _keepalive_sender(self) -> tuple[Callable[[int, float], Lease], Callable[[], None]]:
        # A client of its own for the keeper thread: this one is not shared between
        # threads. Its retries are short; the keeper retries until the lease's TTL.
        sender = RkvClient(
            self._core.nodes,
            timeout=self._core.timeout,
            retry=KEEPALIVE_RETRY,
            credentials=self.credentials,
        )
        sender._core.leader = self._core.leader
        plans = _LeasePlans(sender._core)

        def renew(lease_id: int, timeout: float) -> Lease:
            return sender._run(plans.keepalive(lease_id, timeout))

        return renew, sender.close

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
        lease: int | HasLeaseId | None = None,
        ttl: int | None = None,
        fencing: FencingLike | None = None,
    ) -> int:
        """Set the key; returns its new version. ``if_version``: compare-and-set.
        ``lease`` (an id or a lease): attach the key to it; ``ttl``: grant a lease of
        that many seconds for this key alone (nothing keeps it alive). ``fencing``: a
        held lock (or a (name, token) pair): refused with Fenced unless it still holds."""
        return self._run(
            self._core.put(
                key, value, if_version, create_only, lease=lease, ttl=ttl, fencing=fencing
            )
        )

    def delete(
        self,
        key: BytesLike,
        *,
        if_version: int | None = None,
        fencing: FencingLike | None = None,
    ) -> int:
        """Delete the key; returns the tombstone's version. Raises KeyNotFoundError."""
        return self._run(self._core.delete(key, if_version, fencing))

    def incr(self, key: BytesLike, by: int = 1, *, fencing: FencingLike | None = None) -> int:
        """Add ``by`` (signed 64-bit) to the decimal integer at ``key`` (absent: 0);
        returns the new value. Raises NotAnIntegerError, IntegerOverflowError."""
        return self._run(self._core.incr(key, by, fencing))

    def append(
        self, key: BytesLike, value: BytesLike, *, fencing: FencingLike | None = None
    ) -> int:
        """Append ``value`` to the key's value (absent: create it); returns the new size.
        Raises PayloadTooLargeError past the value size limit."""
        return self._run(self._core.append(key, value, fencing))

    def producer(
        self,
        transactional_id: str | None = None,
        *,
        reinit_on_fence: bool = False,
        deadline: float = DEFAULT_DEADLINE,
    ) -> Producer:
        """Register an idempotent producer (``POST /v1/producers``) writing through this
        client. With ``transactional_id``: the same producer id with the next epoch,
        which fences every producer holding an older one. ``deadline``: seconds each
        of its calls keeps sending its write. The rules: :mod:`http_api.client.producer`."""
        state = _ProducerCore(
            self._core, transactional_id, reinit_on_fence=reinit_on_fence, deadline=deadline
        )
        self._run(state.init())
        return Producer(self, state)

    def resume_producer(
        self,
        producer_id: int,
        epoch: int,
        next_sequence: int = 0,
        *,
        transactional_id: str | None = None,
        reinit_on_fence: bool = False,
        deadline: float = DEFAULT_DEADLINE,
    ) -> Producer:
        """A producer registered before (by this process or another), writing from
        ``next_sequence`` on; nothing is sent now. Resending a sequence already used
        returns that write's original result (``last_was_duplicate``).
        ``transactional_id``: what ``reinit()`` registers again."""
        state = _ProducerCore.resumed(
            self._core,
            producer_id,
            epoch,
            next_sequence,
            transactional_id=transactional_id,
            reinit_on_fence=reinit_on_fence,
            deadline=deadline,
        )
        return Producer(self, state)

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
        pages = self._core.scan_pages(prefix, limit, consistency, min_version)
        while (plan := pages.next()) is not None:
            yield from self._run(plan).items

    def txn(
        self,
        compare: Sequence[Compare] = (),
        success: Sequence[Op] = (),
        failure: Sequence[Op] = (),
        *,
        fencing: FencingLike | None = None,
    ) -> TxnResult:
        """Atomically: if every compare holds run ``success``, else ``failure``."""
        return self._run(self._core.txn(compare, success, failure, fencing))

    def txn_raw(
        self,
        body: Mapping[str, Any],
        *,
        encoding: str = "base64",
        fencing: FencingLike | None = None,
    ) -> dict[str, Any]:
        """POST /v1/txn with a body as the API takes it; returns the answer as JSON."""
        return self._run(self._core.txn_raw(body, encoding, fencing))

    def alarms(self) -> list[Alarm]:
        """The raised alarms (GET /v1/alarms, from any node: every node holds them)."""
        return self._run(self._core.alarms())

    def disarm_alarms(self, member: str | None = None, kind: str = "nospace") -> list[Alarm]:
        """Disarm ``kind`` on ``member`` (None: every member) once space is freed; the
        alarms left. Needs the admin role when auth is on."""
        return self._run(self._core.disarm_alarms(member, kind))

    def status(self, url: str | None = None, *, timeout: float | None = None) -> dict[str, Any]:
        """GET /v1/status of ``url``, or of the first node that answers."""
        return self._run(self._core.status(url, timeout))

    def load(
        self,
        source: LoadSource,
        *,
        skip: int = 0,
        encoding: str = "base64",
        progress: Callable[[LoadProgress], None] | None = None,
    ) -> LoadProgress:
        """Bulk load (POST /v1/kv:load, docs/BULK_LOAD.md): ``source`` is an
        iterable of (key, value) pairs, or the path of a JSON Lines file whose keys and
        values are in ``encoding`` (base64 or utf-8). The first ``skip`` pairs or lines
        are not sent (a resume). ``progress`` is called after each committed chunk.
        Returns the totals once everything is committed; raises
        :class:`LoadInterrupted` (``.progress.lines``: what to skip to resume)."""
        lines = source_lines(source, skip)
        if lines is None:
            return LoadProgress(0, skip, 0)
        target, url, conn = self._load_connection(encoding)
        return run_load(
            conn,
            target,
            url,
            headers=self._transport.auth,
            lines=lines,
            tally=LoadTally(skip),
            progress=progress,
        )

    def _load_connection(self, encoding: str) -> tuple[str, str, http.client.HTTPConnection]:
        """A new connection to the leader if known (a follower forwards the chunks to it
        through raft), else to the first node that accepts one."""
        query = "?encoding=utf-8" if encoding == "utf-8" else ""
        if encoding not in ("base64", "utf-8"):
            raise ValueError(f"encoding must be base64 or utf-8, not {encoding!r}")
        if self.leader_url is None:
            # A follower would parse the load and forward every chunk to the leader
            # through raft: one status call finds the leader first.
            with contextlib.suppress(RkvClientError):
                self.status()
        nodes = self.nodes
        if self.leader_url in nodes:
            nodes.remove(self.leader_url)
            nodes.insert(0, self.leader_url)
        failure: BaseException | None = None
        for base in nodes:
            try:
                pooled = self._transport.connect(base, self._core.timeout)
            except (OSError, http.client.HTTPException) as exc:
                failure = exc
                continue
            return pooled.prefix + LOAD_PATH + query, base, pooled.conn
        raise ClusterUnreachableError(f"no node accepted a connection: {failure!r}")

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
