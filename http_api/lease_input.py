"""Lease, lock and election input as docs/LEASES.md states it, checked strictly.

Pure functions on what a request carries (JSON values, query text, the
``Rkv-Fencing`` header); each raises :class:`InvalidRequest` with the code the
document names (``invalid_ttl``, ``invalid_lock_name``, ``invalid_fencing``;
``invalid_request`` for the rest) and never lets a bad value reach the service.
"""

from __future__ import annotations

import math
from typing import Any

from http_api.bodies import json_integer
from http_api.encoding import MAX_VERSION, parse_uint
from node.errors import InvalidRequest
from node.service.lease_types import Fence
from node.service.leases import MAX_LISTED
from node.state.leases import (
    MAX_KEEPALIVE_IDS,
    MAX_LOCK_VALUE_BYTES,
    lock_name_problem,
)

_SEGMENT = (
    "(?:[A-Za-z0-9_:@-][A-Za-z0-9._:@-]*"
    "|\\.[A-Za-z0-9_:@-][A-Za-z0-9._:@-]*"
    "|\\.\\.[A-Za-z0-9._:@-]+)"
)
LOCK_NAME_PATTERN = f"^{_SEGMENT}(?:/{_SEGMENT})*$"
"""What node.state.leases.lock_name_problem accepts (with at most MAX_LOCK_NAME_CHARS
characters): /-separated parts, none empty, . or ..; the OpenAPI document states it."""
MAX_LEASE_ID = MAX_VERSION
"""A lease id is the offset of its grant record."""
DEFAULT_PAGE = 100
MAX_PAGE = MAX_LISTED
"""Leases in one page of GET /v1/leases."""
DEFAULT_LOCK_WAIT = 10.0
"""How long a lock or campaign request waits without a ``timeout`` (capped by
--max-lock-wait)."""
FENCING_HEADER = "Rkv-Fencing"
FENCING_PATTERN = f"^\\s*{LOCK_NAME_PATTERN[1:-1]}=[0-9]{{1,19}}\\s*$"


def lock_name(text: str) -> str:
    """A lock's (or an election's) name, as the path gives it."""
    problem = lock_name_problem(text)
    if problem is not None:
        raise InvalidRequest(problem, code="invalid_lock_name")
    return text


def fence(header: str | None) -> Fence | None:
    """``Rkv-Fencing: NAME=TOKEN`` (split on the last "="), or None without the header."""
    if header is None:
        return None
    name, sep, token_text = header.strip().rpartition("=")
    token = parse_uint(token_text)
    if not sep or token is None or lock_name_problem(name) is not None:
        raise InvalidRequest(
            f"{FENCING_HEADER} must be NAME=TOKEN (a lock name and its fencing token), "
            f"not {header!r:.80}",
            code="invalid_fencing",
        )
    return Fence(name, token)


def ttl(value: object, max_ttl: int) -> int:
    """A lease's TTL: an integer number of seconds, 1 to ``max_ttl``."""
    seconds = json_integer(value)
    if seconds is None or not 1 <= seconds <= max_ttl:
        raise InvalidRequest(
            f"ttl must be an integer number of seconds, 1 to {max_ttl} (--max-lease-ttl), "
            f"not {value!r:.40}",
            code="invalid_ttl",
        )
    return seconds


def ttl_text(text: str, max_ttl: int) -> int:
    """A TTL from a query parameter (``?ttl=30``)."""
    seconds = parse_uint(text)
    return ttl(text if seconds is None else seconds, max_ttl)


def lease_id(value: object, what: str = "lease") -> int:
    """A lease id in JSON: a positive integer."""
    number = json_integer(value)
    if number is None or not 1 <= number <= MAX_LEASE_ID:
        raise InvalidRequest(f"{what} must be a lease id (a positive integer), not {value!r:.40}")
    return number


def lease_id_text(text: str | None, what: str = "lease") -> int:
    """A lease id in a path or a query parameter; it must be there."""
    if text is None:
        raise InvalidRequest(f"{what} is required: the lease id")
    number = parse_uint(text)
    return lease_id(text if number is None else number, what)


def lease_ids(body: Any) -> list[int]:
    """``{"ids": [...]}``: 1 to MAX_KEEPALIVE_IDS lease ids, in order."""
    if not isinstance(body, dict) or set(body) != {"ids"} or not isinstance(body["ids"], list):
        raise InvalidRequest('the body must be {"ids": [lease ids]}')
    ids = body["ids"]
    if not 1 <= len(ids) <= MAX_KEEPALIVE_IDS:
        raise InvalidRequest(
            f"ids holds {len(ids)} lease ids; 1 to {MAX_KEEPALIVE_IDS} are allowed"
        )
    return [lease_id(item, f"ids[{i}]") for i, item in enumerate(ids)]


def lock_wait(body: dict[str, Any], max_wait: float) -> float:
    """How long a lock or campaign request waits: its ``timeout``, seconds from 0 (try
    once) to ``max_wait``; without one, the default capped by ``max_wait``."""
    if "timeout" not in body:
        return min(DEFAULT_LOCK_WAIT, max_wait)
    value = body["timeout"]
    seconds = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an integer too large for a float
            seconds = math.inf
    if not 0 <= seconds <= max_wait:  # NaN and infinities compare false or above
        raise InvalidRequest(
            f"timeout must be a number of seconds, 0 to {max_wait:g} (--max-lock-wait), "
            f"not {value!r:.40}"
        )
    return seconds


def election_value(value: object) -> bytes:
    """An election's value: a string of at most MAX_LOCK_VALUE_BYTES bytes of UTF-8."""
    if not isinstance(value, str):
        raise InvalidRequest(f"value must be a string, not {value!r:.40}")
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a \\ud800 escape
        raise InvalidRequest("value must be valid UTF-8 text") from None
    if len(data) > MAX_LOCK_VALUE_BYTES:
        raise InvalidRequest(
            f"value is {len(data)} bytes of UTF-8; the limit is {MAX_LOCK_VALUE_BYTES}"
        )
    return data


def json_object(body: Any, required: set[str], optional: set[str], shape: str) -> dict[str, Any]:
    """``body`` as an object with every ``required`` field and no unknown one."""
    if not isinstance(body, dict):
        raise InvalidRequest(f"the body must be a JSON object: {shape}")
    missing = required - set(body)
    unknown = set(body) - required - optional
    if missing or unknown:
        problems = [f"missing {', '.join(sorted(missing))}"] if missing else []
        problems += [f"unknown {', '.join(sorted(unknown))}"] if unknown else []
        raise InvalidRequest(f"the body must be {shape} ({'; '.join(problems)})")
    return body
