"""The replica side of the Redis replication protocol: handshake, RESP, spool, master link."""
