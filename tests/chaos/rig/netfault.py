"""Network faults between rkv nodes without root: a TCP proxy on every raft link.

``RaftNetwork`` runs one ``LinkProxy`` (link_proxy.py) per pair of nodes, all on
127.0.0.1, in an asyncio loop on a background thread. Each directed link
(``a -> b``) can be cut (``partition``, ``isolate``, ``drop``) or slowed
(``delay``) and restored (``heal``). ``ProxiedCluster`` (proxied_cluster.py,
re-exported here with ``agreed_leader`` and ``wait_stable``) is a ``LocalCluster``
whose nodes talk raft only through such a network (``cluster.net``).

How the proxy fits pysyncobj's TCP transport (pysyncobj 0.3.17, transport.py)
------------------------------------------------------------------------------
pysyncobj keeps one TCP connection per pair of nodes. A node connects to a peer
only if its own address string is greater than the string it has for the peer
(``_shouldConnect``: ``self.address > node.address``), and then sends its own
address as the first message; the accepting side looks that string up among its
peers' address strings (``_onIncomingMessageReceived``) and drops the connection
if it is unknown. So for a pair ``I > R`` (comparing the real addresses):

- the initiator ``I`` is given the peer ``R`` at a proxy address ``127.0.0.1:P``
  chosen with ``"127.0.0.1:P" < I``'s address, so ``I`` still connects (to the
  proxy, which connects on to ``R``'s real raft port);
- the receiver ``R`` is given ``I`` at ``I``'s real address: it never connects
  (``R < I``) and recognises the address ``I`` sends through the proxy.

Both directions of the pair (``I -> R`` and ``R -> I``) travel over that one
proxied connection: client-to-upstream bytes are ``I -> R``, the others ``R -> I``.
The nodes' views of each other's addresses therefore differ (``I`` knows ``R`` as
the proxy address, ``R`` knows ``I`` by its real address); rkv resolves leaders
and members through each node's own ``--peer`` flags, which is consistent.

Raft markers: rkv writes the member addresses (as the writing node sees them)
into each raft marker, and a follower that installs the *leader's* marker (it
lags behind the leader's compacted journal: after 5000 entries or 300 s) would adopt
the leader's view and lose its own (it may even list itself behind a proxy). That
would break the proxied topology, not rkv. Given the cluster secret (``ProxiedCluster``
passes it), the proxy rewrites such markers into the receiver's view
(``MarkerRewriter``); ``ProxiedCluster.view_problems()`` detects a node that lost
its view all the same.

Faults
------
- ``reset`` (the default of ``partition`` / ``isolate``): the pair's connections are
  closed at once (RST) and new ones are accepted and closed immediately, so
  pysyncobj sees the peer as disconnected. TCP carries both directions, so a
  ``reset`` of one direction cuts both.
- ``blackhole`` (the default of ``drop``): connections stay open but the blocked
  direction's bytes are read and discarded (counted in ``stats()``); pysyncobj
  notices only through its own time-out (3.5 s without data). One-way drops are
  meaningful here: ``drop(a, b)`` silences ``a -> b`` while ``b -> a`` flows. A
  connection that lost bytes has a broken message stream, so it is closed when
  its direction is restored (the nodes reconnect within pysyncobj's 5 s retry).
- ``delay(a, b, s, jitter)``: ``a -> b`` bytes are held ``s`` (+ up to ``jitter``)
  seconds, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from pysyncobj.encryptor import getEncryptor

from tests.chaos.rig.link_proxy import (
    CHUNK,
    HOST,
    MAX_FRAME,
    MODES,
    PROXY_PORTS,
    Link,
    LinkProxy,
    LinkState,
    LinkStats,
    MarkerRewriter,
    Mode,
    bind_proxy_socket,
)
from tests.chaos.rig.proxied_cluster import ProxiedCluster, agreed_leader, wait_stable
from tests.support.cluster import NodeProcess

__all__ = [
    "CHUNK",
    "HOST",
    "MAX_FRAME",
    "MODES",
    "PROXY_PORTS",
    "Link",
    "LinkProxy",
    "LinkState",
    "LinkStats",
    "MarkerRewriter",
    "Mode",
    "NodeRef",
    "ProxiedCluster",
    "RaftNetwork",
    "agreed_leader",
    "bind_proxy_socket",
    "node_id",
    "wait_stable",
]

NodeRef = str | NodeProcess

T = TypeVar("T")


def node_id(node: NodeRef) -> str:
    return node if isinstance(node, str) else node.node_id


class RaftNetwork:
    """TCP proxies on the raft links between nodes (id -> real raft address "host:port").

    Start it before the nodes (``start()``), give each node the peer addresses of
    ``peer_address()`` / ``peer_args()``, and ``close()`` it after them. Every
    method is thread-safe and returns once the change is in force (connections a
    fault cuts are closed by then).
    """

    def __init__(
        self,
        addresses: Mapping[str, str],
        *,
        host: str = HOST,
        max_connections_per_link: int = 8,
        max_buffered_chunks: int = 64,
        connect_timeout: float = 2.0,
        seed: int | None = None,
        secret: bytes | None = None,
    ) -> None:
        if len(set(addresses.values())) != len(addresses):
            raise ValueError(f"raft addresses must be distinct: {dict(addresses)}")
        self.addresses = dict(addresses)
        self.host = host
        self.max_connections_per_link = max_connections_per_link
        self.max_buffered_chunks = max_buffered_chunks
        self.connect_timeout = connect_timeout
        self.links: dict[Link, LinkState] = {
            (a, b): LinkState() for a in addresses for b in addresses if a != b
        }
        self.link_stats: dict[Link, LinkStats] = {link: LinkStats() for link in self.links}
        self.closing = False
        self._fernet: Any = None
        if secret is not None:
            self._fernet = getEncryptor(secret)
        self._rng = random.Random(seed)
        self._proxies: dict[frozenset[str], LinkProxy] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        ids = sorted(addresses)
        try:
            for i, a in enumerate(ids):
                for b in ids[i + 1 :]:
                    initiator = self.initiator(a, b)
                    receiver = b if initiator == a else a
                    sock = bind_proxy_socket(self.addresses[initiator], host, self._rng)
                    self._proxies[frozenset((a, b))] = LinkProxy(self, initiator, receiver, sock)
        except BaseException:
            for proxy in self._proxies.values():
                proxy.sock.close()
            raise

    # -- topology -------------------------------------------------------------------

    def initiator(self, a: NodeRef, b: NodeRef) -> str:
        """The node of the pair that opens the TCP connection (pysyncobj's rule)."""
        a, b = node_id(a), node_id(b)
        return a if self.addresses[a] > self.addresses[b] else b

    def proxy(self, a: NodeRef, b: NodeRef) -> LinkProxy:
        return self._proxies[frozenset((node_id(a), node_id(b)))]

    def peer_address(self, node: NodeRef, peer: NodeRef) -> str:
        """The raft address ``node`` must be given for ``peer``: the pair's proxy if
        ``node`` initiates the connection, else ``peer``'s real address."""
        node, peer = node_id(node), node_id(peer)
        if node == peer:
            raise ValueError(f"{node} is not its own peer")
        if self.initiator(node, peer) == node:
            return self.proxy(node, peer).address
        return self.addresses[peer]

    def member_view(self, node: NodeRef) -> list[str]:
        """The raft member addresses ``node`` holds: its own and its peers' as given."""
        me = node_id(node)
        peers = [self.peer_address(me, p) for p in self.addresses if p != me]
        return sorted([self.addresses[me], *peers])

    def marker_rewriter(self, link: Link) -> MarkerRewriter | None:
        """A rewriter for the ``link`` direction of a new connection (None without the
        cluster secret: markers then pass unchanged)."""
        if self._fernet is None:
            return None
        sender, receiver = link
        return MarkerRewriter(
            self._fernet, set(self.member_view(sender)), self.member_view(receiver)
        )

    def peer_args(self, node: NodeRef, urls: Mapping[str, str]) -> list[str]:
        """``--peer ID,RAFT,URL`` flags for ``node`` (``urls``: id -> HTTP base URL)."""
        me = node_id(node)
        args: list[str] = []
        for peer in sorted(self.addresses):
            if peer != me:
                args += ["--peer", f"{peer},{self.peer_address(me, peer)},{urls[peer]}"]
        return args

    def rewrite_peer_args(self, node: NodeRef, args: Sequence[str]) -> list[str]:
        """``args`` with every ``--peer ID,RAFT,URL`` pointed at the proxied address."""
        me = node_id(node)
        out = list(args)
        for i, arg in enumerate(out[:-1]):
            if arg == "--peer":
                peer, address, url = out[i + 1].split(",", 2)
                if self.addresses.get(peer) != address:
                    raise ValueError(f"--peer {out[i + 1]} is not the network's {peer}")
                out[i + 1] = f"{peer},{self.peer_address(me, peer)},{url}"
        return out

    # -- life cycle -----------------------------------------------------------------

    def start(self) -> RaftNetwork:
        if self._loop is not None:
            return self
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="raft-netfault", daemon=True)
        self._thread.start()
        self._run(self._start_servers())
        return self

    async def _start_servers(self) -> None:
        for proxy in self._proxies.values():
            await proxy.start()

    def close(self) -> None:
        """Close every proxied connection and listener, then stop the loop thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            for proxy in self._proxies.values():
                proxy.sock.close()
            return
        with contextlib.suppress(Exception):
            self._run(self._stop_servers())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        if not thread.is_alive():
            loop.close()
        self._loop = self._thread = None

    async def _stop_servers(self) -> None:
        self.closing = True
        for proxy in self._proxies.values():
            await proxy.stop()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def __enter__(self) -> RaftNetwork:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, coro: Awaitable[T], timeout: float = 30.0) -> T:
        loop = self._loop
        if loop is None:
            raise RuntimeError("the network is not started")

        async def wrapper() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrapper(), loop).result(timeout)

    def _on_loop(self, fn: Callable[[], T]) -> T:
        async def call() -> T:
            return fn()

        return self._run(call())

    # -- faults ---------------------------------------------------------------------

    def _links_of(self, a: NodeRef, b: NodeRef) -> Link:
        link = (node_id(a), node_id(b))
        if link not in self.links:
            raise KeyError(f"no raft link {link[0]} -> {link[1]}")
        return link

    def _block(self, changes: Mapping[Link, Mode | None], exclusive: bool = False) -> None:
        for mode in changes.values():
            if mode is not None and mode not in MODES:
                raise ValueError(f"mode must be one of {MODES}, not {mode!r}")

        def apply() -> None:
            for link, state in self.links.items():
                if link in changes:
                    state.blocked = changes[link]
                elif exclusive:
                    state.blocked = None
            for proxy in self._proxies.values():
                proxy.apply_faults()

        self._on_loop(apply)

    def partition(self, groups: Iterable[Iterable[NodeRef]], mode: Mode = "reset") -> None:
        """Cut every link between different groups (both ways) and restore those within
        a group (earlier drops are replaced; delays stay). Nodes named in no group form
        one more group together."""
        group_of: dict[str, int] = {}
        count = 0
        for count, group in enumerate(groups, start=1):
            for member in group:
                name = node_id(member)
                if name not in self.addresses:
                    raise KeyError(f"unknown node {name!r}")
                if name in group_of:
                    raise ValueError(f"{name} is in two groups")
                group_of[name] = count
        for name in self.addresses:
            group_of.setdefault(name, count + 1)
        self._block(
            {(a, b): mode if group_of[a] != group_of[b] else None for a, b in self.links},
            exclusive=True,
        )

    def isolate(self, node: NodeRef, mode: Mode = "reset") -> None:
        """Cut ``node`` from every other node (the others stay connected)."""
        self.partition([[node]], mode)

    def drop(self, a: NodeRef, b: NodeRef, mode: Mode = "blackhole") -> None:
        """Block ``a -> b`` only (other links unchanged). With ``reset`` the TCP pair is
        cut, which silences ``b -> a`` too."""
        self._block({self._links_of(a, b): mode})

    def restore(self, a: NodeRef, b: NodeRef) -> None:
        """Unblock ``a -> b`` (its delay stays)."""
        self._block({self._links_of(a, b): None})

    def delay(self, a: NodeRef, b: NodeRef, seconds: float, jitter: float = 0.0) -> None:
        """Hold ``a -> b`` bytes ``seconds`` (+ uniform ``[0, jitter]``) before forwarding,
        keeping their order (0 removes the delay)."""
        if seconds < 0 or jitter < 0:
            raise ValueError("delays must not be negative")
        link = self._links_of(a, b)

        def apply() -> None:
            state = self.links[link]
            state.delay, state.jitter = seconds, jitter

        self._on_loop(apply)

    def delay_node(self, node: NodeRef, seconds: float, jitter: float = 0.0) -> None:
        """Delay every link from and to ``node``."""
        me = node_id(node)
        for a, b in self.links:
            if me in (a, b):
                self.delay(a, b, seconds, jitter)

    def heal(self) -> None:
        """Restore every link and remove every delay."""

        def apply() -> None:
            for state in self.links.values():
                state.blocked, state.delay, state.jitter = None, 0.0, 0.0
            for proxy in self._proxies.values():
                proxy.apply_faults()

        self._on_loop(apply)

    # -- observation ----------------------------------------------------------------

    def blocked(self) -> dict[Link, Mode]:
        return self._on_loop(
            lambda: {link: s.blocked for link, s in self.links.items() if s.blocked is not None}
        )

    def stats(self) -> dict[Link, LinkStats]:
        return self._on_loop(lambda: {link: replace(s) for link, s in self.link_stats.items()})

    def open_connections(self, a: NodeRef, b: NodeRef) -> int:
        """Proxied connections open now between ``a`` and ``b``."""
        proxy = self.proxy(a, b)
        return self._on_loop(lambda: len(proxy.pipes))

    def describe(self) -> str:
        lines = []
        for pair, proxy in sorted(self._proxies.items(), key=lambda kv: sorted(kv[0])):
            del pair
            a, b = proxy.forward
            lines.append(
                f"{a} ({self.addresses[a]}) -> {proxy.address} -> {b} ({self.addresses[b]})"
            )
        return "\n".join(lines)
