"""Read-modify-write values: integer counters and appends.

A counter is a value holding a signed 64-bit integer as ASCII decimal text
(``b"-42"``), the form ``GET`` returns and ``PUT`` can set: an optional minus
sign, no leading zeros, no spaces. An absent key counts as 0 (incr) or as an
empty value (append).
"""

from __future__ import annotations

import re

from node.state.commands import INT64_MAX, INT64_MIN
from node.state.results import ResultCode

_INTEGER = re.compile(rb"-?(?:0|[1-9][0-9]{0,18})")


def parse_counter(value: bytes) -> int | None:
    """The integer ``value`` holds, or None when it is not a 64-bit decimal integer."""
    if not _INTEGER.fullmatch(value):
        return None
    number = int(value)
    if not INT64_MIN <= number <= INT64_MAX or value == b"-0":
        return None
    return number


def incremented(current: bytes | None, by: int) -> tuple[bytes, None] | tuple[None, ResultCode]:
    """The new value after adding ``by``, or why it cannot be computed."""
    number = 0 if current is None else parse_counter(current)
    if number is None:
        return None, ResultCode.NOT_AN_INTEGER
    total = number + by
    if not INT64_MIN <= total <= INT64_MAX:
        return None, ResultCode.INTEGER_OVERFLOW
    return str(total).encode(), None


def refusal_message(code: ResultCode, key: bytes, current: bytes | None, by: int) -> str:
    name = key.decode("utf-8", "backslashreplace")
    if code is ResultCode.INTEGER_OVERFLOW:
        return f"adding {by} to key {name!r:.80} leaves the signed 64-bit integer range"
    value = (current or b"").decode("utf-8", "backslashreplace")
    return f"key {name!r:.80} holds {value!r:.40}, not a signed 64-bit decimal integer"
