"""Redis 7.0's number parsing and formatting, reproduced exactly.

- :func:`parse_int` is ``string2ll``: an optional ``-``, no leading zeros, no
  ``+``, no spaces, within a signed 64-bit integer.
- :func:`parse_double` is ``string2d`` (``strtod``, used for zset scores):
  decimal or hex floats, ``inf``/``infinity``; NaN, overflow and underflow to
  zero are rejected.
- :func:`incr_long_double` is INCRBYFLOAT/HINCRBYFLOAT: Redis adds in C
  ``long double`` (the x87 80-bit format on x86-64: a 64-bit significand) and
  prints the sum with ``%.17Lf``, trailing zeros removed. Python floats would
  give different digits (10.5 + 0.1 is "10.6" in Redis, 10.600000000000001 in
  doubles), so the arithmetic is done on exact fractions rounded to that format.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
_MAX_INT_LEN = 20  # string2ll refuses 21 bytes or more (LONG_STR_SIZE)
_MAX_LD_LEN = 5 * 1024  # MAX_LONG_DOUBLE_CHARS

_INT = re.compile(rb"-?[1-9][0-9]*|0")
_DECIMAL = re.compile(rb"([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+))?")
_HEX = re.compile(rb"([+-]?)0[xX]([0-9a-fA-F]*)(?:\.([0-9a-fA-F]*))?(?:[pP]([+-]?[0-9]+))?")
_INF = re.compile(rb"([+-]?)(?:inf|infinity)", re.IGNORECASE)

# The x87 extended format: 64-bit significand, exponents down to 2**-16445 (subnormal).
_LD_BITS = 64
_LD_MIN_QUANTUM = -16445
_LD_MAX = Fraction(((1 << _LD_BITS) - 1) << (16384 - _LD_BITS))
# Decimal exponents beyond which a string surely overflows or underflows long double.
_LD_DECIMAL_MAX_EXP = 4940
_LD_DECIMAL_MIN_EXP = -4960
_LD_BINARY_MAX_EXP = 17000


class NumberError(ValueError):
    """The text is not a number Redis would accept here."""


def parse_int(raw: bytes) -> int:
    """``string2ll``: a strict signed 64-bit decimal integer."""
    if len(raw) > _MAX_INT_LEN or not _INT.fullmatch(raw):
        raise NumberError(f"not an integer: {raw!r}")
    value = int(raw)
    if not INT64_MIN <= value <= INT64_MAX:
        raise NumberError(f"integer out of range: {raw!r}")
    return value


def _exact_decimal(match: re.Match[bytes]) -> tuple[int, Fraction] | None:
    """(sign, magnitude) of a decimal match, None if it has no digits."""
    sign, whole, frac, exp = match.groups()
    digits = whole + (frac or b"")
    if not digits:
        return None
    exponent = int(exp or b"0") - len(frac or b"")
    mantissa = int(digits)
    sign_value = -1 if sign == b"-" else 1
    if mantissa == 0:
        return sign_value, Fraction(0)
    magnitude = len(str(mantissa)) + exponent  # the value is below 10**magnitude
    if magnitude > _LD_DECIMAL_MAX_EXP:
        return sign_value, Fraction(10) ** (_LD_DECIMAL_MAX_EXP + 1)
    if magnitude < _LD_DECIMAL_MIN_EXP:
        return sign_value, Fraction(1, 10 ** (-_LD_DECIMAL_MIN_EXP + 1))
    return sign_value, mantissa * Fraction(10) ** exponent


def _exact_hex(match: re.Match[bytes]) -> tuple[int, Fraction] | None:
    sign, whole, frac, exp = match.groups()
    digits = whole + (frac or b"")
    if not digits:
        return None
    exponent = int(exp or b"0") - 4 * len(frac or b"")
    mantissa = int(digits, 16)
    sign_value = -1 if sign == b"-" else 1
    if mantissa and exponent + mantissa.bit_length() > _LD_BINARY_MAX_EXP:
        return sign_value, Fraction(2) ** (_LD_BINARY_MAX_EXP + 1)
    if mantissa and exponent + mantissa.bit_length() < -_LD_BINARY_MAX_EXP:
        return sign_value, Fraction(1, 2 ** (_LD_BINARY_MAX_EXP + 1))
    return sign_value, mantissa * Fraction(2) ** exponent


def _exact(raw: bytes) -> tuple[int, Fraction | None]:
    """(sign, exact value) of a strtod/strtold literal; None value for infinity."""
    if raw[:1].isspace() or not raw:
        raise NumberError(f"not a number: {raw!r}")
    for pattern, reader in ((_HEX, _exact_hex), (_DECIMAL, _exact_decimal)):
        match = pattern.fullmatch(raw)
        if match is not None:
            parsed = reader(match)
            if parsed is not None:
                return parsed
    match = _INF.fullmatch(raw)
    if match is not None:
        return (-1 if match.group(1) == b"-" else 1), None
    raise NumberError(f"not a number: {raw!r}")


def parse_double(raw: bytes) -> float:
    """``string2d``: a strict C double (zset scores)."""
    sign, exact = _exact(raw)
    if exact is None:
        return sign * math.inf
    try:
        value = float(exact)
    except OverflowError:
        raise NumberError(f"number out of range: {raw!r}") from None
    if value == 0 and exact != 0:
        raise NumberError(f"number out of range: {raw!r}")
    return math.copysign(value, sign)


def parse_range_double(raw: bytes) -> float:
    """A score range bound as ``zslParseRange`` reads it: plain ``strtod``, so
    leading whitespace is skipped and out-of-range values become inf or 0."""
    stripped = raw.lstrip(b" \t\n\v\f\r")
    sign, exact = _exact(stripped)
    if exact is None:
        return sign * math.inf
    try:
        return math.copysign(float(exact), sign)
    except OverflowError:
        return sign * math.inf


def _round_long_double(value: Fraction) -> Fraction | None:
    """``value`` rounded to the nearest x87 long double (ties to even); None on overflow."""
    if value == 0:
        return value
    magnitude = abs(value)
    num, den = magnitude.numerator, magnitude.denominator
    exponent = num.bit_length() - den.bit_length()
    if (num << max(0, -exponent)) < (den << max(0, exponent)):
        exponent -= 1  # now 2**exponent <= magnitude < 2**(exponent + 1)
    quantum = max(exponent - (_LD_BITS - 1), _LD_MIN_QUANTUM)
    scaled_num = num << max(0, -quantum)
    scaled_den = den << max(0, quantum)
    units, rest = divmod(scaled_num, scaled_den)
    if 2 * rest > scaled_den or (2 * rest == scaled_den and units % 2):
        units += 1
    rounded = units * Fraction(2) ** quantum
    if rounded > _LD_MAX:
        return None
    return rounded if value > 0 else -rounded


def parse_long_double(raw: bytes) -> Fraction:
    """``string2ld``: a finite C long double, exactly (inf and NaN refused)."""
    if len(raw) >= _MAX_LD_LEN:
        raise NumberError("number too long")
    sign, exact = _exact(raw)
    if exact is None:
        raise NumberError("value is NaN or Infinity")
    rounded = _round_long_double(exact)
    if rounded is None or (rounded == 0 and exact != 0):
        raise NumberError(f"number out of range: {raw!r}")
    return sign * rounded


def format_long_double(value: Fraction) -> bytes:
    """``ld2string(LD_STR_HUMAN)``: ``%.17Lf`` without trailing zeros, never "-0"."""
    scaled = abs(value) * 10**17
    units, rest = divmod(scaled.numerator, scaled.denominator)
    if 2 * rest > scaled.denominator or (2 * rest == scaled.denominator and units % 2):
        units += 1
    digits = str(units).rjust(18, "0")
    text = (digits[:-17] + "." + digits[-17:]).rstrip("0").rstrip(".")
    if value < 0 and text != "0":
        text = "-" + text
    return text.encode()


def incr_long_double(current: bytes | None, increment: bytes) -> bytes:
    """INCRBYFLOAT's new value for ``current`` (None: a missing key, 0)."""
    base = Fraction(0) if current is None else parse_long_double(current)
    total = _round_long_double(base + parse_long_double(increment))
    if total is None:
        raise NumberError("increment would produce NaN or Infinity")
    return format_long_double(total)


def add_int(current: int, increment: int) -> int:
    """INCRBY's overflow-checked sum."""
    total = current + increment
    if not INT64_MIN <= total <= INT64_MAX:
        raise NumberError("increment or decrement would overflow")
    return total
