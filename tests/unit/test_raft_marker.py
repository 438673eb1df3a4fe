"""Raft markers (raft/marker.py): a marker ahead of the state is a gap; a
node that could not close it must never write a marker of its own (found by the chaos
campaigns: a stalled member wrote "state at offset 0" over the gap, restarted on it,
applied later entries to an empty state and was elected leader)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pysyncobj.node import TCPNode

from node.storage.recovery import NodeStorage
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


def test_a_gap_no_member_can_fill_stalls_and_forbids_writing_markers(
    tmp_path: Path, storage: NodeStorage
) -> None:
    gaps: list[str] = []
    markers = RaftMarkers(
        storage,
        "n1",
        catch_up,
        lambda author: ["http://127.0.0.1:1"],  # nothing listens there
        gaps.append,
        lambda installed: None,
    )
    leader_marker = marker(tmp_path / "received", "n0", 500, 480)
    markers.deserialize(str(leader_marker))
    assert len(gaps) == 1 and "127.0.0.1:1" in gaps[0], gaps
    assert storage.store.applied_offset == 0
    own = tmp_path / "own"
    data = ((b"", 600, 3), (b"", 599, 3), {TCPNode("127.0.0.1:1")})
    with pytest.raises(RuntimeError, match="stalled"):
        markers.serialize(str(own), data)
    assert not own.exists()


def test_a_healthy_node_writes_its_applied_state(tmp_path: Path, storage: NodeStorage) -> None:
    markers = RaftMarkers(
        storage, "n1", catch_up, lambda author: [], lambda g: None, lambda i: None
    )
    own = tmp_path / "own"
    markers.serialize(str(own), ((b"", 0, 1), (b"", 0, 1), {TCPNode("127.0.0.1:1")}))
    written = json.loads(own.read_text())
    assert (written["node"], written["raft_index"], written["applied_offset"]) == ("n1", 0, 0)
