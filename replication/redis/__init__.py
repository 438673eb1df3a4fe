"""The Redis replicator: poses as a Redis replica and forwards the data into rkv."""
