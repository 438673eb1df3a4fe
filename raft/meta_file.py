"""Raft's persistent state (current term, vote, commit index), made durable.

pysyncobj keeps these in ``<journal>.meta`` and rewrites the file with a write and a
rename, never fsynced: after a power cut the new file may be empty, or the rename
lost, and a node that forgets its vote may vote a second time in the same term (two
leaders in one term, acknowledged writes overwritten). :class:`DurableMeta` writes
the same file in the same format (an existing data directory opens unchanged), but
fsyncs the temporary file before the rename and the directory after it, so that
when :meth:`store` returns (before the vote or the new term leaves the node in a
message) the file on disk holds it whole.

A file that exists but cannot be read is an error, never an empty state: starting
with no memory of a vote is exactly the danger above.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

from node.storage.datadir import fsync_directory


class MetaFileError(RuntimeError):
    """The raft meta file is present but unreadable (torn by a power cut under an
    earlier version, or damaged): the node must not guess its term and vote."""


class DurableMeta:
    """pysyncobj's MetaStorer interface (getMeta, storeMeta, getPath), durable."""

    def __init__(self, path: str) -> None:
        self._path = Path(path)
        self._tmp = Path(path + ".tmp")

    def getMeta(self) -> dict[str, Any]:
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            meta = pickle.loads(data)
        except Exception as exc:
            raise MetaFileError(
                f"{self._path} ({len(data)} bytes) cannot be read: {exc!r}. The node's raft "
                "term and vote are unknown, and it must not guess them (it could vote twice "
                "in one term). Wipe this member's data directory and let it be rebuilt "
                "from the leader (docs/OPERATIONS.md, 'Replacing a member')."
            ) from exc
        if not isinstance(meta, dict):
            raise MetaFileError(f"{self._path} holds {type(meta).__name__}, not raft's state")
        return meta

    def storeMeta(self, meta: dict[str, Any]) -> None:
        data = pickle.dumps(meta)
        with open(self._tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(self._tmp, self._path)
        fsync_directory(self._path.parent)

    def getPath(self) -> str:
        return str(self._path)
