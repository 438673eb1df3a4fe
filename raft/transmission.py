"""Reassembling pysyncobj's chunked append_entries ("transmissions") on a follower.

A leader sends an entry larger than ``appendEntriesBatchSizeBytes`` pickled and cut
into chunks labelled start / process / finish. pysyncobj 0.3.x labels a chunk
"finish" as soon as it reaches the length of the entry's *raw* data, but the
chunks cut the *pickled* entry, which is longer: pickle protocol 2 stores bytes
as a latin-1 string in UTF-8, so every byte >= 0x80 takes two. An rkv entry
(msgpack) of 120 KB thus arrives with several chunks labelled "finish"; the
follower unpickled each one, failed on the truncated data (first in C, then in
pure Python), logged a traceback and aborted its tick, many times per entry.
Under a load of large transactions that cost followers enough CPU to fall
behind, and elections followed (bench/audit_snapshot.py saw ~20 such failures a
second and a member that had to be rebuilt).

:class:`Transmissions` keeps each sender's chunks, relabels a "finish" that does
not yet complete the pickle as "process" (pysyncobj then just appends it and
answers "not yet"), and turns the one that completes it into an ordinary
append_entries message carrying the entry, which then goes through the same
checks as any other (raft/syncobj_node.py: held entries are not truncated).
"""

from __future__ import annotations

import pickle
from typing import Any


class Transmissions:
    """Per sender, the chunks of the transmission in progress."""

    def __init__(self) -> None:
        self._chunks: dict[Any, bytearray] = {}

    def receive(self, sender: Any, message: dict[str, Any]) -> dict[str, Any]:
        """The message pysyncobj should see for this chunk (see the module doc)."""
        kind = message.get("transmission")
        data = message.get("data")
        if kind is None or not isinstance(data, bytes | bytearray):
            return message
        if kind == "start":
            self._chunks[sender] = bytearray(data)
            return _without_data(message)
        chunks = self._chunks.get(sender)
        if chunks is None:  # its start was not seen (a reconnect): pysyncobj's own handling
            return message
        chunks += data
        if kind != "finish":
            return _without_data(message)
        try:
            # pysyncobj unpickles what peers send in any case (they hold the secret).
            entry = pickle.loads(chunks)
        except (pickle.UnpicklingError, EOFError, ValueError):
            return {**message, "transmission": "process", "data": b""}  # more chunks follow
        del self._chunks[sender]
        whole = {k: v for k, v in message.items() if k not in ("transmission", "data")}
        whole["entries"] = [entry]
        return whole


def _without_data(message: dict[str, Any]) -> dict[str, Any]:
    """The chunk's message for pysyncobj with its data taken out: this class holds the
    chunks, and pysyncobj's own ``str +=`` of them copied the whole transmission for
    every chunk (quadratic on the raft thread)."""
    return {**message, "data": b""}
