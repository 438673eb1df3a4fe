"""The key-value view Redis commands are applied through.

Commands (replication/redis/commands/dispatch.py) read and write rkv keys through a
:class:`View`; they never talk to rkv themselves. The replicator's view
(replication/redis/batch.py) collects the writes of several commands into one
rkv transaction and answers reads from those pending writes first, then from
rkv. :class:`MemoryView` is a plain dict, for tests and for checking the
layout without a cluster.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Protocol


class View(Protocol):
    def get(self, key: bytes) -> bytes | None:
        """The key's value as of every earlier write through this view."""
        ...

    def put(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every key under ``prefix`` with its value, in key order, as of every
        earlier write through this view. Do not write while iterating."""
        ...


class MemoryView:
    """A View over a dict, kept sorted for scans."""

    def __init__(self, data: dict[bytes, bytes] | None = None) -> None:
        self.data: dict[bytes, bytes] = dict(data or {})
        self._keys = sorted(self.data)

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        if key not in self.data:
            bisect.insort(self._keys, key)
        self.data[key] = value

    def delete(self, key: bytes) -> None:
        if self.data.pop(key, None) is not None:
            del self._keys[bisect.bisect_left(self._keys, key)]

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        i = bisect.bisect_left(self._keys, prefix)
        while i < len(self._keys) and self._keys[i].startswith(prefix):
            key = self._keys[i]
            yield key, self.data[key]
            i += 1
