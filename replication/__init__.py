"""Pull replication (rebuild, catch-up, change feed) and the Redis replicator.

Arrives with the compaction/rebuild and Redis issues.
"""
