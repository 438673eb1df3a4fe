"""The raft port against hostile clients (issue 15), one test per finding, each against
real node processes:

1. a peer announcing a 2 GiB frame is disconnected before the node buffers it (with or
   without the secret), and the cluster keeps its leader and serves throughout;
2. idle connections that never authenticate are closed after --raft-handshake-timeout,
   at most --max-raft-handshakes wait at once, and a flood of them keeps no member out;
3. running out of file descriptors (EMFILE in accept) no longer closes the raft port;
4. a wrong cluster secret is logged on both sides of the connection, and a flood of
   failed handshakes makes few log lines.

Each prints the node's RSS before and after the attack (measured, not asserted).
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from http_api.request_size import body_limit
from node.keyspace import DEFAULT_MAX_VALUE_BYTES
from raft.config import frame_bytes_needed
from tests.support.cluster import LocalCluster, NodeProcess, http, wait_until
from tests.support.raft_wire import (
    LARGEST_LENGTH,
    LENGTH,
    authenticate,
    closed_by_peer,
    open_fds,
    push_until_closed,
    rss_mib,
)

HANDSHAKE_TIMEOUT = 2.0
MAX_HANDSHAKES = 8


@contextlib.contextmanager
def running(cluster: LocalCluster) -> Iterator[LocalCluster]:
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def secret_of(cluster: LocalCluster) -> bytes:
    return cluster.secret_file.read_bytes().strip()


def pid_of(node: NodeProcess) -> int:
    assert node.proc is not None
    return node.proc.pid


def log_of(node: NodeProcess) -> str:
    return node.log_path.read_text(errors="replace")


def by_raft_address(cluster: LocalCluster) -> list[NodeProcess]:
    """pysyncobj's rule: of two members, the one with the greater address (as a string)
    dials the other. So the first node here accepts connections from all others, and the
    last dials all others."""
    return sorted(cluster.nodes, key=lambda n: n.raft_address)


def reachable(a: NodeProcess, b: NodeProcess) -> bool:
    """Whether ``a`` reports a raft connection to ``b``."""
    status = a.status()
    if status is None:
        return False
    return any(m["id"] == b.node_id and m["reachable"] for m in status["members"])


def terms_and_role_changes(cluster: LocalCluster) -> dict[str, tuple[Any, Any]]:
    out = {}
    for node in cluster.nodes:
        status = node.status()
        assert status is not None, node.node_id
        out[node.node_id] = (status.get("term"), status["role_changes"])
    return out


class Traffic(threading.Thread):
    """PUT then GET (linearizable) against one node until stopped; records failures."""

    def __init__(self, node: NodeProcess) -> None:
        super().__init__(daemon=True)
        self.node = node
        self.done = threading.Event()
        self.served = 0
        self.failures: list[str] = []

    def run(self) -> None:
        i = 0
        while not self.done.is_set():
            url = f"{self.node.url}/v1/kv/traffic/{i}"
            value = f"v{i}".encode()
            try:
                put = http("PUT", url, value, timeout=10)
                got = http("GET", url, timeout=10)
            except OSError as exc:
                self.failures.append(f"{i}: {exc}")
            else:
                if put.status != 200 or got.status != 200 or got.body != value:
                    self.failures.append(
                        f"{i}: PUT {put.status} GET {got.status} {got.body[:80]!r}"
                    )
                else:
                    self.served += 1
            i += 1

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=30)


def restart_and_wait_connected(cluster: LocalCluster, node: NodeProcess, to: NodeProcess) -> None:
    cluster.restart(cluster.nodes.index(node))
    wait_until(
        lambda: reachable(node, to) and reachable(to, node),
        60,
        f"{node.node_id} (restarted) and {to.node_id} to be connected again\n{cluster.logs()}",
        interval=0.25,
    )


# -- 1. frame sizes ---------------------------------------------------------------------


def test_a_2_gib_frame_is_refused_before_it_is_buffered_and_the_cluster_keeps_serving(
    tmp_path: Path,
) -> None:
    # The tightest limit a node accepts (tests/unit/test_raft_transport_limits.py checks
    # that pysyncobj's frames for the largest entry fit under it).
    tightest = frame_bytes_needed(body_limit(DEFAULT_MAX_VALUE_BYTES))
    cluster = LocalCluster(tmp_path / "c", extra_args=["--max-raft-frame-bytes", str(tightest)])
    with running(cluster):
        leader = cluster.leader()
        secret = secret_of(cluster)
        before = terms_and_role_changes(cluster)
        rss_before = rss_mib(pid_of(leader))
        traffic = Traffic(leader)
        traffic.start()
        pushed: list[int] = []
        try:
            for _ in range(3):
                # A stranger (no secret): the limit before authentication applies.
                with socket.create_connection(("127.0.0.1", leader.raft_port), 10) as sock:
                    sock.sendall(LENGTH.pack(LARGEST_LENGTH))
                    pushed.append(push_until_closed(sock, 256 << 20))
                    assert closed_by_peer(sock, 20), "the node kept reading a 2 GiB frame"
                # A peer holding the secret: --max-raft-frame-bytes applies.
                with authenticate(leader.raft_port, secret) as sock:
                    sock.sendall(LENGTH.pack(LARGEST_LENGTH))
                    pushed.append(push_until_closed(sock, 256 << 20))
                    assert closed_by_peer(sock, 20), "the node kept reading a 2 GiB frame"
            rss_after = rss_mib(pid_of(leader))
            wait_until(lambda: traffic.served >= 20 or traffic.failures, 60, "writes and reads")
        finally:
            traffic.stop()
        after = terms_and_role_changes(cluster)

        print(
            f"\nleader RSS {rss_before:.0f} MiB before, {rss_after:.0f} MiB after six 2 GiB "
            f"announcements (bytes sent before each close: {pushed}); "
            f"{traffic.served} PUT+GET served meanwhile"
        )
        assert traffic.failures == [], traffic.failures[:5]
        assert traffic.served > 0
        assert cluster.leader() is leader
        assert after == before, (before, after)  # no election, no role change anywhere
        log = log_of(leader)
        assert f"announced a frame of {LARGEST_LENGTH} bytes, above the limit before " in log
        assert f"announced a frame of {LARGEST_LENGTH} bytes, above --max-raft-frame-bytes" in log


# -- 2. connections that never authenticate -----------------------------------------------


class IdleFlood(threading.Thread):
    """Keeps ``keep`` idle connections open to a port, opening a new one for each the
    node closes, until stopped."""

    def __init__(self, port: int, keep: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.keep = keep
        self.done = threading.Event()
        self.opened = 0
        self.closed_by_node = 0

    def run(self) -> None:
        open_: list[socket.socket] = []
        try:
            while not self.done.is_set():
                while len(open_) < self.keep and not self.done.is_set():
                    with contextlib.suppress(OSError):
                        open_.append(socket.create_connection(("127.0.0.1", self.port), 2))
                        self.opened += 1
                    self.done.wait(0.005)  # a flood, but not of the machine's ports
                readable, _, _ = select.select(open_, [], [], 0.05)
                for sock in readable:
                    with contextlib.suppress(OSError):
                        if sock.recv(1):
                            continue
                    self.closed_by_node += 1
                    open_.remove(sock)
                    sock.close()
        finally:
            for sock in open_:
                sock.close()

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=30)


def test_idle_unauthenticated_connections_are_closed_and_keep_no_member_out(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(
        tmp_path / "c",
        extra_args=[
            "--raft-handshake-timeout", str(HANDSHAKE_TIMEOUT),
            "--max-raft-handshakes", str(MAX_HANDSHAKES),
        ],
    )  # fmt: skip
    with running(cluster):
        target, *_, dialer = by_raft_address(cluster)  # dialer dials target
        rss_before = rss_mib(pid_of(target))
        # As many idle connections as may wait at once: each is closed at its deadline.
        idle = [
            socket.create_connection(("127.0.0.1", target.raft_port), timeout=10)
            for _ in range(MAX_HANDSHAKES)
        ]
        try:
            still_open = [s for s in idle if not closed_by_peer(s, HANDSHAKE_TIMEOUT + 15)]
        finally:
            for sock in idle:
                sock.close()
        assert still_open == [], f"{len(still_open)} idle connections were never closed"
        assert f"did not complete the handshake within {HANDSHAKE_TIMEOUT:g} s" in log_of(target)

        # More than that, all the time: the oldest are closed, and a member reconnecting
        # meanwhile gets in.
        flood = IdleFlood(target.raft_port, keep=3 * MAX_HANDSHAKES)
        flood.start()
        try:
            restart_and_wait_connected(cluster, dialer, target)
            rss_during = rss_mib(pid_of(target))
        finally:
            flood.stop()
        rss_after = rss_mib(pid_of(target))
        print(
            f"\n{target.node_id} RSS {rss_before:.0f} MiB before, {rss_during:.0f} MiB "
            f"during a flood of idle connections ({flood.opened} opened, "
            f"{flood.closed_by_node} closed by the node meanwhile), {rss_after:.0f} MiB after"
        )
        assert flood.closed_by_node >= flood.opened - 3 * MAX_HANDSHAKES > 0
        assert f"more than {MAX_HANDSHAKES} raft connections in their handshake" in log_of(target)
        cluster.wait_ready(timeout=30)


# -- 3. out of file descriptors ---------------------------------------------------------


def connect_quietly(port: int) -> socket.socket:
    sock = socket.socket()
    sock.settimeout(2)
    with contextlib.suppress(OSError):
        sock.connect(("127.0.0.1", port))
    return sock


def refuses_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return False


def test_the_raft_port_survives_running_out_of_file_descriptors(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "c")
    with running(cluster):
        target, *_, dialer = by_raft_address(cluster)
        pid = pid_of(target)
        rss_before = rss_mib(pid)
        soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        flood: list[socket.socket] = []
        try:
            # A few descriptors to spare, then more connections than that.
            limit = open_fds(pid) + 4
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, hard))
            for _ in range(40):
                flood.append(connect_quietly(target.raft_port))
            wait_until(lambda: open_fds(pid) >= limit - 1, 20, "the node to use its descriptors")
            # With connections still waiting, its accept() fails with EMFILE. The old
            # transport then closed its listening socket for good.
            wait_until(
                lambda: (
                    "cannot accept a connection" in log_of(target)
                    or refuses_connections(target.raft_port)
                ),
                20,
                "the node to meet EMFILE in accept()",
            )
        finally:
            for sock in flood:
                sock.close()
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
        rss_after = rss_mib(pid)
        print(f"\n{target.node_id} RSS {rss_before:.0f} MiB before, {rss_after:.0f} MiB after")

        # The raft port still answers a handshake...
        def answers() -> bool:
            try:
                authenticate(target.raft_port, secret_of(cluster), timeout=5).close()
            except OSError:
                return False
            return True

        wait_until(answers, 20, f"{target.node_id}'s raft port to answer a handshake again")
        assert "the raft port" in log_of(target) and "cannot accept a connection" in log_of(target)
        # ... and a member that has to dial it connects again, and the cluster serves.
        restart_and_wait_connected(cluster, dialer, target)
        cluster.wait_ready(timeout=30)
        leader = cluster.leader()
        assert http("PUT", f"{leader.url}/v1/kv/after-emfile", b"yes").status == 200
        for node in cluster.nodes:
            got = http("GET", f"{node.url}/v1/kv/after-emfile")
            assert (got.status, got.body) == (200, b"yes"), node.node_id


# -- 4. a wrong secret ------------------------------------------------------------------


def has_line(node: NodeProcess, *parts: str) -> bool:
    return any(all(p in line for p in parts) for line in log_of(node).splitlines())


def test_a_wrong_cluster_secret_is_logged_on_both_sides_and_throttled(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "c")
    stranger = cluster.nodes[2]
    other_secret = tmp_path / "other.secret"
    other_secret.write_text("another-secret-" + os.urandom(16).hex())
    i = stranger.args.index("--secret-file")
    stranger.args[i + 1] = str(other_secret)
    try:
        for n in range(3):
            cluster.start_node(n)
        members = [cluster.nodes[0], cluster.nodes[1]]
        cluster.wait_ready(nodes=members)
        for member in members:
            dialing, accepting = sorted([member, stranger], key=lambda n: n.raft_address)[::-1]
            refused = "failed authentication: wrong cluster secret?"
            wait_until(
                functools.partial(has_line, accepting, "raft connection from 127.0.0.1:", refused),
                30,
                f"{accepting.node_id} to log the failed authentication",
            )
            to_it = f"raft connection to {accepting.raft_address} failed authentication"
            wait_until(
                functools.partial(has_line, dialing, to_it),
                30,
                f"{dialing.node_id} to log that {accepting.node_id} refused it",
            )

        # A flood of failed handshakes makes few lines.
        target = members[0]
        lines_before = log_of(target).count("failed authentication")
        attempts = 200
        for _ in range(attempts):
            with socket.create_connection(("127.0.0.1", target.raft_port), timeout=10) as sock:
                sock.sendall(LENGTH.pack(100) + os.urandom(100))
                closed_by_peer(sock, 10)
        lines = log_of(target).count("failed authentication") - lines_before
        print(f"\n{attempts} failed handshakes made {lines} log lines on {target.node_id}")
        assert lines < attempts / 10
        status = members[0].status()
        assert status is not None and status["leader"] is not None
        assert http("PUT", f"{status['leader']['url']}/v1/kv/k", b"v").status == 200
    finally:
        cluster.stop()
