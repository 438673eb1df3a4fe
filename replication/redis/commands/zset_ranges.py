"""Sorted-set ranges as Redis 7.0 selects them: by rank, by score, by lex.

Every function takes the members as (member, score) pairs in ZRANGE order
((score, member) ascending) and returns the selected pairs in the order of the
walk (reversed for REV). Score and lex runs follow Redis' listpack walk: check
the ends of the set against the bounds, find the first element past the lower
bound, then take elements while they stay within the upper bound. For lex
ranges over unequal scores that is what a listpack-encoded zset (up to 128
members by default) does; a skiplist-encoded one answers such ranges
depending on its random node levels, which no replica can reproduce.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from replication.redis.commands.common import index_range
from replication.redis.commands.numeric import NumberError, parse_range_double

Pair = tuple[bytes, float]
_Test = Callable[[Pair], bool]


class RangeError(ValueError):
    """A range bound Redis would reject."""


def rank_run(pairs: list[Pair], start: int, stop: int, reverse: bool) -> list[Pair]:
    ordered = pairs[::-1] if reverse else pairs
    first, last = index_range(len(ordered), start, stop)
    return ordered[first:last]


@dataclass(frozen=True)
class ScoreRange:
    low: float
    high: float
    low_exclusive: bool
    high_exclusive: bool

    def above_low(self, score: float) -> bool:
        return score > self.low if self.low_exclusive else score >= self.low

    def below_high(self, score: float) -> bool:
        return score < self.high if self.high_exclusive else score <= self.high


def _score_bound(raw: bytes) -> tuple[float, bool]:
    exclusive = raw.startswith(b"(")
    try:
        return parse_range_double(raw[1:] if exclusive else raw), exclusive
    except NumberError:
        raise RangeError("min or max is not a float") from None


def parse_score_range(low: bytes, high: bytes) -> ScoreRange:
    (lo, lo_ex), (hi, hi_ex) = _score_bound(low), _score_bound(high)
    return ScoreRange(lo, hi, lo_ex, hi_ex)


@dataclass(frozen=True)
class LexRange:
    """Bounds of a lex range; None stands for ``-`` (low) or ``+`` (high) as given."""

    low: bytes | None
    high: bytes | None
    low_exclusive: bool
    high_exclusive: bool
    low_is_max: bool = False  # the low bound was "+"
    high_is_min: bool = False  # the high bound was "-"

    def above_low(self, member: bytes) -> bool:
        if self.low is None:
            return not self.low_is_max
        return member > self.low if self.low_exclusive else member >= self.low

    def below_high(self, member: bytes) -> bool:
        if self.high is None:
            return not self.high_is_min
        return member < self.high if self.high_exclusive else member <= self.high


def _lex_bound(raw: bytes) -> tuple[bytes | None, bool, str]:
    """(value, exclusive, special): special is "-" or "+" for those bounds."""
    if raw in (b"-", b"+"):
        return None, True, raw.decode()
    if raw[:1] in (b"(", b"["):
        return raw[1:], raw[:1] == b"(", ""
    raise RangeError("min or max not valid string range item")


def parse_lex_range(low: bytes, high: bytes) -> LexRange:
    lo, lo_ex, lo_special = _lex_bound(low)
    hi, hi_ex, hi_special = _lex_bound(high)
    return LexRange(lo, hi, lo_ex, hi_ex, lo_special == "+", hi_special == "-")


def score_run(pairs: list[Pair], spec: ScoreRange, reverse: bool) -> list[Pair]:
    return _run(pairs, lambda p: spec.above_low(p[1]), lambda p: spec.below_high(p[1]), reverse)


def lex_run(pairs: list[Pair], spec: LexRange, reverse: bool) -> list[Pair]:
    return _run(pairs, lambda p: spec.above_low(p[0]), lambda p: spec.below_high(p[0]), reverse)


def _run(pairs: list[Pair], above_low: _Test, below_high: _Test, reverse: bool) -> list[Pair]:
    """Forward: from the first pair above the low bound, while below the high
    one. Reverse: from the last pair below the high bound, while above the low.
    Nothing at all unless the last pair is above the low bound and the first
    below the high one (zzlIsInLexRange / zslIsInRange check that first)."""
    if not pairs or not above_low(pairs[-1]) or not below_high(pairs[0]):
        return []
    ordered = pairs[::-1] if reverse else pairs
    enter, stay = (below_high, above_low) if reverse else (above_low, below_high)
    start = next((i for i, pair in enumerate(ordered) if enter(pair)), len(ordered))
    run = []
    for pair in ordered[start:]:
        if not stay(pair):
            break
        run.append(pair)
    return run


def limit_run(run: list[Pair], offset: int, count: int) -> list[Pair]:
    """LIMIT offset count: a negative offset selects nothing, a negative count all."""
    if offset < 0:
        return []
    return run[offset:] if count < 0 else run[offset : offset + count]
