"""The rkv broker node.

Core modules (no raft, no HTTP, no engine but LMDB in one place):

- ``commands``      versioned binary encoding of what the state machine applies
- ``results``       the outcome of each applied command (never an exception)
- ``keyspace``      key limits and the reserved internal prefix
- ``record``        the on-disk framing of one commit-log record
- ``segment``       one segment file of the commit log and its sparse index
- ``commit_log``    the segmented append-only log: offsets are versions
- ``lmdb_store``    the materialized state; the only module that imports lmdb
- ``state_machine`` apply(raft_index, entry) -> results, deterministic and
                    idempotent by raft index
- ``recovery``      opening a data directory and bringing LMDB up to the log
- ``errors``        rkv's exception tree

Invariants:

1. Every state change is a commit-log record; LMDB is a cache of the log and
   can always be rebuilt from it.
2. A record's offset is assigned at apply time from the log's head, so every
   replica that applies the same entries produces the same offsets.
3. apply() never raises for a business outcome; it returns a result.

The composition root (``cli``, and later the server) wires everything and is
imported by nothing.
"""
