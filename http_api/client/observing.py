"""The rules of following an election (``GET /v1/elections/{name}?observe=true``),
without doing any I/O.

The stream is NDJSON: the leader now (``{"leader": null}`` when nobody
leads), then one line per change, and ``{}`` keep-alive lines. The client
reads it from the leader (any node when none is known) and, when the stream
ends or breaks (a node restarts, a line does not come within
:data:`READ_TIMEOUT`), connects again after a pause: the first line of the
new stream is the leader then, so nothing is missed but repeats, which are
left out (a line equal to the last one given is skipped). Refusals (401,
403, 404, 400) are raised; a cluster that cannot be reached for the retry
policy's ``max_elapsed`` raises :class:`ClusterUnreachableError`.
"""

from __future__ import annotations

import json
import time
from typing import Any, Final
from urllib.parse import urlsplit

from http_api.client.errors import ClusterUnreachableError, RkvClientError
from http_api.client.lease_model import LockHolder, leader_of_line
from http_api.client.lease_plans import lock_path
from http_api.client.operations import _Core
from http_api.client.wire import _describe, _Failure, _Plan, _Reply, _Send, error_from_reply

READ_TIMEOUT = 60.0
"""Seconds without a line (keep-alives included) after which the stream is opened again."""
MAX_LINE = 64 * 1024
"""The longest line read (a leader's value is at most 4096 bytes)."""


class Skip:
    pass


SKIP: Final = Skip()
"""A line that gives nothing new (a keep-alive, a repeat)."""


class StreamEnded(Exception):
    """The stream said it is ending (an ``{"error": ...}`` line)."""


class Observer:
    """One observation of election ``name``: where to connect, what each line means,
    how long to pause before connecting again."""

    def __init__(self, core: _Core, name: str) -> None:
        self._core = core
        self.name = name
        self.target = lock_path("elections", name) + "?observe=true"
        self._last: tuple[int, int, str] | Skip | None = SKIP
        self._failed: set[str] = set()
        self._failing_since: float | None = None
        self._retries = 0

    def pick(self) -> _Plan[str | None]:
        """The node to read from: the leader, else any node that answers (None: none)."""
        base = yield from self._core._pick(self._failed, write=False, stale=False)
        return base

    def request(self, base: str) -> _Send:
        return _Send(base, "GET", self.target, None, {}, max(READ_TIMEOUT, self._core.timeout))

    def connected(self, base: str) -> None:
        """The stream is open (a 200 answer)."""
        self._failed.discard(base)
        self._failing_since = None
        self._retries = 0

    def line(self, raw: bytes) -> LockHolder | Skip | None:
        """What one line says: a (new) leader, None (nobody leads), or SKIP."""
        try:
            body: Any = json.loads(raw)
        except ValueError:
            raise RkvClientError(
                "the server sent a malformed observe line", code="bad_response"
            ) from None
        if not body or not isinstance(body, dict):
            return SKIP  # a keep-alive
        if "error" in body:
            raise StreamEnded(str(body["error"]))
        holder = leader_of_line(body, self.name)
        seen = None if holder is None else (holder.lease_id, holder.token, holder.value)
        if seen == self._last:
            return SKIP
        self._last = seen
        return holder

    def broken(self, base: str | None, problem: _Reply | _Failure | BaseException | None) -> float:
        """The stream could not be opened (``problem``: the answer, the failure; base
        None: no node to ask) or it ended (None: cleanly): the pause before the next
        attempt. Raises a refusal that another attempt would get again, or
        ClusterUnreachableError once the cluster was out of reach too long."""
        if isinstance(problem, _Reply):
            location = problem.headers.get("location")
            if problem.status in (301, 302, 307, 308) and location:
                moved = urlsplit(location)  # rkv redirects only to the leader
                self._core.leader = self._core.learn(f"{moved.scheme}://{moved.netloc}")
                return self._core.retry.initial_backoff
            error = error_from_reply(problem, base or "")
            if problem.status < 500 and problem.status not in (408, 429):
                raise error
        if isinstance(problem, _Failure) and base is not None:
            self._core._raise_if_tls(base, problem)
        now = time.monotonic()
        if base is not None and (problem is None or isinstance(problem, StreamEnded)):
            return self._core.retry.initial_backoff  # it ended cleanly: open it again
        if base is not None:
            self._failed.add(base)
            self._core.forget_leader(base)
        if all(node in self._failed for node in self._core.nodes):
            self._failed.clear()
        if self._failing_since is None:
            self._failing_since = now
        elif now - self._failing_since > self._core.retry.max_elapsed:
            detail = _describe(problem, base or "") if isinstance(problem, _Failure) else problem
            raise ClusterUnreachableError(
                f"observing election {self.name}: no node served it for "
                f"{self._core.retry.max_elapsed:g}s (last: {base}: {detail})",
                url=base,
            )
        self._retries += 1
        return self._core.retry.backoff(self._retries)
