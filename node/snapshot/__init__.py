"""Snapshots: one meaning, a whole-state file (format, export from one LMDB read view,
restore into a fresh data directory, install in place of a node's state)."""
