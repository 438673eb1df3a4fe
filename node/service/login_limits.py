"""Failed logins, counted per (user, client address) and per client address.

A login (HTTP Basic, or ``POST /v1/auth/token``) from an address that failed
``per_address`` times in the last minute, or for a user who failed
``per_user`` times from that address, is refused with 429
``too_many_failed_logins`` and a Retry-After, BEFORE its password is hashed:
a brute force costs the node a dictionary lookup per attempt, not a scrypt.

The per-user count is kept per address on purpose: counted for the user alone,
anyone could lock a user out by failing on purpose from anywhere. The cost is
that a guesser spread over many addresses gets ``per_user`` guesses a minute
from each; the per-address count bounds one address across all users.

Memory is bounded: at most :data:`MAX_TRACKED` counters are kept; past that the
least recently failed are forgotten.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable

from node.errors import LimitReached

WINDOW_SECONDS = 60.0
MAX_TRACKED = 100_000
DEFAULT_PER_USER = 10
DEFAULT_PER_ADDRESS = 100


class FailedLogins:
    def __init__(
        self,
        per_user: int = DEFAULT_PER_USER,
        per_address: int = DEFAULT_PER_ADDRESS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limits = {"user": per_user, "address": per_address}
        self._clock = clock
        self._failures: OrderedDict[tuple[str, ...], deque[float]] = OrderedDict()

    def _keys(self, user: str, address: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return ("user", user, address), ("address", address)

    def check(self, user: str, address: str) -> None:
        """Raise LimitReached ``too_many_failed_logins`` if a login must not be tried now."""
        now = self._clock()
        for key in self._keys(user, address):
            limit = self._limits[key[0]]
            times = self._failures.get(key)
            if times is None or len(times) < limit:
                continue
            wait = times[0] + WINDOW_SECONDS - now
            if wait > 0:
                who = f"the user {user} from {address}" if key[0] == "user" else address
                error = LimitReached(
                    f"{who} failed {limit} logins in the last minute (--max-failed-logins"
                    f"{'' if key[0] == 'user' else '-per-address'} {limit}); try again later",
                    code="too_many_failed_logins",
                )
                error.retry_after = wait
                raise error

    def failed(self, user: str, address: str) -> None:
        now = self._clock()
        for key in self._keys(user, address):
            times = self._failures.pop(key, None)
            if times is None:
                times = deque(maxlen=self._limits[key[0]])
            times.append(now)
            self._failures[key] = times  # now the most recently failed
        while len(self._failures) > MAX_TRACKED:
            self._failures.popitem(last=False)
