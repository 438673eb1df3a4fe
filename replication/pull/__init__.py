"""Pull replication: catching up with a peer's log range or installing its whole state.

Runs on raft's thread inside a raft marker's load (raft/marker.py receives
:func:`replication.pull.catch_up.catch_up` from the composition root); it reads
the peer over the control-plane calls of http_api/client/control.py and writes
through node/storage and node/snapshot only.
"""
