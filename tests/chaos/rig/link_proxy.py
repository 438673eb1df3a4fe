"""The TCP proxy on one raft link, as ``RaftNetwork`` (netfault.py) runs it.

``LinkProxy`` listens where the initiator of a pair of nodes connects (see
netfault.py for the addressing) and connects each accepted connection on to the
receiver's real raft port, as a ``_Pipe``: per direction, a reader task drops the
bytes of a blocked direction (blackhole), rewrites raft markers
(``MarkerRewriter``) and stamps a release time (delay), and a writer task forwards
them in order when due. ``LinkProxy.apply_faults()`` cuts the connections a
``reset`` blocks and those whose lost bytes' direction is open again. Each directed
link's fault (``LinkState``) and counters (``LinkStats``) are the network's, which
the pair's proxy reads and updates. ``bind_proxy_socket`` picks a listening port
whose address sorts before the initiator's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import pickle
import random
import socket
import struct
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # only for annotations: netfault.py imports this module
    from tests.chaos.rig.netfault import RaftNetwork

Mode = Literal["reset", "blackhole"]
MODES: tuple[Mode, ...] = ("reset", "blackhole")
Link = tuple[str, str]
"""A directed link: (from node id, to node id)."""

HOST = "127.0.0.1"
CHUNK = 64 * 1024
MAX_FRAME = 64 * 1024 * 1024  # larger frames pass through without marker rewriting
# Proxy ports come from below Linux's ephemeral range (32768-60999), where
# free_ports() and outgoing connections take theirs.
PROXY_PORTS = (10_000, 32_768)


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
    markers_rewritten: int = 0  # raft markers given the receiver's member addresses


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
    """Rewrites the raft markers one direction of a raft connection carries.

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
