"""Network faults on the raft links (tests/chaos/rig/netfault.py), with real node processes.

- the proxy itself: forwarding, one-way blackholes, resets, delays and heals really
  withhold or cut traffic (against plain echo servers);
- an isolated leader: the majority elects a new leader and takes writes, the old
  leader commits nothing, and after the heal every node has the majority's state;
- a partitioned follower falls behind and catches up; a delayed link still works.
"""

from __future__ import annotations

import json
import pickle
import socket
import socketserver
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pysyncobj.encryptor import getEncryptor

from tests.chaos.rig.cluster_checks import State, converged, put, put_ok, stale_state
from tests.chaos.rig.netfault import (
    MarkerRewriter,
    ProxiedCluster,
    RaftNetwork,
    agreed_leader,
    wait_stable,
)
from tests.support.cluster import Response, wait_until

# -- helpers -----------------------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProxiedCluster]:
    running = ProxiedCluster(tmp_path / "cluster")
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture
def compacting_cluster(tmp_path: Path) -> Iterator[ProxiedCluster]:
    """Journals compacted every 20 entries: a follower that misses more gets the
    leader's raft marker (install snapshot) when it comes back."""
    running = ProxiedCluster(tmp_path / "cluster", extra_args=["--raft-compaction-entries", "20"])
    try:
        running.start()
        yield running
    finally:
        running.stop()


def raft_client_connections(ports: set[int]) -> int:
    """Established TCP connections on this machine whose far end is one of ``ports``."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            remote, state = fields[2], fields[3]
            if state == "01" and int(remote.rsplit(":", 1)[1], 16) in ports:
                count += 1
    return count


def assert_only_proxied(cluster: ProxiedCluster) -> None:
    """Every raft connection goes through the proxy: one per pair, and no other
    connection reaches a node's raft port."""
    net = cluster.net
    pairs = [(a, b) for i, a in enumerate(cluster.nodes) for b in cluster.nodes[i + 1 :]]
    assert all(net.open_connections(a, b) == 1 for a, b in pairs)  # start() waited for them
    ports = {n.raft_port for n in cluster.nodes}
    assert raft_client_connections(ports) == len(pairs), net.describe()


def no_truncation_of_applied_entries(cluster: ProxiedCluster) -> None:
    for node in cluster.nodes:
        log = node.log_path.read_text(errors="replace")
        assert "truncating already-applied" not in log, f"{node.node_id}:\n{log[-4000:]}"


# -- the proxy on its own ---------------------------------------------------------------


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server: Any = self.server
        while data := self.request.recv(4096):
            server.received += len(data)
            self.request.sendall(data)


class _EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    received = 0


def _roundtrip(sock: socket.socket, data: bytes, timeout: float = 2.0) -> bytes:
    sock.settimeout(timeout)
    sock.sendall(data)
    got = b""
    while len(got) < len(data):
        try:
            chunk = sock.recv(4096)
        except TimeoutError:
            break  # what arrived so far
        if not chunk:
            break
        got += chunk
    return got


def _closed_by_peer(sock: socket.socket, timeout: float = 2.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_proxy_forwards_delays_drops_and_cuts() -> None:
    servers = [_EchoServer(("127.0.0.1", 0), _Echo) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    addresses = {
        name: f"127.0.0.1:{s.server_address[1]}" for name, s in zip("ab", servers, strict=True)
    }
    try:
        with RaftNetwork(addresses) as net:
            initiator = net.initiator("a", "b")
            receiver = "b" if initiator == "a" else "a"
            target = servers["ab".index(receiver)]
            assert net.peer_address(receiver, initiator) == addresses[initiator]
            proxy_address = net.peer_address(initiator, receiver)
            assert proxy_address < addresses[initiator]  # pysyncobj's initiator still connects
            host, port = proxy_address.rsplit(":", 1)
            args = net.rewrite_peer_args(
                initiator, ["--peer", f"{receiver},{addresses[receiver]},u"]
            )
            assert args == ["--peer", f"{receiver},{proxy_address},u"]

            def connect() -> socket.socket:
                return socket.create_connection((host, int(port)), timeout=2)

            # Forwarding, both ways.
            conn = connect()
            assert _roundtrip(conn, b"ping") == b"ping"
            stats = net.stats()
            assert stats[(initiator, receiver)].forwarded_bytes == 4
            assert stats[(receiver, initiator)].forwarded_bytes == 4

            # A delay holds the bytes, in order.
            net.delay(initiator, receiver, 0.3)
            started = time.monotonic()
            assert _roundtrip(conn, b"slow" * 100) == b"slow" * 100
            assert time.monotonic() - started >= 0.3
            net.delay(initiator, receiver, 0)

            # One-way blackhole: requests arrive, replies are withheld.
            net.drop(receiver, initiator)
            before = target.received
            assert _roundtrip(conn, b"lost", timeout=0.5) == b""  # timed out, nothing back
            wait_until(lambda: target.received == before + 4, 2, "the request to arrive")
            assert net.stats()[(receiver, initiator)].dropped_bytes >= 4
            assert net.open_connections(initiator, receiver) == 1  # not closed: silent
            # Restoring the direction cuts the connection whose stream lost bytes.
            net.restore(receiver, initiator)
            assert _closed_by_peer(conn)
            conn.close()
            conn = connect()
            assert _roundtrip(conn, b"again") == b"again"

            # A partition (reset) cuts the open connection and refuses new ones.
            net.partition([["a"], ["b"]])
            assert net.blocked() == {("a", "b"): "reset", ("b", "a"): "reset"}
            assert _closed_by_peer(conn)
            conn.close()
            refused_conn = connect()
            assert _closed_by_peer(refused_conn)
            refused_conn.close()
            stats = net.stats()
            assert stats[(initiator, receiver)].cut >= 2
            assert stats[(initiator, receiver)].refused >= 1

            # Healed: traffic flows again.
            net.heal()
            assert net.blocked() == {}
            conn = connect()
            assert _roundtrip(conn, b"healed") == b"healed"
            conn.close()
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def test_marker_rewriter_gives_the_receiver_its_view() -> None:
    """An install-snapshot frame carrying the sender's proxied member list gets the
    receiver's; every other frame passes byte for byte, however the stream is cut."""
    fernet = getEncryptor(b"test-secret-0123456789abcdef")
    sender_view = ["127.0.0.1:11111", "127.0.0.1:12222", "127.0.0.1:50000"]
    receiver_view = ["127.0.0.1:13333", "127.0.0.1:40000", "127.0.0.1:50000"]
    rewriter = MarkerRewriter(fernet, set(sender_view), receiver_view)

    def frame(message: Any, timestamp: int = 7) -> bytes:
        token: bytes = fernet.encrypt_at_time(zlib.compress(pickle.dumps(message), 3), timestamp)
        return struct.pack("i", len(token)) + token

    def snapshot(members: list[str]) -> Any:
        marker = {"format": 1, "node": "n0", "raft_index": 9, "members": members}
        return (
            b"rand-key",
            {
                "type": "append_entries",
                "term": 3,
                "commit_index": 9,
                "serialized": (json.dumps(marker).encode(), True, False),
            },
        )

    heartbeat = (b"rand-key", {"type": "append_entries", "term": 3, "commit_index": 9})
    foreign = snapshot(["10.0.0.1:1", "10.0.0.2:1"])  # not the sender's view: untouched
    untouched = [frame(heartbeat), frame(foreign)]
    stream = untouched[0] + frame(snapshot(sender_view)) + untouched[1]
    out = b""
    rewritten = 0
    for i in range(0, len(stream), 7):
        data, count = rewriter.feed(stream[i : i + 7])
        out += data
        rewritten += count
    assert rewritten == 1

    frames = []
    while out:
        (size,) = struct.unpack_from("i", out)
        frames.append(out[4 : 4 + size])
        out = out[4 + size :]
    assert len(frames) == 3
    assert frames[0] == untouched[0][4:]  # byte for byte
    assert frames[2] == untouched[1][4:]
    key, body = pickle.loads(zlib.decompress(fernet.decrypt(frames[1])))
    assert key == b"rand-key" and fernet.extract_timestamp(frames[1]) == 7
    data, is_first, is_last = body["serialized"]
    assert (is_first, is_last) == (True, False)
    assert json.loads(data)["members"] == receiver_view
    assert json.loads(data)["raft_index"] == 9


# -- real clusters ------------------------------------------------------------------------


def test_isolated_leader_commits_nothing_and_converges_after_heal(
    cluster: ProxiedCluster,
) -> None:
    """Blackhole the leader: connections stay open, so it still takes a write into its
    log, but cannot commit it; the majority elects a leader and takes writes; after the
    heal every node holds the majority's state and the isolated write is gone."""
    net, prefix = cluster.net, "iso/"
    assert cluster.view_problems() == []
    assert_only_proxied(cluster)
    old = cluster.leader()
    majority = [n for n in cluster.nodes if n is not old]
    expected: State = {}
    for i in range(3):
        key = f"{prefix}before-{i}"
        expected[key.encode()] = (put_ok(old.url, key, b"before"), b"before")

    status = old.status()
    assert status is not None
    entries_before = status["raft_log_entries"]

    net.isolate(old, mode="blackhole")
    isolated: dict[str, Response | None] = {}
    writer = threading.Thread(
        target=lambda: isolated.update(answer=put(old.url, f"{prefix}isolated", b"lost")),
        daemon=True,
    )
    writer.start()

    def appended() -> bool:  # the isolated leader took the write into its log
        status = old.status()
        return status is not None and status["raft_log_entries"] > entries_before

    wait_until(appended, 3, "the isolated leader to append the write")

    # The majority keeps naming the old leader until its connections time out.
    new = agreed_leader(majority, timeout=20, everyone=cluster.nodes, other_than=old)
    for i in range(5):
        key = f"{prefix}majority-{i}"
        expected[key.encode()] = (put_ok(new.url, key, b"majority"), b"majority")

    writer.join(timeout=30)
    assert not writer.is_alive()
    answer = isolated["answer"]
    assert answer is None or answer.status != 200, answer.body
    # Nothing crossed: the old leader has not seen the majority's writes.
    assert not any(k.startswith(f"{prefix}majority".encode()) for k in stale_state(old, prefix))
    stats = net.stats()
    assert sum(stats[(old.node_id, n.node_id)].dropped_bytes for n in majority) > 0
    assert sum(stats[(n.node_id, old.node_id)].dropped_bytes for n in majority) > 0

    net.heal()
    state = converged(cluster.nodes, prefix, expected, timeout=30)
    assert state == expected, "a node holds a write the majority never acknowledged"
    assert f"{prefix}isolated".encode() not in state
    leader = wait_stable(cluster.nodes)
    put_ok(leader.url, f"{prefix}after", b"after")
    assert cluster.view_problems() == []
    no_truncation_of_applied_entries(cluster)


def test_partitioned_follower_catches_up_and_delayed_links_work(
    compacting_cluster: ProxiedCluster,
) -> None:
    """A follower cut off (reset) while the leader compacts its journal comes back
    through the leader's raft marker, whose member list the proxy gives the
    follower's own view; then a leader with every link delayed still commits."""
    cluster = compacting_cluster
    net, prefix = cluster.net, "part/"
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes if n is not leader)
    expected: State = {}

    # Reset partition of a follower: its connections are cut at once.
    net.isolate(follower)
    for other in cluster.nodes:
        if other is not follower:
            assert net.open_connections(follower, other) == 0
    for i in range(30):  # more than a journal's worth: the leader compacts meanwhile
        key = f"{prefix}during-{i}"
        expected[key.encode()] = (put_ok(leader.url, key, b"during"), b"during")
    refused = put(follower.url, f"{prefix}on-follower", b"x")
    assert refused is not None and refused.status == 503, refused and refused.body
    assert not stale_state(follower, prefix)

    net.heal()
    converged(cluster.nodes, prefix, expected, timeout=30)
    stats = net.stats()
    assert (
        sum(
            stats[(n.node_id, follower.node_id)].markers_rewritten
            for n in cluster.nodes
            if n is not follower
        )
        >= 1
    ), "the follower did not install a raft marker"
    assert cluster.view_problems() == []

    # Delay every link from and to the leader: a commit needs leader -> follower and
    # back, so a write takes at least twice the delay, and still succeeds.
    delay = 0.15
    leader = wait_stable(cluster.nodes)
    net.delay_node(leader, delay)
    for i in range(5):
        key = f"{prefix}delayed-{i}"
        started = time.monotonic()
        expected[key.encode()] = (put_ok(leader.url, key, b"delayed"), b"delayed")
        assert time.monotonic() - started >= 2 * delay
    assert cluster.leader() is leader
    net.heal()
    converged(cluster.nodes, prefix, expected, timeout=30)
    assert cluster.view_problems() == []
    no_truncation_of_applied_entries(cluster)
