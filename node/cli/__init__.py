"""The composition root: the `rkv` commands, the node's settings and its wiring.

The only part of node/ that imports raft/, http_api/, replication/ and
spark_tools/; nothing imports it. One module per command family (arguments and
handler together), common.py for what they share, wiring.py to build a node.
"""
