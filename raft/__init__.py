"""Raft replication of the node's entries (pysyncobj 0.3.17).

The only package that imports pysyncobj. It arrives with the cluster issue;
until then the storage core in node/ is exercised directly.
"""
