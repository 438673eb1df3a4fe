"""Raft replication of the node's entries with pysyncobj 0.3.17.

The only package that imports pysyncobj. What it adds to pysyncobj, and why
(see docs/ARCHITECTURE.md and docs/OPERATIONS.md):

- one replicated method, ``apply_entry(bytes)``: entries are versioned bytes
  (node/state/commands.py), never Python method calls;
- durability: a follower fsyncs its journal before it acknowledges entries to
  the leader, and a node fsyncs its journal and commit log before it tells any
  client that a write succeeded (pysyncobj itself never fsyncs);
- pysyncobj's snapshot is a small raft marker (marker.py) written after syncing
  the commit log, never a pickle of the state; a marker from the leader that is
  ahead of this node's state is filled by the catch-up the composition root
  supplies, and stalls the node (it reports unhealthy) if that fails;
- group commit on the asyncio side: concurrent proposals become one entry,
  in-flight proposals are bounded, every wait has a timeout;
- the raft port requires the cluster secret (pysyncobj's Fernet encryption)
  unless the node runs in explicit insecure dev mode, and bounds what a peer
  without it can make the node hold or do (transport.py, wire.py,
  listener.py): frames by their announced length, connections by a handshake
  deadline and count, accept() errors without closing the port.
"""
