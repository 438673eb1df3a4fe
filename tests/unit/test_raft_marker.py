"""Raft markers (raft/marker.py): a marker ahead of the state is a gap; a
node that has not closed it yet must never write a marker of its own (found by the chaos
campaigns: a stalled member wrote "state at offset 0" over the gap, restarted on it,
applied later entries to an empty state and was elected leader)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pysyncobj.node import TCPNode

import raft.gap
from node.storage.recovery import NodeStorage
from raft.gap import GapFiller
from raft.marker import MARKER_FORMAT, RaftMarkers
from replication.pull.catch_up import catch_up


def marker(path: Path, node: str, raft_index: int, offset: int) -> Path:
    path.write_text(
        json.dumps(
            {
                "format": MARKER_FORMAT,
                "node": node,
                "raft_index": raft_index,
                "applied_offset": offset,
                "last_entry": ["", raft_index, 3],
                "prev_entry": ["", raft_index - 1, 3],
                "members": ["127.0.0.1:1"],
            }
        )
    )
    return path


def wait_for(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.01)


def test_a_gap_no_member_can_fill_stalls_and_forbids_writing_markers(
    tmp_path: Path, storage: NodeStorage
) -> None:
    filled: list[int] = []
    gap = GapFiller(
        storage, catch_up, lambda author: ["http://127.0.0.1:1"], filled.append
    )  # nothing listens there
    markers = RaftMarkers(storage, "n1", gap)
    try:
        leader_marker = marker(tmp_path / "received", "n0", 500, 480)
        markers.deserialize(str(leader_marker))  # returns at once: the filler works alone
        assert gap.holding()
        wait_for(lambda: gap.stalled is not None)
        assert "127.0.0.1:1" in str(gap.stalled) and gap.holding() and not filled
        assert storage.store.applied_offset == 0
        own = tmp_path / "own"
        data = ((b"", 600, 3), (b"", 599, 3), {TCPNode("127.0.0.1:1")})
        with pytest.raises(RuntimeError, match="stalled"):
            markers.serialize(str(own), data)
        assert not own.exists()
    finally:
        gap.stop()


def test_the_filler_retries_until_a_source_fills_the_gap(
    tmp_path: Path, storage: NodeStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(raft.gap, "FIRST_PAUSE", 0.01)
    attempts: list[str] = []

    def flaky_catch_up(target: NodeStorage, source: str, index: int, offset: int) -> int:
        attempts.append(source)
        if len(attempts) < 5:
            raise OSError("connection refused")
        target.store.write([], index, offset)  # what a real catch-up leaves behind
        return 7

    filled: list[int] = []
    gap = GapFiller(storage, flaky_catch_up, lambda author: ["http://a", "http://b"], filled.append)
    markers = RaftMarkers(storage, "n1", gap)
    try:
        markers.deserialize(str(marker(tmp_path / "received", "n0", 500, 480)))
        wait_for(lambda: not gap.holding())
        assert filled == [7] and gap.stalled is None and gap.behind is None
        assert attempts == ["http://a", "http://b"] * 2 + ["http://a"]
        assert (storage.store.applied_index, storage.store.applied_offset) == (500, 480)
    finally:
        gap.stop()


def test_a_healthy_node_writes_its_applied_state(tmp_path: Path, storage: NodeStorage) -> None:
    gap = GapFiller(storage, catch_up, lambda author: [], lambda installed: None)
    markers = RaftMarkers(storage, "n1", gap)
    own = tmp_path / "own"
    markers.serialize(str(own), ((b"", 0, 1), (b"", 0, 1), {TCPNode("127.0.0.1:1")}))
    written = json.loads(own.read_text())
    assert (written["node"], written["raft_index"], written["applied_offset"]) == ("n1", 0, 0)
