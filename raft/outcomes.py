"""How pysyncobj's answer to one entry (result, FAIL_REASON) becomes an Outcome."""

from __future__ import annotations

from typing import Any

from pysyncobj.config import FAIL_REASON

from node.errors import NotApplied, Overloaded, RequestError, UnknownOutcome
from raft.proposer import Outcome


def outcome(result: Any, error: int) -> Outcome:
    if error == FAIL_REASON.SUCCESS:
        if isinstance(result, tuple):
            return result
        return UnknownOutcome("raft applied the entry but returned no results")
    failure: RequestError
    if error == FAIL_REASON.QUEUE_FULL:
        failure = Overloaded("raft's command queue is full")
    elif error == FAIL_REASON.MISSING_LEADER:
        failure = NotApplied("no leader is known (an election is in progress or no quorum)")
    elif error in (FAIL_REASON.DISCARDED, FAIL_REASON.NOT_LEADER):
        # DISCARDED: another entry was committed at this one's index, so this one
        # never will be. NOT_LEADER: the node asked never appended it.
        failure = NotApplied("the leader changed before the write was committed")
    elif error == FAIL_REASON.REQUEST_DENIED:
        failure = NotApplied("raft denied the request")
    else:
        failure = UnknownOutcome(f"raft reported an unknown outcome (reason {error})")
    return failure
