"""``redis-cluster://host:port[,host:port...]``: the seed nodes of a Redis Cluster.

Any reachable seed answers ``CLUSTER SHARDS`` for the whole cluster (see
:mod:`.topology`); several are given so that discovery survives one being
down. Every node of the cluster is logged into with the same user and
password, given apart from the URL (a file or the environment) or in it
(``redis-cluster://user:password@host:port,host:port``).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from replication.redis.link.types import DEFAULT_PORT, MasterAddress

SCHEME = "redis-cluster"


@dataclass(frozen=True)
class ClusterSource:
    """The seeds to discover the cluster from, and the login every node takes."""

    seeds: tuple[MasterAddress, ...]

    @classmethod
    def parse(cls, url: str, password: str | None = None) -> ClusterSource:
        """Parse ``redis-cluster://[[user]:password@]host[:port][,host[:port]...]``.

        Raises ValueError naming the problem (never showing the password).
        """
        scheme, sep, rest = url.partition("://")
        if not sep or scheme != SCHEME:
            raise ValueError(f"bad Redis Cluster URL: expected {SCHEME}://host:port[,host:port...]")
        login, at, hosts = rest.rpartition("@")
        if any(c in hosts for c in "/?#"):
            raise ValueError(
                "bad Redis Cluster URL: nothing may follow the host:port list "
                "(a cluster has only db 0)"
            )
        names = [name.strip() for name in hosts.split(",")]
        if not names or any(not name for name in names):
            raise ValueError("bad Redis Cluster URL: an empty host in the host:port list")
        username: str | None = None
        if at:
            user, colon, secret = login.partition(":")
            username = unquote(user) if user else None
            if colon:
                if password is not None:
                    raise ValueError(
                        "bad Redis Cluster URL: the URL holds a password and one is given "
                        "apart; give it once"
                    )
                password = unquote(secret)
        if username is not None and password is None:
            raise ValueError("bad Redis Cluster URL: a user needs a password")
        seeds = []
        for name in names:
            try:
                seed = MasterAddress.parse(f"redis://{name}")
            except ValueError as exc:
                reason = str(exc).rpartition("': ")[2]
                raise ValueError(f"bad Redis Cluster URL: {name!r}: {reason}") from None
            seeds.append(MasterAddress(seed.host, seed.port, username, password))
        return cls(tuple(dict.fromkeys(seeds)))

    @property
    def password(self) -> str | None:
        return self.seeds[0].password

    def node(self, host: str, port: int) -> MasterAddress:
        """The address of a cluster node, with the cluster's login."""
        first = self.seeds[0]
        return MasterAddress(host, port or DEFAULT_PORT, first.username, first.password)

    def __str__(self) -> str:
        first = self.seeds[0]
        login = f"{first.username or ''}:***@" if first.password is not None else ""
        hosts = ",".join(str(seed).split("@")[-1].removeprefix("redis://") for seed in self.seeds)
        return f"{SCHEME}://{login}{hosts}"
