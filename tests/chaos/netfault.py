"""Network faults between rkv nodes without root: a TCP proxy on every raft link.

``RaftNetwork`` runs one ``LinkProxy`` per pair of nodes, all on 127.0.0.1, in an
asyncio loop on a background thread. Each directed link (``a -> b``) can be cut
(``partition``, ``isolate``, ``drop``) or slowed (``delay``) and restored
(``heal``). ``ProxiedCluster`` is a ``LocalCluster`` whose nodes talk raft only
through such a network (``cluster.net``).

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

Limit: pysyncobj writes the member addresses (as the writing node sees them) into
each snapshot marker, and a follower that installs the *leader's* marker (it lags
behind the leader's compacted journal: after 5000 entries or 300 s) adopts the
leader's view and loses its own (it may even list itself behind a proxy). That
breaks the proxied topology, not rkv; ``ProxiedCluster.view_problems()`` detects
it. Campaigns longer than a few minutes should check it (or restart clusters).

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
import json
import pickle
import random
import socket
import struct
import threading
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

from pysyncobj.encryptor import getEncryptor

from tests.support.cluster import LocalCluster, NodeProcess

Mode = Literal["reset", "blackhole"]
MODES: tuple[Mode, ...] = ("reset", "blackhole")
Link = tuple[str, str]
"""A directed link: (from node id, to node id)."""
NodeRef = str | NodeProcess

HOST = "127.0.0.1"
CHUNK = 64 * 1024
MAX_FRAME = 64 * 1024 * 1024  # larger frames pass through without marker rewriting
# Proxy ports come from below Linux's ephemeral range (32768-60999), where
# free_ports() and outgoing connections take theirs.
PROXY_PORTS = (10_000, 32_768)

T = TypeVar("T")


def node_id(node: NodeRef) -> str:
    return node if isinstance(node, str) else node.node_id


@dataclass
class LinkState:
    blocked: Mode | None = None
    delay: float = 0.0
    jitter: float = 0.0


@dataclass
class LinkStats:
    """Counters of one directed link. The connection counters are those of the TCP
    pair that carries it (the same for ``a -> b`` and ``b -> a``)."""

    forwarded_bytes: int = 0
    dropped_bytes: int = 0
    connections: int = 0  # accepted and forwarded
    refused: int = 0  # accepted and closed at once (reset fault, or too many)
    cut: int = 0  # open connections closed by a fault or a heal
    upstream_failures: int = 0  # the target node did not accept (down, restarting)
    markers_rewritten: int = 0  # snapshot markers given the receiver's member addresses


def bind_proxy_socket(
    below: str, host: str = HOST, rng: random.Random | None = None
) -> socket.socket:
    """A listening socket on ``host`` whose address string ``host:port`` sorts before
    ``below`` (the initiating node's own address), so pysyncobj still connects."""
    rng = rng or random.Random()

    def fits(port: int) -> bool:
        return f"{host}:{port}" < below

    preferred = [p for p in rng.sample(range(*PROXY_PORTS), 400) if fits(p)]
    fallback = [p for p in range(1024, 65536) if fits(p)]
    rng.shuffle(fallback)
    for port in [*preferred, *fallback[:2000]]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(16)
        except OSError:
            sock.close()
            continue
        return sock
    raise RuntimeError(f"no free port on {host} whose address sorts before {below!r}")


class MarkerRewriter:
    """Rewrites the snapshot markers one direction of a raft connection carries.

    pysyncobj frames are ``struct.pack("i", len) + token``, the token a Fernet
    encryption (the cluster secret) of ``zlib(pickle(message))``. An install-snapshot
    message (``append_entries`` with ``serialized``) carries rkv's marker JSON, whose
    ``members`` are the sender's view of the raft addresses. When they are exactly
    the sender's proxied view of the whole cluster they are replaced by the
    receiver's own view, so the receiver keeps its proxied addresses. Every other
    frame is forwarded byte for byte.
    """

    def __init__(self, fernet: Any, sender_view: set[str], receiver_view: list[str]) -> None:
        self._fernet = fernet
        self._sender_view = sender_view
        self._receiver_view = receiver_view
        self._buffer = bytearray()
        self._passthrough = False

    def feed(self, data: bytes) -> tuple[bytes, int]:
        """The bytes to forward now (whole frames) and how many markers were rewritten."""
        if self._passthrough:
            return data, 0
        buffer = self._buffer
        buffer += data
        out = bytearray()
        rewritten = 0
        while len(buffer) >= 4:
            (size,) = struct.unpack_from("i", buffer)
            if not 0 <= size <= MAX_FRAME:  # not a frame boundary we understand: stop parsing
                self._passthrough = True
                out += buffer
                buffer.clear()
                break
            if len(buffer) < 4 + size:
                break
            token = bytes(buffer[4 : 4 + size])
            del buffer[: 4 + size]
            replacement = self._rewrite(token)
            if replacement is None:
                out += struct.pack("i", size) + token
            else:
                out += struct.pack("i", len(replacement)) + replacement
                rewritten += 1
        return bytes(out), rewritten

    def _rewrite(self, token: bytes) -> bytes | None:
        try:
            plain = zlib.decompress(self._fernet.decrypt(token))
        except Exception:
            return None
        if b"serialized" not in plain:  # cheap filter: most frames are not snapshots
            return None
        try:
            message = pickle.loads(plain)  # frames between our own node processes
            keyed = isinstance(message, tuple) and len(message) == 2
            body = message[1] if keyed else message
            if not (isinstance(body, dict) and body.get("type") == "append_entries"):
                return None
            data, is_first, is_last = body["serialized"]
            if not (is_first and data):
                return None
            marker = json.loads(data)
            if set(marker["members"]) != self._sender_view:
                return None
            marker["members"] = self._receiver_view
            body["serialized"] = (json.dumps(marker).encode(), is_first, is_last)
            new_plain = zlib.compress(pickle.dumps(message), 3)
            timestamp = self._fernet.extract_timestamp(token)
            return bytes(self._fernet.encrypt_at_time(new_plain, timestamp))
        except Exception:  # not an rkv marker (or cut in chunks): forward it unchanged
            return None


class _Pipe:
    """One proxied TCP connection: client (the initiator) <-> upstream (the receiver)."""

    def __init__(
        self,
        proxy: LinkProxy,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.tainted: set[Link] = set()  # directions that lost bytes
        self.tasks: list[asyncio.Task[None]] = []
        self.closed = False

    def start(self) -> None:
        proxy = self.proxy
        for link, (reader, _), (_, writer) in (
            (proxy.forward, self.client, self.upstream),
            (proxy.backward, self.upstream, self.client),
        ):
            queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(
                proxy.network.max_buffered_chunks
            )
            self.tasks.append(asyncio.create_task(self._read(link, reader, queue)))
            self.tasks.append(asyncio.create_task(self._write(link, writer, queue)))

    def close(self, flush: asyncio.StreamWriter | None = None) -> None:
        """Close both sides (RST), or ``flush`` one side first (FIN after its data)."""
        if self.closed:
            return
        self.closed = True
        self.proxy.pipes.discard(self)
        for _, writer in (self.client, self.upstream):
            if writer is flush:
                writer.close()
            else:
                writer.transport.abort()
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()

    async def _read(
        self, link: Link, reader: asyncio.StreamReader, queue: asyncio.Queue[tuple[float, bytes]]
    ) -> None:
        network = self.proxy.network
        state, stats = network.links[link], network.link_stats[link]
        rewriter = network.marker_rewriter(link)
        loop = asyncio.get_running_loop()
        last = 0.0
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                if state.blocked is not None:
                    stats.dropped_bytes += len(data)
                    self.tainted.add(link)
                    continue
                if rewriter is not None:
                    data, rewritten = rewriter.feed(data)
                    stats.markers_rewritten += rewritten
                    if not data:
                        continue
                release = loop.time() + state.delay
                if state.jitter:
                    release += random.uniform(0.0, state.jitter)
                last = max(last, release)  # bytes stay in order
                await queue.put((last, data))
            await queue.put((last, b""))  # end of stream, after what is queued
        except (OSError, asyncio.IncompleteReadError):
            self.close()
        except asyncio.CancelledError:
            raise
        except Exception:  # never let a pump die silently with the pipe open
            self.close()
            raise

    async def _write(
        self, link: Link, writer: asyncio.StreamWriter, queue: asyncio.Queue[tuple[float, bytes]]
    ) -> None:
        network = self.proxy.network
        state, stats = network.links[link], network.link_stats[link]
        loop = asyncio.get_running_loop()
        try:
            while True:
                release, data = await queue.get()
                wait = release - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    self.close(flush=writer)
                    return
                if state.blocked is not None:
                    stats.dropped_bytes += len(data)
                    self.tainted.add(link)
                    continue
                writer.write(data)
                await writer.drain()
                stats.forwarded_bytes += len(data)
        except OSError:
            self.close()
        except asyncio.CancelledError:
            raise
        except Exception:
            self.close()
            raise


class LinkProxy:
    """Forwards the TCP connection pysyncobj keeps between ``initiator`` and ``receiver``
    (``initiator``'s raft address sorts after ``receiver``'s), listening on ``port``."""

    def __init__(
        self, network: RaftNetwork, initiator: str, receiver: str, sock: socket.socket
    ) -> None:
        self.network = network
        self.forward: Link = (initiator, receiver)
        self.backward: Link = (receiver, initiator)
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        host, port = network.addresses[receiver].rsplit(":", 1)
        self.target = (host, int(port))
        self.pipes: set[_Pipe] = set()
        self.server: asyncio.Server | None = None

    @property
    def address(self) -> str:
        return f"{self.network.host}:{self.port}"

    @property
    def links(self) -> tuple[Link, Link]:
        return self.forward, self.backward

    def refuses(self) -> bool:
        return any(self.network.links[link].blocked == "reset" for link in self.links)

    def _count(self, counter: str) -> None:
        for link in self.links:
            stats = self.network.link_stats[link]
            setattr(stats, counter, getattr(stats, counter) + 1)

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, sock=self.sock, limit=CHUNK)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        network = self.network
        if self.refuses() or len(self.pipes) >= network.max_connections_per_link:
            self._count("refused")
            writer.transport.abort()
            return
        try:
            upstream = await asyncio.wait_for(
                asyncio.open_connection(*self.target, limit=CHUNK), network.connect_timeout
            )
        except (OSError, TimeoutError):
            self._count("upstream_failures")
            writer.transport.abort()
            return
        if self.refuses() or network.closing:  # a fault arrived while connecting
            self._count("refused")
            writer.transport.abort()
            upstream[1].transport.abort()
            return
        pipe = _Pipe(self, (reader, writer), upstream)
        self.pipes.add(pipe)
        self._count("connections")
        pipe.start()

    def apply_faults(self) -> None:
        """Cut connections a reset blocks, and those whose lost bytes' direction is open."""
        links = self.network.links
        for pipe in list(self.pipes):
            healed = any(links[link].blocked is None for link in pipe.tainted)
            if self.refuses() or healed:
                self._count("cut")
                pipe.close()

    async def stop(self) -> None:
        for pipe in list(self.pipes):
            pipe.close()
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2.0)
        self.sock.close()


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


# -- a LocalCluster whose raft links go through a RaftNetwork ----------------------------


class ProxiedCluster(LocalCluster):
    """``LocalCluster`` (same API: start, leader, kill, pause, restart, start_node, stop)
    with every raft link through ``self.net``, a ``RaftNetwork`` started with the
    cluster and closed by ``stop()``. Nodes added with ``--join`` are not supported."""

    _net: RaftNetwork | None

    def __post_init__(self) -> None:
        self._net = None
        try:
            super().__post_init__()
        except BaseException:
            if self._net is not None:
                self._net.close()
            raise

    @property
    def net(self) -> RaftNetwork:
        if self._net is None:
            raise RuntimeError("the cluster has no network yet")
        return self._net

    def _args(self, node: NodeProcess) -> list[str]:
        if self._net is None:  # first call: every node (and port) exists now
            self._net = RaftNetwork(
                {n.node_id: n.raft_address for n in self.nodes},
                secret=self.secret_file.read_bytes().strip(),
            ).start()
        return self._net.rewrite_peer_args(node.node_id, super()._args(node))

    def start(self, timeout: float = 30.0) -> ProxiedCluster:
        """Start every node, wait until they are ready and every pair is connected."""
        super().start(timeout)
        self.wait_connected(timeout)
        return self

    def wait_connected(
        self, timeout: float = 15.0, nodes: Sequence[NodeProcess] | None = None
    ) -> None:
        """Wait until every pair of ``nodes`` (default: the live ones) has a proxied
        connection open. pysyncobj retries a failed connection only every 5 s, so a
        cluster can be ready (a leader and one follower) with a pair still unconnected;
        faults injected then would not do what a test means."""
        net = self.net
        targets = list(self.live() if nodes is None else nodes)
        pairs = [(a, b) for i, a in enumerate(targets) for b in targets[i + 1 :]]
        deadline = time.monotonic() + timeout
        while True:
            missing = [(a.node_id, b.node_id) for a, b in pairs if not net.open_connections(a, b)]
            if not missing:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"raft pairs not connected after {timeout}s: {missing}")
            time.sleep(0.05)

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            if self._net is not None:
                self._net.close()

    def add_node(self, node_id: str, join_url: str) -> NodeProcess:
        raise NotImplementedError("a node added with --join would bypass the proxies")

    def expected_members(self, node: NodeProcess) -> list[str]:
        """The raft addresses ``node`` should list as members (itself and its peers)."""
        return self.net.member_view(node)

    def view_problems(self, nodes: Iterable[NodeProcess] | None = None) -> list[str]:
        """Live nodes whose raft member list is not the proxied view they started with
        (e.g. after installing another node's snapshot marker); [] when all is well."""
        problems = []
        for node in self.live() if nodes is None else nodes:
            status = node.status()
            if status is None:
                problems.append(f"{node.node_id}: no /v1/status")
                continue
            got = sorted(m["raft_address"] for m in status.get("members", []))
            want = self.expected_members(node)
            if got != want:
                problems.append(f"{node.node_id}: members {got}, expected {want}")
        return problems


def agreed_leader(
    nodes: Sequence[NodeProcess],
    timeout: float = 20.0,
    everyone: Sequence[NodeProcess] | None = None,
    other_than: NodeProcess | None = None,
) -> NodeProcess:
    """The node every one of ``nodes`` names as leader (e.g. a majority's side of a
    partition, where ``LocalCluster.leader()`` would wait for the isolated node too);
    it is looked up in ``everyone`` (default: ``nodes``). With ``other_than``, wait
    for a leader that is not that node."""
    deadline = time.monotonic() + timeout
    seen: list[Any] = []
    while time.monotonic() < deadline:
        seen = []
        for node in nodes:
            status = node.status(timeout=2.0)
            leader = status.get("leader") if status else None
            seen.append(leader["id"] if leader else None)
        if seen and None not in seen and len(set(seen)) == 1:
            named = [n for n in (everyone or nodes) if n.node_id == seen[0]]
            if named and named[0] is not other_than:
                return named[0]
        time.sleep(0.1)
    raise TimeoutError(
        f"{[n.node_id for n in nodes]} agree on no leader after {timeout}s (last: {seen})"
    )


def wait_stable(
    nodes: Sequence[NodeProcess], quiet: float = 1.5, timeout: float = 30.0
) -> NodeProcess:
    """Wait until every one of ``nodes`` has named the same leader in the same term for
    ``quiet`` seconds in a row, and return it. After a heal a node that was cut off
    can still depose the leader (pysyncobj has no pre-vote: its raised term wins), so
    tests that need one leader for a while wait for this first."""
    deadline = time.monotonic() + timeout
    since: float | None = None
    agreed: tuple[str, int] | None = None
    last: list[Any] = []
    while time.monotonic() < deadline:
        last = []
        for node in nodes:
            status = node.status(timeout=2.0)
            leader = status.get("leader") if status else None
            last.append((leader["id"], status["term"]) if status and leader else None)
        now = time.monotonic()
        current = last[0] if last and None not in last and len(set(last)) == 1 else None
        if current is None or current != agreed:
            agreed, since = current, now
        elif since is not None and now - since >= quiet:
            leader_id = current[0]
            return next(n for n in nodes if n.node_id == leader_id)
        time.sleep(0.1)
    raise TimeoutError(f"no stable leader among {[n.node_id for n in nodes]}: {last}")
