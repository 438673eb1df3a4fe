"""What a transaction's gets would return, as a node's state stands (before the log).

The state machine is what refuses a txn whose gets return more than its
``max_result_bytes`` (node/state/deciders.py), on every replica alike. A node
can tell most such txns before proposing them, from its own state, and refuse
them without a raft round and an apply on every replica: the service does when
both branches would return more, counting only the keys no earlier op of the
branch writes, so what it refuses the state machine would refuse too unless
those keys shrink meanwhile.
"""

from __future__ import annotations

from node.state.commands import TxnGet, TxnOp
from node.storage.lmdb_store import ReadView


def returns_over(branch: tuple[TxnOp, ...], view: ReadView, limit: int) -> bool:
    """Whether the gets of ``branch`` return more than ``limit`` bytes as ``view`` stands
    (keys an earlier op of the branch writes are not counted)."""
    written: set[bytes] = set()
    returned = 0
    for op in branch:
        if not isinstance(op, TxnGet):
            written.add(op.key)
            continue
        if op.key in written:
            continue
        current = view.get(op.key)
        if current is not None:
            returned += len(op.key) + len(current.value)
            if returned > limit:
                return True
    return False
