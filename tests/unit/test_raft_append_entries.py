"""A follower's handling of append_entries in raft/syncobj_node.py (RkvSyncObj), fed
messages directly: a resent prefix of entries it holds deletes nothing (pysyncobj
alone would cut the tail it had acknowledged), and a real conflict still truncates
from the first conflicting entry, as Raft requires."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import pytest
from pysyncobj import SyncObjConf

from raft.syncobj_node import RkvSyncObj
from tests.support.cluster import free_ports

NO_OP = b"\x01"  # pysyncobj's _COMMAND_TYPE.NO_OP: never applied as a client command


@pytest.fixture
def follower() -> Iterator[RkvSyncObj]:
    me, peer = free_ports(2)
    node = RkvSyncObj(
        f"127.0.0.1:{me}",
        [f"127.0.0.1:{peer}"],
        SyncObjConf(autoTick=False, dynamicMembershipChange=True),
        lambda index, entry: None,
    )
    try:
        yield node
    finally:
        node.destroy()


class Leader:
    def __init__(self, node: RkvSyncObj) -> None:
        self.node = node
        self.peer = next(iter(node._SyncObj__otherNodes))
        self.replies: list[tuple[int | None, bool]] = []

        def record(
            to: Any, reset: bool = False, nextNodeIdx: int | None = None, success: bool = False
        ) -> None:
            self.replies.append((nextNodeIdx, success))

        node._SyncObj__sendNextNodeIdx = record

    def append(
        self, prev: tuple[int, int], entries: list[tuple[bytes, int, int]], term: int
    ) -> None:
        self.node._SyncObj__onMessageReceived(
            self.peer,
            {
                "type": "append_entries",
                "term": term,
                "commit_index": 0,
                "prevLogIdx": prev[0],
                "prevLogTerm": prev[1],
                "entries": entries,
            },
        )

    def log(self) -> list[tuple[int, int]]:
        return [(entry[1], entry[2]) for entry in self.node._SyncObj__raftLog]


def entries(first: int, last: int, term: int) -> list[tuple[bytes, int, int]]:
    return [(NO_OP, index, term) for index in range(first, last + 1)]


def test_a_resent_prefix_deletes_nothing_and_answers_for_the_whole_log(
    follower: RkvSyncObj,
) -> None:
    leader = Leader(follower)
    leader.append((1, 0), entries(2, 10, 1), term=1)
    assert leader.log()[-1] == (10, 1) and leader.replies[-1] == (11, True)
    leader.append((1, 0), entries(2, 5, 1), term=1)  # a heartbeat from an older next index
    assert leader.log()[-1] == (10, 1) and len(leader.log()) == 10
    assert leader.replies[-1] == (11, True)
    leader.append((5, 1), [], term=1)  # an empty heartbeat behind the tail
    assert leader.log()[-1] == (10, 1)


def test_entries_past_the_held_ones_are_appended(follower: RkvSyncObj) -> None:
    leader = Leader(follower)
    leader.append((1, 0), entries(2, 6, 1), term=1)
    leader.append((3, 1), entries(4, 9, 1), term=1)  # overlaps 4..6, then new 7..9
    assert leader.log() == [(1, 0)] + [(i, 1) for i in range(2, 10)]
    assert leader.replies[-1] == (10, True)


def test_a_conflicting_entry_still_truncates_from_itself(follower: RkvSyncObj) -> None:
    leader = Leader(follower)
    leader.append((1, 0), entries(2, 10, 1), term=1)
    # A new leader (term 2) holds 2..5 of term 1, then its own 6..7.
    leader.append((1, 0), entries(2, 5, 1) + entries(6, 7, 2), term=2)
    assert leader.log() == [(1, 0)] + [(i, 1) for i in range(2, 6)] + [(6, 2), (7, 2)]
    assert leader.replies[-1] == (8, True)


def chunked(entry: tuple[bytes, int, int], batch: int) -> list[tuple[str, bytes]]:
    """pysyncobj 0.3.x leader's chunks of a large entry, with its labels: "finish"
    once a chunk reaches the length of the raw data, not of the pickle."""
    pickled = pickle.dumps(entry, 2)
    chunks = []
    for pos in range(0, len(pickled), batch):
        if pos == 0:
            label = "start"
        elif pos + batch >= len(entry[0]):
            label = "finish"
        else:
            label = "process"
        chunks.append((label, pickled[pos : pos + batch]))
    return chunks


def test_a_large_entry_sent_in_chunks_is_appended_once_complete(
    follower: RkvSyncObj, caplog: pytest.LogCaptureFixture
) -> None:
    leader = Leader(follower)
    leader.append((1, 0), entries(2, 3, 1), term=1)
    # 120 KB with every byte >= 0x80: its protocol-2 pickle is about twice as long.
    data = NO_OP + bytes(range(128, 256)) * 960
    chunks = chunked((data, 4, 1), 2**16)
    assert [label for label, _ in chunks].count("finish") > 1  # the mislabelling
    for label, piece in chunks:
        follower._SyncObj__onMessageReceived(
            leader.peer,
            {
                "type": "append_entries",
                "term": 1,
                "commit_index": 0,
                "prevLogIdx": 3,
                "prevLogTerm": 1,
                "transmission": label,
                "data": piece,
            },
        )
    assert leader.log()[-1] == (4, 1)
    assert follower._SyncObj__raftLog[-1][0] == data
    # The chunks were kept once, here: pysyncobj's own copy (str +=) stayed empty.
    assert not follower._SyncObj__recvTransmission
    assert leader.replies[-1] == (5, True)
    assert [success for _, success in leader.replies[1:-1]] == [False] * (len(chunks) - 1)
    # The next entry follows as usual.
    leader.append((4, 1), entries(5, 5, 1), term=1)
    assert leader.log()[-1] == (5, 1)


def test_a_conflicting_last_entry_is_not_hidden_by_the_later_batches_of_a_tick(
    follower: RkvSyncObj,
) -> None:
    """A leader sends several batches per tick and applies the answers in order; the
    answers to the batches after a conflict must not send it past the conflict again
    (the partition campaign caught a follower stuck so, connected but never catching up)."""
    leader = Leader(follower)
    leader.append((1, 0), entries(2, 5, 1) + entries(6, 6, 2), term=2)  # 6: an old leader's
    # Term 3's leader holds 2..5 of term 1 and its own 6..20; its next index for us is 7.
    leader.append((6, 3), entries(7, 12, 3), term=3)  # first batch: 6 conflicts
    leader.append((12, 3), entries(13, 20, 3), term=3)  # a later batch of the same tick
    assert [nxt for nxt, _ in leader.replies[-2:]] == [6, 6]  # the last answer still says 6
    assert not any(success for _, success in leader.replies[-2:])
    leader.append((5, 1), entries(6, 20, 3), term=3)  # the leader backs up: it converges
    assert leader.log() == [(1, 0)] + [(i, 1) for i in range(2, 6)] + [(i, 3) for i in range(6, 21)]
    assert leader.replies[-1] == (21, True)
