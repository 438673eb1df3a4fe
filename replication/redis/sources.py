"""Where the replicator finds its master: the kinds of ``--source``.

- ``redis://host:port`` (:class:`~replication.redis.link.types.MasterAddress`):
  one fixed server, master or replica (a replica's stream is its master's);
- ``redis-sentinel://...`` (:class:`~replication.redis.link.sentinel.SentinelSource`):
  the master Redis Sentinel names, followed across failovers.

The replicator sees either through :class:`MasterSource`: :meth:`~MasterSource.locate`
before each connection, :meth:`~MasterSource.watch` to learn at once that the
master moved (a source whose master never moves calls nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from replication.redis.link.sentinel import SentinelMaster, SentinelSource
from replication.redis.link.types import MasterAddress

Source = MasterAddress | SentinelSource
"""What ``--source`` parses to."""


class MasterSource(Protocol):
    def locate(self) -> MasterAddress:
        """The master to connect to now (raises RedisLinkError)."""
        ...

    def watch(self, on_switch: Callable[[MasterAddress, str], None]) -> None:
        """Call ``on_switch(new_master, who_said_so)`` (from another thread) when it moves."""
        ...

    def close(self) -> None: ...


class FixedMaster:
    """A ``redis://`` source: always the same server."""

    def __init__(self, address: MasterAddress) -> None:
        self.address = address

    def __str__(self) -> str:
        return str(self.address)

    def locate(self) -> MasterAddress:
        return self.address

    def watch(self, on_switch: Callable[[MasterAddress, str], None]) -> None:
        pass

    def close(self) -> None:
        pass


def open_source(source: Source) -> MasterSource:
    if isinstance(source, SentinelSource):
        return SentinelMaster(source)
    return FixedMaster(source)
