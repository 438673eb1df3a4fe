"""Bytes on disk: the commit log, LMDB, compaction and recovery; nothing about commands.

Invariants: the commit log is the source of truth and LMDB a cache of it (it can
always be rebuilt from the log); a record's offset is assigned at apply time from
the log's head; every swap of files ends with an fsync of its directory. Only
lmdb_store.py imports lmdb; key_order.py says where a key sits in LMDB's order
without it.
"""
