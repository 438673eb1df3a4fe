"""The deterministic state machine: commands, their results, and how an entry is applied.

apply(raft_index, entry) -> results is deterministic and idempotent by raft index,
and never raises for a business outcome (a failed condition, a fenced producer):
it returns a result carrying the error.
"""
