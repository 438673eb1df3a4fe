"""The retry and leader rules both clients follow, without doing any I/O.

Where a request goes: ``stale`` reads to the first reachable node in the order
given, everything else to the leader, found through ``GET /v1/status`` (the
other members' URLs are learned from it too). When to retry, bounded by
:class:`RetryPolicy`:

- reads (get, scan, status) retry on connection errors, timeouts and 503 on
  the other nodes, with a growing, jittered pause between rounds;
- writes (put, delete, incr, append, txn) retry only when the write was certainly not
  applied: the connection could not be opened (nothing was sent), or the node
  answered 503 with code ``not_applied``, ``no_leader`` or ``overloaded``
  (honouring Retry-After). A connection lost after the request went out, a
  timeout waiting for the answer, or a 503 ``unknown_outcome`` raise
  :class:`UnknownOutcomeError`;
- a 307 (a ``consistency=leader`` read on a follower) is followed to the
  leader named in Location;
- 401, 403 and 429 (also to the leader's discovery, ``GET /v1/status``) and a
  failed TLS handshake are raised at once: other nodes would answer the same
  (429: too many failed logins from this client);
- an idempotent producer's write (:meth:`_Router.call_resendable`, used by
  :mod:`http_api.client.producer`) is sent again, unchanged, on every unknown
  or transient outcome (a lost connection, a timeout, any 503, a 5xx) until an
  answer comes or its deadline passes: its producer id, epoch and sequence
  make the server apply it at most once and answer a repeat with the first
  result. A plain write has nothing that would make that safe.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from http_api.client.errors import (
    ClusterUnreachableError,
    NoSpaceError,
    NotAppliedError,
    RkvClientError,
    TlsError,
    UnavailableError,
    UnknownOutcomeError,
)
from http_api.client.wire import (
    _describe,
    _exchange,
    _Failure,
    _Plan,
    _Reply,
    _Send,
    _Sleep,
    error_from_reply,
    normalize_url,
    parse_urls,
    tls_failure,
)

DISCOVERY_TIMEOUT = 2.0  # seconds for one GET /v1/status while looking for the leader
IDLE_RECONNECT = 15.0  # a pooled connection idle this long is reopened (servers drop them)
MAX_REDIRECTS = 5
SAFE_WRITE_RETRY_CODES = frozenset(
    {"not_applied", "no_leader", "overloaded", "too_many_connections"}
)


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


@dataclass(frozen=True, slots=True)
class _Resent:
    """How :meth:`_Router.call_resendable` ended.

    ``reply``: the first answer that is neither a redirect nor a 5xx (None: the
    deadline passed first, ``error`` says why the last attempt failed).
    ``maybe_applied``: some attempt reached a node and got no answer saying it
    was not applied. ``base``: the node that answered.
    """

    reply: _Reply | None
    base: str | None
    maybe_applied: bool
    error: RkvClientError | None = None


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


class _Router:
    """Node list, leader and retry rules: everything but the I/O.

    :class:`http_api.client.operations._Core` adds the operations on top.
    """

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

    def _discover(self, failed: set[str]) -> _Plan[str | None]:
        """Ask nodes for the leader; a leader in ``failed`` (unreachable) does not count."""
        for base in [n for n in self.nodes if n not in failed]:
            send = _Send(base, "GET", "/v1/status", None, {}, min(self.timeout, DISCOVERY_TIMEOUT))
            outcome = yield from _exchange(send)
            if isinstance(outcome, _Failure):
                self._raise_if_tls(base, outcome)
                failed.add(base)
                self.last_failure = f"{base}: {_describe(outcome, base)}"
                continue
            if outcome.status in (401, 403, 429):
                # Credentials the cluster refuses (or too many failed logins with them):
                # no other node will think otherwise.
                raise error_from_reply(outcome, base)
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

    def call_resendable(
        self,
        method: str,
        target: str,
        body: bytes | None,
        headers: Mapping[str, str],
        *,
        deadline: float,
    ) -> _Plan[_Resent]:
        """A write that is safe to send again (an idempotent producer's): to the
        leader, again and again, until a node gives a definitive answer (2xx or
        4xx) or ``deadline`` (``time.monotonic()``) passes.

        Redirects are followed and the leader rediscovered as for any write;
        pauses follow the retry policy's backoff (and Retry-After), not its
        ``max_attempts`` / ``max_elapsed``. Each attempt's timeout is cut to the
        time left (0.5 s at least).
        """
        state = _CallState(write=True)
        maybe_applied = False
        while True:
            if state.attempt > 0 and time.monotonic() + state.pause >= deadline:
                return _Resent(None, None, maybe_applied, state.last_error or self._unreachable())
            if state.pause > 0:
                yield _Sleep(state.pause)
            state.attempt += 1
            state.pause = 0.0
            if state.redirect is not None:
                (base, path), state.redirect = state.redirect, None
            else:
                picked = yield from self._pick(state.failed, write=True, stale=False)
                if picked is None:
                    self._nowhere_to_send(state)
                    continue
                base, path = picked, target
            timeout = min(self.timeout, max(0.5, deadline - time.monotonic()))
            outcome = yield from _exchange(_Send(base, method, path, body, headers, timeout))
            if isinstance(outcome, _Failure):
                maybe_applied = self._resend_failed(state, base, outcome) or maybe_applied
            elif outcome.status < 300 or 400 <= outcome.status < 500:
                return _Resent(outcome, base, maybe_applied)
            elif self._resend_refused(state, base, outcome):
                maybe_applied = True

    def _resend_failed(self, state: _CallState, base: str, failure: _Failure) -> bool:
        """No answer to a resendable write; True when it may have been applied."""
        self._raise_if_tls(base, failure)
        state.failed.add(base)
        self.forget_leader(base)
        self.last_failure = f"{base}: {_describe(failure, base)}"
        if failure.sent:
            state.last_error = UnknownOutcomeError(
                f"lost the connection to {base} after sending the write ({_describe(failure)})",
                url=base,
            )
        else:
            state.last_error = ClusterUnreachableError(
                f"cannot reach {self.last_failure}", url=base
            )
        if all(n in state.failed for n in self.nodes):
            state.failed.clear()
            state.pause = self.retry.backoff(state.attempt)
        return failure.sent

    def _resend_refused(self, state: _CallState, base: str, reply: _Reply) -> bool:
        """A 3xx or 5xx to a resendable write: arrange the next attempt. True when
        the write may have been applied."""
        error = error_from_reply(reply, base)
        location = reply.headers.get("location")
        maybe_applied = False
        if reply.status in (301, 302, 307, 308) and location:
            if self._follow(state, reply, location, error):
                return False
            state.redirects = 0  # a redirect loop: start again from discovery
            self.forget_leader()
        elif reply.status >= 500:
            maybe_applied = reply.status != 503 or error.code not in SAFE_WRITE_RETRY_CODES
            if reply.status != 503:
                error = UnknownOutcomeError(
                    f"{base} answered HTTP {reply.status} ({error.code}: {error.message})",
                    code=error.code,
                    status=reply.status,
                    url=base,
                )
            if error.code != "overloaded":
                self.forget_leader(base)
        state.last_error = error
        retry_after = error.retry_after if isinstance(error, UnavailableError) else None
        state.pause = max(self.retry.backoff(state.attempt), retry_after or 0.0)
        return maybe_applied

    def _follow(
        self, state: _CallState, reply: _Reply, location: str, error: RkvClientError
    ) -> bool:
        """Arrange to follow a redirect; False when too many were followed already."""
        if state.redirects >= MAX_REDIRECTS:
            return False
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
        return True

    def _nowhere_to_send(self, state: _CallState) -> None:
        if all(n in state.failed for n in self.nodes):
            state.last_error = self._unreachable()
        elif not isinstance(state.last_error, UnavailableError):
            state.last_error = NotAppliedError(
                "no reachable node knows a live leader (an election may be under way)",
                code="no_leader",
            )
        # After the pause, every node is tried again: a node that failed once (the
        # leader, while it restarted) may be the one the others now name as leader.
        state.failed.clear()
        state.pause = self.retry.backoff(state.attempt)

    @staticmethod
    def _raise_if_tls(base: str, failure: _Failure) -> None:
        """A failed TLS handshake fails the call at once: trying again, or another
        node with a certificate from the same CA, would fail the same way. The
        request was not served (the handshake comes first, and a node that refuses
        a client certificate says so before reading the request)."""
        problem = tls_failure(failure.error)
        if problem is not None:
            raise TlsError(f"{base}: {problem}", url=base)

    def _connection_failed(self, state: _CallState, base: str, failure: _Failure) -> None:
        self._raise_if_tls(base, failure)
        state.failed.add(base)
        self.forget_leader(base)
        if state.write and failure.sent:
            raise UnknownOutcomeError(
                f"lost the connection to {base} after sending the write "
                f"({_describe(failure)}): it may or may not have been applied",
                url=base,
            )
        self.last_failure = f"{base}: {_describe(failure, base)}"
        state.last_error = ClusterUnreachableError(f"cannot reach {self.last_failure}", url=base)
        if all(n in state.failed for n in self.nodes):
            state.last_error = self._unreachable()
            state.failed.clear()
            state.pause = self.retry.backoff(state.attempt)

    def _refused(self, state: _CallState, base: str, reply: _Reply) -> None:
        """A non-2xx answer: raise, or arrange the retry (a redirect or a pause)."""
        error = error_from_reply(reply, base)
        location = reply.headers.get("location")
        if (
            reply.status in (301, 302, 307, 308)
            and location
            and self._follow(state, reply, location, error)
        ):
            return
        if reply.status != 503:
            # 507 no_space is a refusal: the write was not applied (a NOSPACE alarm).
            if state.write and reply.status >= 500 and not isinstance(error, NoSpaceError):
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
