"""Discovering a Redis Cluster's shards: ``CLUSTER SHARDS`` asked of any reachable node.

A shard is a master, the slots it serves and its replicas. Redis 7.0 gives a
shard no id of its own (7.2 adds one), so the replicator names a shard after
the node that was its master when first seen and recognises it later by its
members: the node ids of the master and replicas recorded in the shard's
checkpoint (a failover promotes one of them; see :mod:`.supervisor`).
Shards without slots (a master being added or emptied) are left out.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import hiredis

from replication.redis.cluster.slots import format_slots
from replication.redis.cluster.source import ClusterSource
from replication.redis.link.resp import encode_command
from replication.redis.link.types import MasterAddress, RedisLinkError, reply_error

logger = logging.getLogger(__name__)

QUERY_TIMEOUT = 5.0
"""Seconds to connect to a node and get its answer."""


@dataclass(frozen=True)
class ClusterShard:
    master_id: str
    master: MasterAddress
    slots: frozenset[int]
    nodes: frozenset[str]
    """The node ids of the master and its replicas."""

    def describe(self) -> str:
        return f"master {self.master.host}:{self.master.port} slots {format_slots(self.slots)}"


@dataclass(frozen=True)
class Topology:
    shards: tuple[ClusterShard, ...]

    def owners(self) -> dict[int, str]:
        """Slot -> the node id of the master serving it."""
        return {slot: shard.master_id for shard in self.shards for slot in shard.slots}

    def addresses(self) -> list[MasterAddress]:
        return [shard.master for shard in self.shards]


def query(address: MasterAddress, *args: str | int, timeout: float = QUERY_TIMEOUT) -> Any:
    """Send one command to a node (after AUTH when it needs one); its decoded reply."""
    with socket.create_connection((address.host, address.port), timeout=timeout) as sock:
        reader = hiredis.Reader()
        commands: list[tuple[str | int, ...]] = []
        if address.password is not None:
            login = [address.username] if address.username else []
            commands.append(("AUTH", *login, address.password))
        commands.append(args)
        sock.sendall(b"".join(encode_command(*command) for command in commands))
        replies: list[Any] = []
        while len(replies) < len(commands):
            reply = reader.gets()
            if reply is False:
                data = sock.recv(65536)
                if not data:
                    raise ConnectionError("the node closed the connection")
                reader.feed(data)
                continue
            if isinstance(reply, hiredis.ReplyError):
                command = commands[len(replies)]
                # never the AUTH's arguments: they hold the password
                what = "AUTH" if command[0] == "AUTH" else " ".join(map(str, command[:2]))
                node = f"{address.host}:{address.port}"
                error = reply_error(f"{what} at {node}", str(reply))
                message = str(error) if node in str(error) else f"{error} (node {node})"
                raise RedisLinkError(message, retryable=error.retryable)
            replies.append(reply)
        return replies[-1]


def _pairs(flat: list[Any]) -> dict[str, Any]:
    return {bytes(k).decode(): v for k, v in zip(flat[0::2], flat[1::2], strict=True)}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def parse_shards(reply: list[Any], source: ClusterSource) -> Topology:
    """The shards of a ``CLUSTER SHARDS`` reply (RESP2: maps as flat lists)."""
    shards = []
    for raw in reply:
        shard = _pairs(raw)
        bounds = [int(x) for x in shard.get("slots", [])]
        slots = frozenset(
            s for a, b in zip(bounds[0::2], bounds[1::2], strict=True) for s in range(a, b + 1)
        )
        nodes = [_pairs(node) for node in shard.get("nodes", [])]
        masters = [n for n in nodes if _text(n.get("role")) == "master"]
        if not slots or not masters:
            continue
        master = masters[0]
        host = _text(master.get("ip") or master.get("endpoint"))
        shards.append(
            ClusterShard(
                master_id=_text(master["id"]),
                master=source.node(host, int(master["port"])),
                slots=slots,
                nodes=frozenset(_text(n["id"]) for n in nodes),
            )
        )
    return Topology(tuple(sorted(shards, key=lambda s: min(s.slots))))


def discover(source: ClusterSource, also: Iterable[MasterAddress] = ()) -> Topology:
    """The cluster's shards, asked of the seeds, then of ``also`` (masters seen
    before); RedisLinkError (retryable) when none answers."""
    problems = []
    for address in dict.fromkeys([*source.seeds, *also]):
        try:
            reply = query(address, "CLUSTER", "SHARDS")
        except (OSError, ConnectionError) as exc:
            problems.append(f"{address.host}:{address.port}: {exc}")
            continue
        except RedisLinkError as exc:
            if not exc.retryable:  # a wrong password, a node without cluster support...
                raise
            problems.append(f"{address.host}:{address.port}: {exc}")
            continue
        topology = parse_shards(reply, source)
        if topology.shards:
            return topology
        problems.append(f"{address.host}:{address.port}: no shard serves a slot")
    raise RedisLinkError(
        f"no node of the Redis Cluster {source} told its shards: {'; '.join(problems)}",
        retryable=True,
    )


def migrating_slots(address: MasterAddress) -> frozenset[int]:
    """The slots ``address`` is migrating out or importing (``CLUSTER NODES``'s
    ``[slot->-node]`` and ``[slot-<-node]`` on its own line)."""
    reply = query(address, "CLUSTER", "NODES")
    for line in _text(reply).splitlines():
        fields = line.split()
        if len(fields) > 2 and "myself" in fields[2].split(","):
            return frozenset(
                int(item[1:].split("-", 1)[0]) for item in fields[8:] if item.startswith("[")
            )
    return frozenset()
