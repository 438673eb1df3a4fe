"""pysyncobj snapshots as small markers instead of pickled state.

When pysyncobj compacts its journal it asks for a "full dump". rkv writes a
marker instead, after syncing the commit log: the raft index and
offset the state has reached, plus the two journal entries and the member
list pysyncobj needs back. The state itself is already durable in the commit
log, so nothing large is ever pickled or sent.

When a follower receives a leader's marker (install snapshot), pysyncobj
believes the follower has caught up to the marker's index. If this node's
state has not reached the marker's offset, entries are missing here: the gap
filler (raft/gap.py) brings the state there on its own thread, and no later
entry is applied, no read served and no election stood for until it has; it
retries until it succeeds rather than ever serve a state with holes.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from pathlib import Path
from typing import Any

from pysyncobj.node import TCPNode

from node.storage.datadir import fsync_directory
from node.storage.recovery import NodeStorage
from raft.gap import GapFiller

logger = logging.getLogger(__name__)

MARKER_FORMAT = 1


def _entry_to_json(entry: Any) -> list[Any]:
    command, index, term = entry
    return [base64.b64encode(bytes(command)).decode(), int(index), int(term)]


def _entry_from_json(raw: list[Any]) -> tuple[bytes, int, int]:
    return base64.b64decode(raw[0]), int(raw[1]), int(raw[2])


class RaftMarkers:
    def __init__(self, storage: NodeStorage, node_id: str, gap: GapFiller) -> None:
        self._storage = storage
        self._node_id = node_id
        self._gap = gap

    def serialize(self, file_name: str, data: Any) -> None:
        """pysyncobj's serializer hook: ``data`` is (last entry, previous entry, members)."""
        behind = self._gap.behind
        if behind is not None:
            # The state here is missing entries pysyncobj counts as applied: a marker
            # written now would claim that state is complete, and a restart would
            # then build on it. Refusing keeps the marker that shows the gap (the
            # journal keeps growing until the gap is filled).
            raise RuntimeError(f"no raft marker while stalled: {behind}")
        last_entry, prev_entry, cluster = data
        storage = self._storage
        # The commit log is what makes the state durable; LMDB is rebuilt from it
        # after a machine crash (node/storage/recovery.py), so it is not synced here: a
        # full LMDB sync of a large store on this thread would stall heartbeats.
        storage.commit_log.sync()
        marker = {
            "format": MARKER_FORMAT,
            "node": self._node_id,
            "raft_index": storage.store.applied_index,
            "applied_offset": storage.store.applied_offset,
            "last_entry": _entry_to_json(last_entry),
            "prev_entry": _entry_to_json(prev_entry),
            "members": sorted(node.address for node in cluster),
        }
        with open(file_name, "w") as f:
            json.dump(marker, f)
            f.flush()
            os.fsync(f.fileno())
        logger.info(
            "raft marker written at raft index %d, offset %d",
            marker["raft_index"],
            marker["applied_offset"],
        )

    def deserialize(self, file_name: str) -> tuple[Any, Any, Any]:
        """pysyncobj's deserializer hook: our own marker at start-up, or the leader's.

        The file and its name are made durable first: pysyncobj writes a marker
        received from the leader without an fsync and renames it into place without
        a directory fsync, and clears the journal right after this returns."""
        with open(file_name) as f:
            os.fsync(f.fileno())
            marker = json.load(f)
        fsync_directory(Path(file_name).resolve().parent)
        if marker.get("format") != MARKER_FORMAT:
            raise ValueError(f"unknown raft marker format in {file_name}: {marker!r:.200}")
        self._check_gap(marker)
        members = {TCPNode(address) for address in marker["members"]}
        return (
            _entry_from_json(marker["last_entry"]),
            _entry_from_json(marker["prev_entry"]),
            members,
        )

    def _check_gap(self, marker: dict[str, Any]) -> None:
        store = self._storage.store
        index, offset = int(marker["raft_index"]), int(marker["applied_offset"])
        if offset > store.applied_offset or self._gap.holding():
            # Entries are missing here: the gap filler brings the state to the
            # marker's on its own thread, and nothing later is applied meanwhile.
            self._gap.open(index, offset, str(marker.get("node")))
        elif index > store.applied_index:
            # The entries in between wrote no records (barriers, failed conditions):
            # this node's state already equals the marker's.
            store.write([], index, store.applied_offset)
