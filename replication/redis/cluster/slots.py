"""Redis Cluster's key slots: which of the 16,384 slots a key hashes to, and slot sets.

A key's slot is CRC16 (the XMODEM variant, which the standard library computes
as :func:`binascii.crc_hqx` with a start value of 0) of the key modulo 16,384;
when the key holds a hash tag, a ``{`` followed later by a ``}`` with at least
one byte between them, only the bytes between the first ``{`` and the next
``}`` are hashed, so that ``{user1}.name`` and ``{user1}.age`` share a slot.
"""

from __future__ import annotations

import binascii
from collections.abc import Iterable

SLOTS = 16384


def key_slot(key: bytes) -> int:
    """The cluster slot of ``key`` (what ``CLUSTER KEYSLOT`` answers)."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return binascii.crc_hqx(key, 0) % SLOTS


def slot_ranges(slots: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted ``slots`` as inclusive ``(first, last)`` ranges."""
    ranges: list[tuple[int, int]] = []
    for slot in sorted(set(slots)):
        if ranges and ranges[-1][1] == slot - 1:
            ranges[-1] = (ranges[-1][0], slot)
        else:
            ranges.append((slot, slot))
    return ranges


def slots_of(ranges: Iterable[Iterable[int]]) -> frozenset[int]:
    """The slots of inclusive ``[first, last]`` ranges."""
    slots: set[int] = set()
    for first, last in (tuple(pair) for pair in ranges):
        slots.update(range(first, last + 1))
    return frozenset(slots)


def format_slots(slots: Iterable[int]) -> str:
    """``0-5460,10923`` (``none`` for no slot)."""
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in slot_ranges(slots)]
    return ",".join(parts) or "none"
