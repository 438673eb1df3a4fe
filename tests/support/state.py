"""The state machine over an opened data directory, as the composition root builds it.

open_storage() opens the log and LMDB only; a test that applies entries asks
for the one StateMachine of its NodeStorage here (the machine remembers recent
results and producer states, so a storage has exactly one).
"""

from __future__ import annotations

from node.state.machine import StateMachine
from node.storage.recovery import NodeStorage

_MACHINES: dict[int, tuple[NodeStorage, StateMachine]] = {}


def machine_of(storage: NodeStorage) -> StateMachine:
    known = _MACHINES.get(id(storage))
    if known is not None and known[0] is storage:
        return known[1]
    machine = StateMachine.over(storage)
    _MACHINES[id(storage)] = (storage, machine)
    return machine
