"""Raft settings of one node, as validated values (built by the composition root)."""

from __future__ import annotations

from dataclasses import dataclass, field

from node.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Member:
    """A cluster member: its id, raft address (host:port) and HTTP base URL."""

    node_id: str
    raft_address: str
    http_url: str


# The raft port (raft/transport.py, raft/wire.py).
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024
DEFAULT_HANDSHAKE_TIMEOUT = 5.0
DEFAULT_MAX_HANDSHAKES = 32
_BATCH_BYTES = 64 * 1024  # pysyncobj's appendEntriesBatchSizeBytes (its default, kept)
_FRAME_SLACK = 1024 * 1024


def frame_bytes_needed(largest_entry_bytes: int) -> int:
    """The frame limit that lets an entry carrying ``largest_entry_bytes`` of keys
    and values reach the followers.

    pysyncobj sends a leader's entries in batches: entries while they add up to
    less than 64 KiB, plus the one that crosses it, in one frame; only an entry
    that is alone and larger is cut into 64 KiB chunks. So a large entry can ride
    whole after a few small ones. Its frame holds the entry pickled twice
    (protocol 2, bytes >= 0x80 grow), compressed (which takes most of that back)
    and encrypted (base64: 4/3): measured at 1.9x the entry's bytes for random
    values, 0.01x for text. Twice the entry, plus the batch before it and a
    margin, bounds it."""
    return 2 * largest_entry_bytes + _BATCH_BYTES + _FRAME_SLACK


@dataclass(frozen=True, slots=True)
class TransportLimits:
    """Bounds on what a peer, or a stranger, can make the raft port hold."""

    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    """The largest frame an authenticated member may send; a larger announced
    length closes the connection before anything is buffered."""
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    """Seconds a connection has to complete pysyncobj's handshake (the exchange
    of random keys under the cluster secret, then the member's address)."""
    max_handshakes: int = DEFAULT_MAX_HANDSHAKES
    """Accepted connections still in their handshake at once; past it, the
    oldest is closed."""

    def __post_init__(self) -> None:
        if self.max_frame_bytes < 1024 * 1024:
            raise ConfigError("the raft frame limit must be at least 1 MiB")
        if self.handshake_timeout <= 0:
            raise ConfigError("the raft handshake timeout must be positive")
        if self.max_handshakes < 1:
            raise ConfigError("at least one raft handshake must be allowed at a time")


@dataclass(frozen=True, slots=True)
class RaftConfig:
    self_member: Member
    peers: tuple[Member, ...]
    journal_dir: str
    secret: bytes | None = field(repr=False)  # None only in explicit insecure dev mode
    # Conservative timeouts: pysyncobj's defaults (0.4-1.4 s) cause needless
    # elections when a loaded 2-core machine delays the raft thread.
    election_timeout_min: float = 1.0
    election_timeout_max: float = 2.0
    heartbeat_interval: float = 0.1
    # How long pysyncobj's thread sleeps in poll() when nothing arrives. An entry
    # proposed on a node is committed on a tick after the one that appended it,
    # so with no peer reply to wake the thread (a one-node cluster, or the
    # commit index reaching followers) this bounds commit latency.
    tick_interval: float = 0.005
    leader_fallback_timeout: float = 4.0
    # pysyncobj compacts its journal (writing a raft marker) after this many
    # entries, or this many seconds.
    compaction_min_entries: int = 5000
    compaction_min_seconds: int = 300
    # ... or once its entries hold this many bytes (raft/journal.py keeps them on disk
    # only; the file stays within about twice this).
    compaction_max_bytes: int = 64 * 1024 * 1024
    # Group commit and backpressure.
    max_commands_per_entry: int = 1000
    max_entry_bytes: int = 4 * 1024 * 1024  # and no more than this of keys and values
    max_entries_in_flight: int = 4
    max_pending_commands: int = 20_000
    proposal_timeout: float = 5.0
    # Linearizable reads by ReadIndex (raft/read_index.py) rather than a barrier entry.
    read_index: bool = True
    # Joining a running cluster (rkv node --join): stand for no election until a
    # leader has been heard from (this node is not a member yet).
    joining: bool = False
    transport: TransportLimits = field(default_factory=TransportLimits)
    members: tuple[Member, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", (self.self_member, *self.peers))
        ids = [m.node_id for m in self.members]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"member ids must be unique: {ids}")
        addresses = [m.raft_address for m in self.members]
        if len(set(addresses)) != len(addresses):
            raise ConfigError(f"raft addresses must be unique: {addresses}")
        if not 0 < self.election_timeout_min < self.election_timeout_max:
            raise ConfigError("election timeouts must satisfy 0 < min < max")
        if self.election_timeout_min <= 3 * self.heartbeat_interval:
            raise ConfigError("the election timeout must exceed three heartbeat intervals")
        if not 0 < self.tick_interval <= self.heartbeat_interval:
            raise ConfigError("tick_interval must be positive and at most the heartbeat interval")
        if self.leader_fallback_timeout <= self.heartbeat_interval:
            raise ConfigError("leader_fallback_timeout must exceed the heartbeat interval")
        if self.compaction_min_entries < 2 or self.compaction_min_seconds < 1:
            raise ConfigError("compaction thresholds must be at least 2 entries and 1 second")
        if not 1024 * 1024 <= self.compaction_max_bytes <= 1024**3:
            raise ConfigError("the raft journal's compaction bytes must be 1 MiB to 1 GiB")
        if self.max_commands_per_entry < 1 or self.max_entries_in_flight < 1:
            raise ConfigError("batch and in-flight limits must be positive")
        if self.proposal_timeout <= 0:
            raise ConfigError("proposal_timeout must be positive")
        if self.secret is not None and len(self.secret) < 16:
            raise ConfigError("the cluster secret must be at least 16 bytes")
        needed = frame_bytes_needed(self.max_entry_bytes)
        if self.transport.max_frame_bytes < needed:
            raise ConfigError(
                f"the raft frame limit ({self.transport.max_frame_bytes} bytes) must be at "
                f"least {needed} bytes for entries of {self.max_entry_bytes} bytes"
            )
