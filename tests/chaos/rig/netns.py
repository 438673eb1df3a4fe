"""Network faults with real packets: every node in its own network namespace, iptables
rules inside the namespaces (root only).

Topology (one per cluster, created by ``NamespacedCluster`` and removed by its ``stop()``)
------------------------------------------------------------------------------------------
::

    host netns                 hub netns "rkvt-<pid>-<token>-hub"      node netns "...-n<i>"
    rkvt<token> 10.A.B.254/24 == host --+
                                         br0 (bridge)
                                    n<i> -+ ============================ eth0 10.A.B.<i+1>/24

- each node runs in namespace ``rkvt-<pid>-<token>-n<i>`` (``ip netns exec``, which
  execs the command, so the process's PID is the node's) and binds HTTP and raft on
  its own address (``10.A.B.<i+1>``, ports 8000 and 9000: every node has its own IP);
- the bridge lives in a hub namespace of its own, so the host's firewall (a FORWARD
  policy of DROP, br_netfilter) never sees the nodes' traffic;
- the host keeps one veth end (``rkvt<token>``, address ``10.A.B.254``): the test
  process reaches every node's HTTP port through it, over an ordinary connected route.
  The /24 is picked at random from 10.200.0.0-10.254.255.0 among those overlapping no
  route or address of the host, under a file lock, so parallel runs do not collide.

Names carry the owner's PID (namespaces) or an alias ``rkvt-owner=<pid>`` (the host's
veth end), so ``cleanup_leftovers()`` removes what a crashed run left behind, and only
that: the prefix must match *and* the owner must be gone.

Faults (``NetnsNetwork``)
-------------------------
``drop(a, b)`` puts ``-A INPUT -s <a's ip> -j DROP`` into ``b``'s namespace; a
partition is drops both ways between groups. A namespace's whole filter table is
rewritten at once with ``iptables-restore`` from the set of blocked links, so what the
kernel holds is always exactly ``blocked()``. Unlike the TCP proxy
(tests/chaos/rig/netfault.py) the rules act on packets, not on a byte stream: a one-way drop
also withholds the TCP acknowledgements of the other direction, so a TCP connection
across it stalls both ways (datagrams still flow the other way); established
connections are not reset, pysyncobj notices through its own time-outs.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import ipaddress
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tests.support.cluster import REPO, LocalCluster, NodeProcess
from tests.support.processes import pid_alive

PREFIX = "rkvt"
HTTP_PORT = 8000
RAFT_PORT = 9000
LOCK_FILE = Path("/run/lock/rkv-netns.lock")
HOST_SUFFIX = 254  # the host's address in each /24
COMMAND_TIMEOUT = 30.0

Mode = Literal["drop", "reject"]
MODES: tuple[Mode, ...] = ("drop", "reject")
Link = tuple[str, str]
"""A directed link: (from node id, to node id)."""
NodeRef = str | NodeProcess

# rkvt-<owner pid>-<token>-<role>: the namespaces; rkvt<token>: the host's veth end.
NAMESPACE_RE = re.compile(rf"^{PREFIX}-(\d+)-([0-9a-f]{{6}})-(hub|n\d+)$")
HOST_LINK_RE = re.compile(rf"^{PREFIX}([0-9a-f]{{6}})$")
OWNER_ALIAS_RE = re.compile(rf"^{PREFIX}-owner=(\d+)$")


class NetnsError(RuntimeError):
    """A command that sets up, changes or removes the namespaced network failed."""


def node_id(node: NodeRef) -> str:
    return node if isinstance(node, str) else node.node_id


def run(
    args: Sequence[str], *, input: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a command (no shell); NetnsError with its output when it fails and ``check``."""
    try:
        done = subprocess.run(
            list(args),
            input=input,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsError(f"{' '.join(args)}: {exc}") from exc
    if check and done.returncode != 0:
        raise NetnsError(
            f"{' '.join(args)} exited {done.returncode}: {(done.stderr or done.stdout).strip()}"
        )
    return done


# -- iptables and availability -------------------------------------------------------------

_iptables_lock = threading.Lock()
_iptables_choice: str | None = None


def _candidate_iptables() -> list[str]:
    """The iptables flavours installed, as paths (sbin searched even when not in PATH)."""
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    found = []
    for name in ("iptables", "iptables-nft", "iptables-legacy"):
        path = shutil.which(name, path=search)
        if path and shutil.which(f"{path}-restore"):
            found.append(path)
    return found


def _probe(iptables: str) -> str | None:
    """Create a namespace with a bridge and a veth pair, load and read back an iptables
    rule in it with ``iptables`` (and its ``-restore``), remove it all; the failure."""
    namespace = f"{PREFIX}-{os.getpid()}-{os.urandom(3).hex()}-hub"
    try:
        run(["ip", "netns", "add", namespace])
    except NetnsError as exc:
        return f"cannot create a network namespace: {exc}"
    try:
        in_ns = ["ip", "-n", namespace]
        run([*in_ns, "link", "add", "br0", "type", "bridge"])
        run([*in_ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1"])
        run([*in_ns, "link", "set", "v0", "master", "br0"])
        exec_ns = ["ip", "netns", "exec", namespace]
        run(
            [*exec_ns, f"{iptables}-restore", "-w"], input=_filter_table(["-s 10.0.0.1/32 -j DROP"])
        )
        listed = run([*exec_ns, iptables, "-w", "-S", "INPUT"]).stdout
        if "10.0.0.1" not in listed:
            return f"{iptables}: the probe rule was not listed back ({listed.strip()!r})"
    except NetnsError as exc:
        return str(exc)
    finally:
        with contextlib.suppress(NetnsError):
            run(["ip", "netns", "del", namespace])
    return None


def iptables_binary() -> str:
    """The iptables flavour that works here (``iptables``, else ``-nft``, else ``-legacy``);
    NetnsError with every flavour's failure when none does."""
    global _iptables_choice  # noqa: PLW0603 (probed once per process)
    with _iptables_lock:
        if _iptables_choice is not None:
            return _iptables_choice
        candidates = _candidate_iptables()
        if not candidates:
            raise NetnsError("iptables is not installed (make system-deps installs it)")
        failures = []
        for name in candidates:
            failure = _probe(name)
            if failure is None:
                _iptables_choice = name
                return name
            failures.append(failure)
        raise NetnsError("; ".join(failures))


def available() -> str | None:
    """None when namespaced clusters work here (root, ``ip``, a working iptables, network
    namespaces, bridges and veths creatable); otherwise why not."""
    if os.geteuid() != 0:
        return "network namespaces and iptables need root"
    if shutil.which("ip") is None:
        return "iproute2's ip is not in PATH"
    try:
        iptables_binary()
    except NetnsError as exc:
        return str(exc)
    return None


def _filter_table(input_rules: Iterable[str]) -> str:
    """An ``iptables-restore`` document replacing the whole filter table."""
    lines = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]"]
    lines += [f"-A INPUT {rule}" for rule in input_rules]
    return "\n".join([*lines, "COMMIT", ""])


# -- what exists -------------------------------------------------------------------------------


def namespaces() -> list[str]:
    """Every network namespace name (``ip netns list``)."""
    out = run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def host_links() -> list[dict[str, str]]:
    """The host's links: name and alias (``ip -j link``)."""
    links = json.loads(run(["ip", "-j", "link", "show"]).stdout or "[]")
    return [{"name": link["ifname"], "alias": link.get("ifalias", "")} for link in links]


def leftovers(token: str | None = None) -> list[str]:
    """Namespaces and host links of ours (of one run's ``token``, or of any run)."""
    found = []
    for name in namespaces():
        match = NAMESPACE_RE.match(name)
        if match and token in (None, match.group(2)):
            found.append(f"netns {name}")
    for link in host_links():
        match = HOST_LINK_RE.match(link["name"])
        if match and token in (None, match.group(1)):
            found.append(f"link {link['name']}")
    return found


def kill_namespace_processes(namespace: str) -> None:
    """SIGKILL whatever still runs inside ``namespace`` and wait (briefly) until it is gone."""
    deadline = time.monotonic() + 10
    while True:
        done = run(["ip", "netns", "pids", namespace], check=False)
        pids = [int(p) for p in done.stdout.split() if p.isdigit()]
        if done.returncode != 0 or not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def delete_namespace(namespace: str) -> None:
    kill_namespace_processes(namespace)
    run(["ip", "netns", "del", namespace])


def cleanup_leftovers() -> list[str]:
    """Remove the namespaces and host links of crashed runs: only names with our prefix
    whose owner PID no longer exists. Returns what was removed."""
    removed = []
    names = [(name, NAMESPACE_RE.match(name)) for name in namespaces()]
    # Node namespaces before hubs, so nothing is left attached to a bridge being removed.
    for name, match in sorted(names, key=lambda nm: nm[0].endswith("-hub")):
        if match and not pid_alive(int(match.group(1))):
            with contextlib.suppress(NetnsError):
                delete_namespace(name)
                removed.append(f"netns {name}")
    for link in host_links():
        owner = OWNER_ALIAS_RE.match(link["alias"])
        if HOST_LINK_RE.match(link["name"]) and owner and not pid_alive(int(owner.group(1))):
            with contextlib.suppress(NetnsError):
                run(["ip", "link", "del", link["name"]])
                removed.append(f"link {link['name']}")
    return removed


@contextlib.contextmanager
def _allocation_lock() -> Iterator[None]:
    """Serialises subnet choice and reservation between processes on this machine."""
    path = LOCK_FILE if LOCK_FILE.parent.is_dir() else Path("/tmp/rkv-netns.lock")
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _networks_in_use() -> list[ipaddress.IPv4Network]:
    used = []
    routes = json.loads(run(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout or "[]")
    for route in routes:
        dst = route.get("dst", "default")
        if dst != "default":
            with contextlib.suppress(ValueError):
                used.append(ipaddress.IPv4Network(dst, strict=False))
    for link in json.loads(run(["ip", "-j", "-4", "addr", "show"]).stdout or "[]"):
        for info in link.get("addr_info", []):
            with contextlib.suppress(KeyError, ValueError):
                used.append(
                    ipaddress.IPv4Network(f"{info['local']}/{info['prefixlen']}", strict=False)
                )
    return used


def _free_subnet(rng: random.Random) -> ipaddress.IPv4Network:
    used = _networks_in_use()
    for _ in range(500):
        candidate = ipaddress.IPv4Network(f"10.{rng.randint(200, 254)}.{rng.randint(0, 255)}.0/24")
        if not any(candidate.overlaps(net) for net in used):
            return candidate
    raise NetnsError("no free 10.x.y.0/24 for a namespaced cluster")


# -- the topology ------------------------------------------------------------------------------


class Topology:
    """The namespaces, bridge and veths of one cluster (see the module docstring).

    ``up()`` creates them (idempotent; after a ``down()`` it recreates the same names
    and addresses, if the subnet is still free); ``down()`` kills what still runs in
    them and removes everything, and reports what it could not remove."""

    def __init__(self, size: int, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()
        self.owner = os.getpid()
        self.token = f"{self.rng.getrandbits(24):06x}"
        self.size = size
        self.subnet: ipaddress.IPv4Network | None = None
        self.is_up = False

    @property
    def hub(self) -> str:
        return f"{PREFIX}-{self.owner}-{self.token}-hub"

    @property
    def host_link(self) -> str:
        return f"{PREFIX}{self.token}"

    def namespace(self, i: int) -> str:
        return f"{PREFIX}-{self.owner}-{self.token}-n{i}"

    def ip(self, i: int) -> str:
        if self.subnet is None:
            raise NetnsError("the topology has no subnet yet")
        return str(self.subnet.network_address + i + 1)

    @property
    def host_ip(self) -> str:
        if self.subnet is None:
            raise NetnsError("the topology has no subnet yet")
        return str(self.subnet.network_address + HOST_SUFFIX)

    def up(self) -> Topology:
        if self.is_up:
            return self
        self.is_up = True  # from here on down() has something to remove
        try:
            cleanup_leftovers()
            while self.subnet is None and leftovers(self.token):  # another run's token
                self.token = f"{self.rng.getrandbits(24):06x}"
            self._create()
        except BaseException:
            self.down()
            raise
        return self

    def _create(self) -> None:
        hub = ["ip", "-n", self.hub]
        run(["ip", "netns", "add", self.hub])
        run([*hub, "link", "set", "lo", "up"])
        run([*hub, "link", "add", "br0", "type", "bridge"])
        run([*hub, "link", "set", "br0", "up"])
        with _allocation_lock():
            if self.subnet is None:
                self.subnet = _free_subnet(self.rng)
            elif any(self.subnet.overlaps(net) for net in _networks_in_use()):
                raise NetnsError(f"{self.subnet} is taken since this cluster last ran")
            # Both ends at once, the peer straight into the hub: no half-made pair.
            peer = ["peer", "name", "host", "netns", self.hub]
            run(["ip", "link", "add", self.host_link, "type", "veth", *peer])
            run(["ip", "link", "set", self.host_link, "alias", f"{PREFIX}-owner={self.owner}"])
            run(["ip", "addr", "add", f"{self.host_ip}/24", "dev", self.host_link])
            run(["ip", "link", "set", self.host_link, "up"])
        run([*hub, "link", "set", "host", "master", "br0", "up"])
        for i in range(self.size):
            self.add_node(i)

    def add_node(self, i: int) -> None:
        namespace = self.namespace(i)
        in_ns = ["ip", "-n", namespace]
        run(["ip", "netns", "add", namespace])
        peer = ["peer", "name", "eth0", "netns", namespace]
        run(["ip", "-n", self.hub, "link", "add", f"n{i}", "type", "veth", *peer])
        run(["ip", "-n", self.hub, "link", "set", f"n{i}", "master", "br0", "up"])
        run([*in_ns, "link", "set", "lo", "up"])
        run([*in_ns, "addr", "add", f"{self.ip(i)}/24", "dev", "eth0"])
        run([*in_ns, "link", "set", "eth0", "up"])

    def down(self) -> list[str]:
        """Remove everything of this topology; what is still there afterwards."""
        if not self.is_up:
            return []
        ours = []
        for name in namespaces():
            match = NAMESPACE_RE.match(name)
            if match and (int(match.group(1)), match.group(2)) == (self.owner, self.token):
                ours.append(name)
        for name in sorted(ours, key=lambda name: name == self.hub):
            with contextlib.suppress(NetnsError):
                delete_namespace(name)
        # The host's end goes with its peer in the hub; remove it should it linger.
        if any(link["name"] == self.host_link for link in host_links()):
            with contextlib.suppress(NetnsError):
                run(["ip", "link", "del", self.host_link])
        self.is_up = False
        return leftovers(self.token)


# -- faults ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    namespace: str
    ip: str


class NetnsNetwork:
    """Partitions and one-way drops between namespaced nodes, as iptables rules in the
    receivers' namespaces (the ``Network`` protocol of tests/chaos/rig/nemesis.py)."""

    def __init__(self, endpoints: Mapping[str, Endpoint], iptables: str | None = None) -> None:
        self.endpoints = dict(endpoints)
        self.iptables = iptables or iptables_binary()
        self._blocked: dict[Link, Mode] = {}
        self._lock = threading.Lock()

    def _check(self, name: str) -> str:
        if name not in self.endpoints:
            raise KeyError(f"unknown node {name!r}")
        return name

    def _rules_for(self, receiver: str) -> list[str]:
        rules = []
        for (sender, to), mode in sorted(self._blocked.items()):
            if to != receiver:
                continue
            source = f"-s {self.endpoints[sender].ip}/32"
            if mode == "drop":
                rules.append(f"{source} -j DROP")
            else:
                rules.append(f"{source} -p tcp -j REJECT --reject-with tcp-reset")
                rules.append(f"{source} -j REJECT --reject-with icmp-port-unreachable")
        return rules

    def _apply(self, changes: Mapping[Link, Mode | None], exclusive: bool = False) -> None:
        for mode in changes.values():
            if mode is not None and mode not in MODES:
                raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        with self._lock:
            before = dict(self._blocked)
            if exclusive:
                self._blocked.clear()
            for link, mode in changes.items():
                if mode is None:
                    self._blocked.pop(link, None)
                else:
                    self._blocked[link] = mode
            receivers = {link[1] for link, _ in before.items() ^ self._blocked.items()}
            for receiver in sorted(receivers):
                self._load(receiver)

    def _load(self, receiver: str) -> None:
        namespace = self.endpoints[receiver].namespace
        run(
            ["ip", "netns", "exec", namespace, f"{self.iptables}-restore", "-w"],
            input=_filter_table(self._rules_for(receiver)),
        )

    def partition(self, groups: Iterable[Iterable[NodeRef]], mode: Mode = "drop") -> None:
        """Block every link between different groups, both ways, and unblock those within
        a group (earlier drops are replaced). Nodes named in no group form one more group."""
        group_of: dict[str, int] = {}
        count = 0
        for count, group in enumerate(groups, start=1):
            for member in group:
                name = self._check(node_id(member))
                if name in group_of:
                    raise ValueError(f"{name} is in two groups")
                group_of[name] = count
        for name in self.endpoints:
            group_of.setdefault(name, count + 1)
        self._apply(
            {
                (a, b): mode
                for a in self.endpoints
                for b in self.endpoints
                if a != b and group_of[a] != group_of[b]
            },
            exclusive=True,
        )

    def isolate(self, node: NodeRef, mode: Mode = "drop") -> None:
        """Cut ``node`` from every other node (the others stay connected)."""
        self.partition([[node]], mode)

    def drop(self, a: NodeRef, b: NodeRef, mode: Mode = "drop") -> None:
        """Drop (or reject) the packets ``a`` sends ``b``, one direction; other links stay."""
        link = (self._check(node_id(a)), self._check(node_id(b)))
        if link[0] == link[1]:
            raise ValueError(f"{link[0]} cannot be cut from itself")
        self._apply({link: mode})

    def restore(self, a: NodeRef, b: NodeRef) -> None:
        """Unblock ``a -> b``."""
        self._apply({(self._check(node_id(a)), self._check(node_id(b))): None})

    def heal(self) -> None:
        """Unblock every link: every node's filter table emptied."""
        with self._lock:
            self._blocked.clear()
            for receiver in sorted(self.endpoints):
                self._load(receiver)

    def blocked(self) -> dict[Link, Mode]:
        with self._lock:
            return dict(self._blocked)

    def rules(self) -> dict[str, list[str]]:
        """The INPUT rules each node's namespace holds now, as the kernel lists them."""
        listed = {}
        for name, endpoint in sorted(self.endpoints.items()):
            out = run(
                ["ip", "netns", "exec", endpoint.namespace, self.iptables, "-w", "-S", "INPUT"]
            ).stdout
            listed[name] = [line for line in out.splitlines() if line.startswith("-A ")]
        return listed


# -- a LocalCluster in namespaces --------------------------------------------------------------


@dataclass
class NamespacedNode(NodeProcess):
    ip: str = ""
    namespace: str = ""

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{self.http_port}"

    @property
    def raft_address(self) -> str:
        return f"{self.ip}:{self.raft_port}"


def _tcp_table(pid: int) -> list[tuple[str, int, str, int, str]]:
    """(local ip, port, remote ip, port, state hex) of the IPv4 TCP sockets in the network
    namespace of process ``pid`` (its /proc/PID/net/tcp)."""
    try:
        lines = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return []

    def address(text: str) -> tuple[str, int]:
        host, port = text.split(":")
        return socket.inet_ntoa(struct.pack("<I", int(host, 16))), int(port, 16)

    table = []
    for line in lines:
        fields = line.split()
        local, remote = address(fields[1]), address(fields[2])
        table.append((*local, *remote, fields[3]))
    return table


class NamespacedCluster(LocalCluster):
    """``LocalCluster`` (same API: start, stop, leader, kill, pause, resume, restart,
    start_node, live, wait_ready...) whose nodes each run in their own network namespace
    on their own address, joined by a bridge; ``self.net`` cuts links with iptables.

    The namespaces exist from construction until ``stop()`` (also usable as a context
    manager; an atexit hook removes them should neither run). ``start_node`` after a
    ``stop()`` recreates them with the same addresses. Root only: see ``available()``."""

    topology: Topology
    _net: NetnsNetwork
    _ns_nodes: list[NamespacedNode]

    def __post_init__(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.secret_file = self.base_dir / "cluster.secret"
        self.secret_file.write_text("test-secret-" + os.urandom(16).hex())
        iptables = iptables_binary()
        self.topology = Topology(self.size)
        atexit.register(self._teardown)
        try:
            self.topology.up()
            self._ns_nodes = []
            for i in range(self.size):
                data_dir = self.base_dir / f"n{i}"
                node = NamespacedNode(
                    f"n{i}", HTTP_PORT, RAFT_PORT, data_dir, [], data_dir / "node.log",
                    ip=self.topology.ip(i), namespace=self.topology.namespace(i),
                )  # fmt: skip
                self._ns_nodes.append(node)
                self.nodes.append(node)
            for node in self._ns_nodes:
                node.args = self._args(node)
            self._net = NetnsNetwork(
                {n.node_id: Endpoint(n.namespace, n.ip) for n in self._ns_nodes}, iptables
            )
        except BaseException:
            self._teardown()
            raise

    @property
    def net(self) -> NetnsNetwork:
        return self._net

    @property
    def host_ip(self) -> str:
        """The test process's address on the cluster's bridge."""
        return self.topology.host_ip

    def _args(self, node: NodeProcess) -> list[str]:
        args = super()._args(node)
        listen = args.index("--listen")
        args[listen + 1] = f"{node.url.removeprefix('http://')}"
        # A private test network: plain HTTP without auth beyond loopback, on purpose.
        return [*args, "--insecure-no-auth"]

    def start_node(self, i: int) -> None:
        node = self._ns_nodes[i]
        if not self.topology.is_up:
            self.topology.up()
            atexit.register(self._teardown)
        node.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(node.log_path, "ab")  # noqa: SIM115 (the child keeps it)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        command = [sys.executable, "-m", "node.cli", "node", *node.args]
        # ip netns exec execs the command: the PID is the node's own.
        node.proc = subprocess.Popen(
            ["ip", "netns", "exec", node.namespace, *command],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        log.close()

    def start(self, timeout: float = 30.0) -> NamespacedCluster:
        """Start every node; wait until they are ready and every pair has its raft
        connection (pysyncobj retries a failed connect only every 5 s)."""
        super().start(timeout)
        self.wait_connected(timeout)
        return self

    def raft_connected(self, a: NamespacedNode, b: NamespacedNode) -> bool:
        """Whether ``a``'s namespace holds an established raft connection to ``b``."""
        if a.proc is None:
            return False
        for local_ip, local_port, remote_ip, remote_port, state in _tcp_table(a.proc.pid):
            raft = RAFT_PORT in (local_port, remote_port)
            if raft and state == "01" and (local_ip, remote_ip) == (a.ip, b.ip):
                return True
        return False

    def wait_connected(
        self, timeout: float = 15.0, nodes: Sequence[NodeProcess] | None = None
    ) -> None:
        targets = [self.namespaced(n) for n in (self.live() if nodes is None else nodes)]
        pairs = [(a, b) for i, a in enumerate(targets) for b in targets[i + 1 :]]
        deadline = time.monotonic() + timeout
        while True:
            missing = [
                (a.node_id, b.node_id)
                for a, b in pairs
                if not (self.raft_connected(a, b) and self.raft_connected(b, a))
            ]
            if not missing:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"raft pairs not connected after {timeout}s: {missing}")
            time.sleep(0.05)

    @property
    def namespaced_nodes(self) -> list[NamespacedNode]:
        """``nodes``, typed: each with its ``ip`` and ``namespace``."""
        return list(self._ns_nodes)

    def namespaced(self, node: NodeProcess) -> NamespacedNode:
        return self._ns_nodes[self.nodes.index(node)]

    def stop(self) -> None:
        """Stop the nodes by PID, then remove the rules, namespaces, bridge and veths;
        NetnsError if any of them is left."""
        try:
            super().stop()
        finally:
            left = self._teardown()
        if left:
            raise NetnsError(f"left behind after stop(): {left}")

    def _teardown(self) -> list[str]:
        atexit.unregister(self._teardown)
        topology: Topology | None = getattr(self, "topology", None)
        if topology is None or not topology.is_up:
            return []
        net: NetnsNetwork | None = getattr(self, "_net", None)
        if net is not None:
            with contextlib.suppress(NetnsError):
                net.heal()
        return topology.down()

    def __enter__(self) -> NamespacedCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add_node(self, node_id: str, join_url: str) -> NodeProcess:
        raise NotImplementedError("NamespacedCluster has a fixed set of nodes")
