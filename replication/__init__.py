"""Replication from outside raft: pull replication (pull/) and the Redis replicator (redis/).

pull/ brings a node that raft cannot catch up with entries (a raft marker ahead of
its state) to a peer's state, through the peer's HTTP API; redis/ poses as a
Redis replica and writes what the master sends into rkv through the client.
"""
