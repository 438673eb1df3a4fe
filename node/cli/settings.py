"""Node configuration: flags and RKV_* environment variables, parsed once.

Composition root: this is the only module that reads ``os.environ``. Every
value is validated here; a bad one is a :class:`ConfigError` naming the flag
and the variable, which the CLI prints before exiting with status 2.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from http_api.request_size import body_limit
from http_api.tls import DEFAULT_HANDSHAKE_TIMEOUT as DEFAULT_TLS_HANDSHAKE_TIMEOUT
from node.audit.retention import DEFAULT_KEEP, DEFAULT_KEEP_AGE_SECONDS
from node.cli.diagnostic_settings import (
    DiagnosticSettings,
    add_diagnostic_arguments,
    diagnostic_settings,
)
from node.cli.lease_settings import add_lease_arguments, lease_limits
from node.cli.load_settings import add_load_arguments, load_limits
from node.cli.secure_start import StartSecurity, add_security_arguments, start_security
from node.cli.space_settings import SpaceSettings, add_space_arguments, space_settings
from node.cli.tls_settings import NodeTls, add_tls_arguments, node_tls
from node.cli.worker_settings import add_worker_arguments, http_workers
from node.errors import ConfigError
from node.keyspace import DEFAULT_MAX_VALUE_BYTES, MAX_KEY_BYTES, member_id_problem
from node.service.leases import LeaseLimits
from node.service.load_limits import LoadLimits
from node.service.login_limits import DEFAULT_PER_ADDRESS, DEFAULT_PER_USER
from node.state.auth_records import (
    DEFAULT_MAX_ROLE_PERMISSIONS,
    DEFAULT_MAX_ROLES,
    DEFAULT_MAX_USERS,
)
from node.state.commands import MAX_TXN_OPS
from node.state.producers import DEFAULT_EXPIRY_MS, DEFAULT_MAX_PRODUCERS, DEFAULT_SWEEP_SLICE
from node.storage.compaction import CompactionPolicy
from node.storage.compactor import CompactionTriggers
from node.storage.config import DEFAULT_RESULTS_CACHE_BYTES, FsyncPolicy, StorageConfig
from raft.config import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_HANDSHAKES,
    Member,
    RaftConfig,
    TransportLimits,
    frame_bytes_needed,
)

ENV_PREFIX = "RKV_"
DEFAULT_WATCH_KEEPALIVE = 10.0  # seconds; kept here so `rkv get` need not import the service
DEFAULT_HTTP_IDLE_TIMEOUT = 60.0  # seconds an idle keep-alive connection stays open
DEFAULT_MAX_PAGE_BYTES = 4 * 1024 * 1024  # a scan page's keys and values (the first always comes)
# etcd's range (128): the Redis replicator sizes its transactions to it (GET /v1/status);
# raise it, up to the state machine's MAX_TXN_OPS, for Redis commands writing more keys.
DEFAULT_MAX_TXN_OPS = 1024
DEFAULT_MAX_TXN_RESULT_BYTES = 8 * 1024 * 1024  # keys and values a txn's gets may return
DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_MAX_CONNECTIONS_PER_ADDRESS = 256
DEFAULT_HTTP_READ_TIMEOUT = 30.0  # seconds a request's head, then its body, may take to arrive
DEFAULT_MAX_WATCHES = 512
DEFAULT_MAX_BODY_BYTES_IN_FLIGHT = 256 * 1024 * 1024  # request bodies being served at once
DEFAULT_MAX_WATCHES_PER_ADDRESS = 128
# How busy clients must keep the event loop before an address over its share waits.
DEFAULT_FAIR_SHARE_BUSY = 0.2
AUDIT_DIR = "audit"  # the default --audit-dir, under the data directory
DEFAULT_TRANSFER_RATE = 64 * 1024 * 1024
DEFAULT_TRANSFER_IDLE_TIMEOUT = 30.0
# node/service/auth_tokens.py's DEFAULT_TOKEN_TTL, kept here so the CLI need not load it
DEFAULT_TOKEN_TTL = 600.0


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """Bounds of authentication (docs/OPERATIONS.md, Security)."""

    token_ttl: float = DEFAULT_TOKEN_TTL
    max_users: int = DEFAULT_MAX_USERS
    max_roles: int = DEFAULT_MAX_ROLES
    max_role_permissions: int = DEFAULT_MAX_ROLE_PERMISSIONS
    max_failed_logins: int = DEFAULT_PER_USER
    max_failed_logins_per_address: int = DEFAULT_PER_ADDRESS


@dataclass(frozen=True, slots=True)
class NodeConfig:
    node_id: str
    data_dir: Path
    http_host: str
    http_port: int
    raft_address: str
    advertise_url: str
    peers: tuple[Member, ...]
    secret: bytes | None = field(repr=False)  # never in a log line or a traceback
    storage: StorageConfig
    raft: RaftConfig
    log_level: str
    compaction_policy: CompactionPolicy
    compaction_triggers: CompactionTriggers
    watch_keepalive: float = DEFAULT_WATCH_KEEPALIVE
    http_idle_timeout: float = DEFAULT_HTTP_IDLE_TIMEOUT
    http_read_timeout: float = DEFAULT_HTTP_READ_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_address: int = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS
    max_watches: int = DEFAULT_MAX_WATCHES
    max_body_bytes_in_flight: int = DEFAULT_MAX_BODY_BYTES_IN_FLIGHT
    max_watches_per_address: int = DEFAULT_MAX_WATCHES_PER_ADDRESS
    fair_share_busy: float = DEFAULT_FAIR_SHARE_BUSY
    http_workers: int = 0
    """HTTP worker processes serving key-value reads and writes (node/cli/worker_settings.py)."""
    max_txn_ops: int = DEFAULT_MAX_TXN_OPS
    max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES
    max_txn_result_bytes: int = DEFAULT_MAX_TXN_RESULT_BYTES
    transfer_rate_bytes: int = DEFAULT_TRANSFER_RATE
    transfer_idle_timeout: float = DEFAULT_TRANSFER_IDLE_TIMEOUT
    metrics: bool = True
    join_url: str | None = None
    producer_expiry_seconds: float = DEFAULT_EXPIRY_MS / 1000
    max_producers: int = DEFAULT_MAX_PRODUCERS
    producer_sweep_slice: int = DEFAULT_SWEEP_SLICE
    audit_dir: Path | None = None
    """Where this node writes consistency-audit exports; None: <data_dir>/audit."""
    audit_keep: int = DEFAULT_KEEP
    audit_keep_age_seconds: float = DEFAULT_KEEP_AGE_SECONDS
    tls: NodeTls = field(default_factory=NodeTls)
    """HTTPS on the port (``tls.server``) and what calls to members present."""
    auth: AuthSettings = field(default_factory=AuthSettings)
    security: StartSecurity = field(default_factory=StartSecurity)
    """--root-password-file, --insecure-no-auth (node/cli/secure_start.py)."""
    leases: LeaseLimits = field(default_factory=LeaseLimits)
    """--max-leases, --max-lease-ttl... (node/cli/lease_settings.py)."""
    diagnostics: DiagnosticSettings = field(default_factory=DiagnosticSettings)
    """--log-format, --ready-min-free-bytes (node/cli/diagnostic_settings.py)."""
    load: LoadLimits = field(default_factory=LoadLimits)
    """--load-chunk-keys, --load-chunks-in-flight (node/cli/load_settings.py)."""
    space: SpaceSettings = field(default_factory=SpaceSettings)
    """--quota-bytes, --space-check-interval (node/cli/space_settings.py)."""

    @property
    def audit_path(self) -> Path:
        return self.data_dir / AUDIT_DIR if self.audit_dir is None else self.audit_dir


def add_node_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `rkv node`; each also reads RKV_<NAME> (flags win)."""
    add = parser.add_argument
    add("--id", dest="node_id", help="this node's id (RKV_ID)")
    add("--data-dir", help="where the commit log, LMDB and raft journal live (RKV_DATA_DIR)")
    add("--listen", help="HTTP address HOST:PORT (RKV_LISTEN), default 127.0.0.1:8001")
    add("--raft-listen", help="raft address HOST:PORT, bound as given (RKV_RAFT_LISTEN)")
    add("--advertise-url", help="the HTTP URL others use for this node (RKV_ADVERTISE_URL)")
    add(
        "--peer",
        action="append",
        dest="peers",
        metavar="ID,RAFT_HOST:PORT,HTTP_URL",
        help="another member; repeat per member (RKV_PEERS: entries separated by ';')",
    )
    add(
        "--join",
        metavar="URL",
        help="join the running cluster a node at URL belongs to: take its members as "
        "peers, rebuild through raft and add this node as a member (RKV_JOIN)",
    )
    add("--secret-file", help="file holding the cluster secret (RKV_SECRET_FILE)")
    add_tls_arguments(parser)
    add_lease_arguments(parser)
    add_load_arguments(parser)
    add_diagnostic_arguments(parser)
    add_space_arguments(parser)
    add_security_arguments(parser)
    add(
        "--insecure-dev-mode",
        action="store_true",
        default=None,
        help="run the raft port without a secret: anyone who reaches it can run code "
        "(RKV_INSECURE_DEV_MODE=1)",
    )
    add("--max-value-bytes", help=f"value limit (RKV_MAX_VALUE_BYTES, {DEFAULT_MAX_VALUE_BYTES})")
    add("--segment-bytes", help="commit-log segment size (RKV_SEGMENT_BYTES, 64 MiB)")
    add(
        "--results-cache-bytes",
        help="bytes of applied entries' results kept for raft's redeliveries "
        f"(RKV_RESULTS_CACHE_BYTES, {DEFAULT_RESULTS_CACHE_BYTES // 2**20} MiB)",
    )
    add("--raft-compaction-entries", help="journal entries before a raft marker (5000)")
    add(
        "--raft-compaction-bytes",
        help="journal bytes before a raft marker (RKV_RAFT_COMPACTION_BYTES, 64 MiB)",
    )
    add("--proposal-timeout", help="seconds a write waits for raft (RKV_PROPOSAL_TIMEOUT, 5)")
    add(
        "--read-index",
        help="on (default): linearizable reads are confirmed by a heartbeat round to a "
        "majority (Raft's ReadIndex), with no log entry; off: every round of them commits a "
        "barrier entry (RKV_READ_INDEX)",
    )
    add(
        "--max-entry-bytes",
        help="group commit puts no more than this many bytes of keys and values in one raft "
        "entry; a single larger write goes alone (RKV_MAX_ENTRY_BYTES, 4 MiB)",
    )
    add(
        "--max-raft-frame-bytes",
        help="a raft peer announcing a larger message is disconnected before it is read; "
        "at least twice the largest entry (RKV_MAX_RAFT_FRAME_BYTES, "
        f"{DEFAULT_MAX_FRAME_BYTES // 2**20} MiB, more if the entry and value limits need it)",
    )
    add(
        "--raft-handshake-timeout",
        help="seconds a raft connection has to authenticate with the cluster secret before "
        f"it is closed (RKV_RAFT_HANDSHAKE_TIMEOUT, {DEFAULT_HANDSHAKE_TIMEOUT:g})",
    )
    add(
        "--max-raft-handshakes",
        help="accepted raft connections still authenticating at once; a new one past it "
        f"closes the oldest (RKV_MAX_RAFT_HANDSHAKES, {DEFAULT_MAX_HANDSHAKES})",
    )
    add("--tombstone-retention", help="seconds deletes stay in a compacted log (86400)")
    add("--compaction-interval", help="seconds between compaction checks (300)")
    add(
        "--compaction-min-bytes",
        help="compact once this many bytes of segments closed since the last run (64 MiB)",
    )
    add(
        "--compaction-min-dirty-ratio",
        help="a background compaction rewrites a closed segment only if a sample says at "
        "least this share of it would be dropped, 0 to 1 (RKV_COMPACTION_MIN_DIRTY_RATIO, 0.5)",
    )
    add(
        "--producer-expiry",
        help="seconds an idempotent producer may stay idle before its state is dropped "
        "(RKV_PRODUCER_EXPIRY, 604800 = 7 days)",
    )
    add(
        "--max-producers",
        help="most idempotent producers the cluster holds; POST /v1/producers past it "
        f"answers 429 too_many_producers (RKV_MAX_PRODUCERS, {DEFAULT_MAX_PRODUCERS})",
    )
    add(
        "--producer-sweep-slice",
        help="most producers one raft entry of the expiry sweep looks at "
        f"(RKV_PRODUCER_SWEEP_SLICE, {DEFAULT_SWEEP_SLICE})",
    )
    add(
        "--audit-dir",
        help="where consistency-audit exports are written, <audit-dir>/<audit id>/<node id>/: "
        "a local directory or a shared volume (RKV_AUDIT_DIR, default <data-dir>/audit)",
    )
    add(
        "--audit-keep",
        help="how many of its newest consistency-audit exports a node keeps; older ones "
        f"are deleted (RKV_AUDIT_KEEP, {DEFAULT_KEEP})",
    )
    add(
        "--audit-keep-age",
        help="seconds after which an audit export is deleted even if among the newest; "
        f"0: no age limit (RKV_AUDIT_KEEP_AGE, {DEFAULT_KEEP_AGE_SECONDS:g} = 24 h)",
    )
    add(
        "--transfer-rate",
        help="bytes per second this node sends to a member catching up (a snapshot "
        "download or a log range); 0: unlimited (RKV_TRANSFER_RATE, 64 MiB)",
    )
    add(
        "--transfer-idle-timeout",
        help="seconds a catch-up download may receive nothing before it is abandoned and "
        "retried, and a streamed answer (snapshot, log, watch) may wait for a client that "
        "reads nothing before it is closed (RKV_TRANSFER_IDLE_TIMEOUT, 30)",
    )
    _add_http_arguments(parser)
    add(
        "--max-page-bytes",
        help="a scan page ends before its keys and values pass this many bytes; the first "
        "item always comes (RKV_MAX_PAGE_BYTES, 4 MiB)",
    )
    add(
        "--max-txn-ops",
        help="most compares and ops one POST /v1/txn may hold, 1 to "
        f"{MAX_TXN_OPS} (RKV_MAX_TXN_OPS, {DEFAULT_MAX_TXN_OPS}; one Redis command the "
        "replicator copies must fit in one transaction)",
    )
    add(
        "--max-txn-result-bytes",
        help="most bytes of keys and values the get ops of one txn may return; more: the txn "
        "writes nothing and answers 413 txn_result_too_large; at least --max-value-bytes "
        "+ 4 KiB (RKV_MAX_TXN_RESULT_BYTES, 8 MiB)",
    )
    _add_auth_arguments(parser)


def _add_auth_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--auth-token-ttl",
        help="seconds a token from POST /v1/auth/token stays valid (RKV_AUTH_TOKEN_TTL, "
        f"{DEFAULT_TOKEN_TTL:g})",
    )
    add(
        "--max-auth-users",
        help="most users the cluster holds; more: 429 too_many_users (RKV_MAX_AUTH_USERS, "
        f"{DEFAULT_MAX_USERS})",
    )
    add(
        "--max-auth-roles",
        help="most roles the cluster holds; more: 429 too_many_roles (RKV_MAX_AUTH_ROLES, "
        f"{DEFAULT_MAX_ROLES})",
    )
    add(
        "--max-role-permissions",
        help="most permissions one role holds; more: 413 too_many_role_permissions "
        f"(RKV_MAX_ROLE_PERMISSIONS, {DEFAULT_MAX_ROLE_PERMISSIONS})",
    )
    add(
        "--max-failed-logins",
        help="failed logins per minute for one user from one address before 429 "
        f"too_many_failed_logins (RKV_MAX_FAILED_LOGINS, {DEFAULT_PER_USER})",
    )
    add(
        "--max-failed-logins-per-address",
        help="failed logins per minute from one address, whatever the user, before 429 "
        f"too_many_failed_logins (RKV_MAX_FAILED_LOGINS_PER_ADDRESS, {DEFAULT_PER_ADDRESS})",
    )


def _add_http_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of the HTTP side: timeouts, connection and stream caps, metrics."""
    add = parser.add_argument
    add_worker_arguments(parser)
    add(
        "--watch-keepalive",
        help="seconds an idle /v1/watch stream waits before a keep-alive line "
        f"(RKV_WATCH_KEEPALIVE, {DEFAULT_WATCH_KEEPALIVE:g})",
    )
    add(
        "--http-idle-timeout",
        help="seconds an idle keep-alive HTTP connection stays open "
        f"(RKV_HTTP_IDLE_TIMEOUT, {DEFAULT_HTTP_IDLE_TIMEOUT:g})",
    )
    add(
        "--http-read-timeout",
        help="seconds a request's head may take to arrive once it started, and its body "
        f"likewise (RKV_HTTP_READ_TIMEOUT, {DEFAULT_HTTP_READ_TIMEOUT:g})",
    )
    add(
        "--metrics",
        choices=("on", "off"),
        help="serve Prometheus metrics at GET /metrics and keep them up to date; off "
        "removes the route and every update on the hot path (RKV_METRICS, on)",
    )
    add(
        "--fair-share-busy",
        help="the share of the event loop (0 to 1) clients must use over a second before "
        "a client address that used more than the others waits (its requests are served "
        f"later, not refused); 1 turns it off (RKV_FAIR_SHARE_BUSY, {DEFAULT_FAIR_SHARE_BUSY:g})",
    )
    add(
        "--max-connections",
        help="open HTTP connections this node holds; more are answered 503 "
        f"too_many_connections (RKV_MAX_CONNECTIONS, {DEFAULT_MAX_CONNECTIONS})",
    )
    add(
        "--max-connections-per-address",
        help="open HTTP connections from one client address; more are answered 429 "
        "(RKV_MAX_CONNECTIONS_PER_ADDRESS, "
        f"{DEFAULT_MAX_CONNECTIONS_PER_ADDRESS})",
    )
    add(
        "--max-body-bytes-in-flight",
        help="bytes of request bodies this node serves at once (a request waits for its "
        "share up to half --http-read-timeout, then 503 overloaded); at least the body "
        "limit "
        f"(RKV_MAX_BODY_BYTES_IN_FLIGHT, {DEFAULT_MAX_BODY_BYTES_IN_FLIGHT >> 20} MiB)",
    )
    add(
        "--max-watches",
        help="open /v1/watch streams and election observers on this node (RKV_MAX_WATCHES, "
        f"{DEFAULT_MAX_WATCHES})",
    )
    add(
        "--max-watches-per-address",
        help="open /v1/watch streams and election observers from one client address "
        "(RKV_MAX_WATCHES_PER_ADDRESS, "
        f"{DEFAULT_MAX_WATCHES_PER_ADDRESS})",
    )


def _value(args: argparse.Namespace, env: Mapping[str, str], name: str) -> str | None:
    flag = getattr(args, name, None)
    if flag is not None:
        return str(flag) if not isinstance(flag, list) else ";".join(flag)
    return env.get(ENV_PREFIX + name.upper())


def _on_off(value: str | None, flag: str, default: bool) -> bool:
    if value is None or value == "":
        return default
    if value not in ("on", "off"):
        raise ConfigError(f"{flag} must be on or off, not {value!r}")
    return value == "on"


def _required(value: str | None, flag: str, var: str) -> str:
    if not value:
        raise ConfigError(f"{flag} (or RKV_{var}) is required")
    return value


def _address(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{what} must be HOST:PORT, not {text!r}")
    return host, int(port)


def _positive_int(text: str | None, what: str, default: int) -> int:
    if text is None:
        return default
    if not text.isdigit() or int(text) <= 0:
        raise ConfigError(f"{what} must be a positive integer, not {text!r}")
    return int(text)


def _seconds(text: str | None, what: str, default: float, zero_allowed: bool) -> float:
    """A number of seconds; with ``zero_allowed``, 0 means no limit."""
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{what} must be a number of seconds, not {text!r}") from None
    if zero_allowed and not 0 <= value < float("inf"):
        raise ConfigError(f"{what} must be 0 (no limit) or positive, not {text!r}")
    if not zero_allowed and value <= 0:
        raise ConfigError(f"{what} must be positive, not {text!r}")
    return value


def _positive_float(text: str | None, what: str, default: float) -> float:
    return _seconds(text, what, default, zero_allowed=False)


def _seconds_or_zero(text: str | None, what: str, default: float) -> float:
    return _seconds(text, what, default, zero_allowed=True)


def _ratio(text: str | None, what: str, default: float) -> float:
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{what} must be a number from 0 to 1, not {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{what} must be from 0 to 1, not {text!r}")
    return value


def _tls_and_advertise_url(
    args: argparse.Namespace, env: Mapping[str, str], host: str, port: int
) -> tuple[NodeTls, str]:
    """The TLS flags (node/cli/tls_settings.py) and --advertise-url, else this node's
    --listen address, https:// with TLS on."""
    tls = node_tls(
        lambda name: _value(args, env, name),
        lambda text: _positive_float(
            text, "--tls-handshake-timeout", DEFAULT_TLS_HANDSHAKE_TIMEOUT
        ),
    )
    given = _value(args, env, "advertise_url")
    scheme = "https" if tls.server is not None else "http"
    if not given:
        return tls, f"{scheme}://{host}:{port}"
    if tls.server is not None and not given.startswith("https://"):
        raise ConfigError(
            f"--advertise-url must be an https:// URL when the port speaks TLS "
            f"(--tls-cert), not {given!r}: clients and members would send plain HTTP to it"
        )
    return tls, given.rstrip("/")


def parse_peer(text: str) -> Member:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3 or not all(parts):
        raise ConfigError(f"a peer is ID,RAFT_HOST:PORT,HTTP_URL, not {text!r}")
    node_id, raft_address, url = parts
    if problem := member_id_problem(node_id):
        raise ConfigError(problem)
    _address(raft_address, f"peer {node_id}'s raft address")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"peer {node_id}'s HTTP URL must start with http://, not {url!r}")
    return Member(node_id, raft_address, url.rstrip("/"))


def _secret(args: argparse.Namespace, env: Mapping[str, str]) -> bytes | None:
    insecure = bool(args.insecure_dev_mode) or env.get("RKV_INSECURE_DEV_MODE") == "1"
    path = _value(args, env, "secret_file")
    inline = env.get("RKV_CLUSTER_SECRET")
    if path:
        try:
            secret = Path(path).read_bytes().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the secret file {path}: {exc.strerror}") from None
    elif inline:
        secret = inline.encode()
    elif insecure:
        return None
    else:
        raise ConfigError(
            "a cluster secret is required: --secret-file F or RKV_CLUSTER_SECRET "
            "(or --insecure-dev-mode, which lets anyone who reaches the raft port run code)"
        )
    if len(secret) < 16:
        raise ConfigError("the cluster secret must be at least 16 bytes")
    return secret


def _transport_limits(
    args: argparse.Namespace, env: Mapping[str, str], max_entry_bytes: int, max_value_bytes: int
) -> TransportLimits:
    # The largest raft entry: a group-committed batch stops at --max-entry-bytes, but
    # a single write goes alone whatever its size, up to the HTTP body limit.
    needed = frame_bytes_needed(max(max_entry_bytes, body_limit(max_value_bytes)))
    max_frame = _positive_int(
        _value(args, env, "max_raft_frame_bytes"),
        "--max-raft-frame-bytes",
        max(DEFAULT_MAX_FRAME_BYTES, needed),
    )
    if max_frame < needed:
        raise ConfigError(
            f"--max-raft-frame-bytes must be at least {needed} (twice the largest raft entry "
            "that --max-entry-bytes and --max-value-bytes allow, plus 1 MiB and a batch), "
            f"not {max_frame}"
        )
    return TransportLimits(
        max_frame_bytes=max_frame,
        handshake_timeout=_positive_float(
            _value(args, env, "raft_handshake_timeout"),
            "--raft-handshake-timeout",
            DEFAULT_HANDSHAKE_TIMEOUT,
        ),
        max_handshakes=_positive_int(
            _value(args, env, "max_raft_handshakes"),
            "--max-raft-handshakes",
            DEFAULT_MAX_HANDSHAKES,
        ),
    )


def _max_entry_bytes(args: argparse.Namespace, env: Mapping[str, str], max_value: int) -> int:
    """--max-entry-bytes: what group commit puts in an entry, and the most keys and
    values one transaction may carry (it must fit in an entry)."""
    one_put = max_value + MAX_KEY_BYTES + 64  # a single write always fits in an entry
    max_entry_bytes = _positive_int(
        _value(args, env, "max_entry_bytes"), "--max-entry-bytes", max(4 * 2**20, one_put)
    )
    if max_entry_bytes < one_put:
        raise ConfigError(
            f"--max-entry-bytes must be at least --max-value-bytes + {MAX_KEY_BYTES + 64} "
            f"(one write of the largest key and value), not {max_entry_bytes}"
        )
    return max_entry_bytes


def _connection_caps(
    args: argparse.Namespace, env: Mapping[str, str], max_value_bytes: int
) -> list[int]:
    """--max-connections, -per-address, --max-watches, -per-address and
    --max-body-bytes-in-flight, in that order."""
    caps = [
        _positive_int(_value(args, env, name), "--" + name.replace("_", "-"), default)
        for name, default in (
            ("max_connections", DEFAULT_MAX_CONNECTIONS),
            ("max_connections_per_address", DEFAULT_MAX_CONNECTIONS_PER_ADDRESS),
            ("max_watches", DEFAULT_MAX_WATCHES),
            ("max_watches_per_address", DEFAULT_MAX_WATCHES_PER_ADDRESS),
            ("max_body_bytes_in_flight", DEFAULT_MAX_BODY_BYTES_IN_FLIGHT),
        )
    ]
    largest = body_limit(max_value_bytes)
    if caps[4] < largest:
        raise ConfigError(
            "--max-body-bytes-in-flight must be at least the largest request body, "
            f"{largest} (twice --max-value-bytes + 64 KiB, or 16 MiB), not {caps[4]}"
        )
    return caps


def node_config(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> NodeConfig:
    env = os.environ if env is None else env
    node_id = _required(_value(args, env, "node_id") or env.get("RKV_ID"), "--id", "ID")
    if problem := member_id_problem(node_id):
        raise ConfigError(f"--id: {problem}")
    data_dir = Path(_required(_value(args, env, "data_dir"), "--data-dir", "DATA_DIR"))
    http_host, http_port = _address(_value(args, env, "listen") or "127.0.0.1:8001", "--listen")
    raft_text = _required(_value(args, env, "raft_listen"), "--raft-listen", "RAFT_LISTEN")
    _address(raft_text, "--raft-listen")
    tls, advertise = _tls_and_advertise_url(args, env, http_host, http_port)
    peers_text = _value(args, env, "peers") or ""
    peers = tuple(parse_peer(p) for p in peers_text.split(";") if p.strip())
    join_url = (_value(args, env, "join") or "").rstrip("/") or None
    if join_url is not None and not join_url.startswith(("http://", "https://")):
        raise ConfigError(f"--join must be a node's http:// URL, not {join_url!r}")
    secret = _secret(args, env)
    max_value = _positive_int(
        _value(args, env, "max_value_bytes"), "--max-value-bytes", DEFAULT_MAX_VALUE_BYTES
    )
    storage = StorageConfig(
        segment_bytes=_positive_int(
            _value(args, env, "segment_bytes"), "--segment-bytes", 64 * 1024 * 1024
        ),
        # The raft layer fsyncs at its durability point (raft/consensus.py).
        fsync=FsyncPolicy.ON_SYNC,
        max_value_bytes=max_value,
        results_cache_bytes=_positive_int(
            _value(args, env, "results_cache_bytes"),
            "--results-cache-bytes",
            DEFAULT_RESULTS_CACHE_BYTES,
        ),
    )
    max_entry_bytes = _max_entry_bytes(args, env, max_value)
    me = Member(node_id, raft_text, advertise)
    raft = RaftConfig(
        self_member=me,
        peers=peers,
        journal_dir=str(data_dir / "raft"),
        secret=secret,
        compaction_min_entries=_positive_int(
            _value(args, env, "raft_compaction_entries"), "--raft-compaction-entries", 5000
        ),
        compaction_max_bytes=_positive_int(
            _value(args, env, "raft_compaction_bytes"), "--raft-compaction-bytes", 64 * 2**20
        ),
        proposal_timeout=_positive_float(
            _value(args, env, "proposal_timeout"), "--proposal-timeout", 5.0
        ),
        max_entry_bytes=max_entry_bytes,
        read_index=_on_off(_value(args, env, "read_index"), "--read-index", default=True),
        joining=join_url is not None,
        transport=_transport_limits(args, env, max_entry_bytes, max_value),
    )
    level = (_value(args, env, "log_level") or "INFO").upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(f"--log-level must be DEBUG, INFO, WARNING or ERROR, not {level!r}")
    retention = _positive_float(
        _value(args, env, "tombstone_retention"), "--tombstone-retention", 86400.0
    )
    policy = CompactionPolicy(tombstone_retention_ms=int(retention * 1000))
    triggers = CompactionTriggers(
        interval_seconds=_positive_float(
            _value(args, env, "compaction_interval"), "--compaction-interval", 300.0
        ),
        min_closed_bytes=_positive_int(
            _value(args, env, "compaction_min_bytes"), "--compaction-min-bytes", 64 * 1024 * 1024
        ),
        min_dirty_ratio=_ratio(
            _value(args, env, "compaction_min_dirty_ratio"), "--compaction-min-dirty-ratio", 0.5
        ),
    )
    watch_keepalive = _positive_float(
        _value(args, env, "watch_keepalive"), "--watch-keepalive", DEFAULT_WATCH_KEEPALIVE
    )
    producer_expiry = _positive_float(
        _value(args, env, "producer_expiry"), "--producer-expiry", DEFAULT_EXPIRY_MS / 1000
    )
    max_producers = _positive_int(
        _value(args, env, "max_producers"), "--max-producers", DEFAULT_MAX_PRODUCERS
    )
    producer_sweep_slice = _positive_int(
        _value(args, env, "producer_sweep_slice"), "--producer-sweep-slice", DEFAULT_SWEEP_SLICE
    )
    http_idle_timeout = _positive_float(
        _value(args, env, "http_idle_timeout"), "--http-idle-timeout", DEFAULT_HTTP_IDLE_TIMEOUT
    )
    max_txn_ops = _positive_int(
        _value(args, env, "max_txn_ops"), "--max-txn-ops", DEFAULT_MAX_TXN_OPS
    )
    http_read_timeout = _positive_float(
        _value(args, env, "http_read_timeout"), "--http-read-timeout", DEFAULT_HTTP_READ_TIMEOUT
    )
    connection_caps = _connection_caps(args, env, storage.max_value_bytes)
    max_page_bytes = _positive_int(
        _value(args, env, "max_page_bytes"), "--max-page-bytes", DEFAULT_MAX_PAGE_BYTES
    )
    one_get = storage.max_value_bytes + MAX_KEY_BYTES
    max_txn_result_bytes = _positive_int(
        _value(args, env, "max_txn_result_bytes"),
        "--max-txn-result-bytes",
        max(DEFAULT_MAX_TXN_RESULT_BYTES, one_get),  # grows with --max-value-bytes
    )
    if max_txn_result_bytes < one_get:
        raise ConfigError(
            f"--max-txn-result-bytes must be at least --max-value-bytes + {MAX_KEY_BYTES} "
            f"(one get of the largest key and value), not {max_txn_result_bytes}"
        )
    if max_txn_ops > MAX_TXN_OPS:
        raise ConfigError(f"--max-txn-ops must be at most {MAX_TXN_OPS}, not {max_txn_ops}")
    rate_text = _value(args, env, "transfer_rate")
    if rate_text is not None and not rate_text.isdigit():
        raise ConfigError(
            f"--transfer-rate must be a number of bytes per second, not {rate_text!r}"
        )
    transfer_rate = DEFAULT_TRANSFER_RATE if rate_text is None else int(rate_text)
    idle_timeout = _positive_float(
        _value(args, env, "transfer_idle_timeout"),
        "--transfer-idle-timeout",
        DEFAULT_TRANSFER_IDLE_TIMEOUT,
    )
    audit_keep = _positive_int(_value(args, env, "audit_keep"), "--audit-keep", DEFAULT_KEEP)
    audit_keep_age = _seconds_or_zero(
        _value(args, env, "audit_keep_age"), "--audit-keep-age", DEFAULT_KEEP_AGE_SECONDS
    )
    audit_text = _value(args, env, "audit_dir")
    audit_dir = data_dir / AUDIT_DIR if not audit_text else Path(audit_text)
    return NodeConfig(
        node_id,
        data_dir,
        http_host,
        http_port,
        raft_text,
        advertise,
        peers,
        secret,
        storage,
        raft,
        level,
        policy,
        triggers,
        watch_keepalive=watch_keepalive,
        http_idle_timeout=http_idle_timeout,
        http_read_timeout=http_read_timeout,
        max_connections=connection_caps[0],
        max_connections_per_address=connection_caps[1],
        max_watches=connection_caps[2],
        max_watches_per_address=connection_caps[3],
        max_body_bytes_in_flight=connection_caps[4],
        fair_share_busy=_ratio(
            _value(args, env, "fair_share_busy"), "--fair-share-busy", DEFAULT_FAIR_SHARE_BUSY
        ),
        http_workers=http_workers(_value(args, env, "http_workers")),
        max_txn_ops=max_txn_ops,
        max_page_bytes=max_page_bytes,
        max_txn_result_bytes=max_txn_result_bytes,
        join_url=join_url,
        producer_expiry_seconds=producer_expiry,
        max_producers=max_producers,
        producer_sweep_slice=producer_sweep_slice,
        audit_dir=audit_dir,
        audit_keep=audit_keep,
        audit_keep_age_seconds=audit_keep_age,
        transfer_rate_bytes=transfer_rate,
        transfer_idle_timeout=idle_timeout,
        metrics=_on_off(_value(args, env, "metrics"), "--metrics", default=True),
        tls=tls,
        auth=_auth_settings(args, env),
        leases=lease_limits(lambda name: _value(args, env, name), _positive_int, _positive_float),
        diagnostics=diagnostic_settings(lambda name: _value(args, env, name)),
        load=load_limits(lambda name: _value(args, env, name), _positive_int, max_entry_bytes),
        space=space_settings(lambda name: _value(args, env, name), _positive_float),
        security=start_security(
            http_host,
            tls.server is not None,
            _value(args, env, "root_password_file"),
            bool(getattr(args, "insecure_no_auth", None)) or env.get("RKV_INSECURE_NO_AUTH") == "1",
        ),
    )


def _auth_settings(args: argparse.Namespace, env: Mapping[str, str]) -> AuthSettings:
    def count(name: str, default: int) -> int:
        return _positive_int(_value(args, env, name), "--" + name.replace("_", "-"), default)

    return AuthSettings(
        token_ttl=_positive_float(
            _value(args, env, "auth_token_ttl"), "--auth-token-ttl", DEFAULT_TOKEN_TTL
        ),
        max_users=count("max_auth_users", DEFAULT_MAX_USERS),
        max_roles=count("max_auth_roles", DEFAULT_MAX_ROLES),
        max_role_permissions=count("max_role_permissions", DEFAULT_MAX_ROLE_PERMISSIONS),
        max_failed_logins=count("max_failed_logins", DEFAULT_PER_USER),
        max_failed_logins_per_address=count("max_failed_logins_per_address", DEFAULT_PER_ADDRESS),
    )
