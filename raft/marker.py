"""pysyncobj snapshots as small markers instead of pickled state.

When pysyncobj compacts its journal it asks for a "full dump". rkv writes a
marker instead, after syncing the commit log: the raft index and
offset the state has reached, plus the two journal entries and the member
list pysyncobj needs back. The state itself is already durable in the commit
log, so nothing large is ever pickled or sent.

When a follower receives a leader's marker (install snapshot), pysyncobj
believes the follower has caught up to the marker's index. If this node's
state has not reached the marker's offset, entries are missing here: the node
installs the leader's state (replication/pull/catch_up.py) before any later entry is
applied. Only if that fails does it stall (apply nothing more, report itself
not ready) rather than silently serve a state with holes.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Callable
from typing import Any

from pysyncobj.node import TCPNode

from node.errors import ReplicationError, SnapshotFormatError, StorageError
from node.storage.recovery import NodeStorage

logger = logging.getLogger(__name__)

MARKER_FORMAT = 1


def _entry_to_json(entry: Any) -> list[Any]:
    command, index, term = entry
    return [base64.b64encode(bytes(command)).decode(), int(index), int(term)]


def _entry_from_json(raw: list[Any]) -> tuple[bytes, int, int]:
    return base64.b64decode(raw[0]), int(raw[1]), int(raw[2])


CatchUp = Callable[[NodeStorage, str, int, int], int]
"""(storage, source URL, raft index, offset) -> records pulled or keys installed: brings
the state up to a marker ahead of it (replication/pull/catch_up.py; raises ReplicationError,
SnapshotFormatError, StorageError or OSError). The composition root supplies it."""


class RaftMarkers:
    def __init__(  # noqa: PLR0917 (each callback is a distinct seam)
        self,
        storage: NodeStorage,
        node_id: str,
        catch_up: CatchUp,
        sources: Callable[[str], list[str]],
        on_gap: Callable[[str], None],
        on_caught_up: Callable[[int], None],
    ) -> None:
        self._storage = storage
        self._node_id = node_id
        self._catch_up = catch_up
        self._sources = sources
        self._on_gap = on_gap
        self._on_caught_up = on_caught_up
        self._gap: str | None = None

    def serialize(self, file_name: str, data: Any) -> None:
        """pysyncobj's serializer hook: ``data`` is (last entry, previous entry, members)."""
        if self._gap is not None:
            # The state here is missing entries pysyncobj counts as applied: a marker
            # written now would claim that state is complete, and a restart would
            # then build on it. Refusing keeps the marker that shows the gap (the
            # journal keeps growing until the node is rebuilt).
            raise RuntimeError(f"no raft marker while stalled: {self._gap}")
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
        """pysyncobj's deserializer hook: our own marker at start-up, or the leader's."""
        with open(file_name) as f:
            marker = json.load(f)
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
        if offset > store.applied_offset:
            gap = (
                f"a snapshot from {marker.get('node')} at raft index {index} (offset {offset}) "
                f"is ahead of this node's state (raft index {store.applied_index}, offset "
                f"{store.applied_offset})"
            )
            failures: list[str] = []
            for source in self._sources(str(marker.get("node"))):
                try:
                    installed = self._catch_up(self._storage, source, index, offset)
                except (ReplicationError, SnapshotFormatError, StorageError, OSError) as exc:
                    logger.warning("catching up from %s failed: %s", source, exc)
                    failures.append(f"{source}: {exc}")
                else:
                    self._on_caught_up(installed)
                    return
            reason = "; ".join(failures) or "no other member is known"
            self._gap = gap
            self._on_gap(
                f"{gap}; installing another member's state failed ({reason}): entries are "
                "missing here, so this node applies nothing more and serves no reads until "
                "it is rebuilt (restarting it retries)"
            )
        elif index > store.applied_index:
            # The entries in between wrote no records (barriers, failed conditions):
            # this node's state already equals the marker's.
            store.write([], index, store.applied_offset)
