"""rkv's exception tree.

Exceptions are for things that are wrong with the node or the caller's code,
never for business outcomes of applied commands (a failed compare-and-set is a
:class:`node.results.CommandResult`, not an exception)::

    RkvError
    ├── EntryDecodeError          bytes that are not an entry this node can read
    │   └── UnsupportedEntryVersion   an entry written by a newer (or unknown) format
    ├── StorageError              the data directory cannot be used
    │   ├── CorruptLogError       a record fails its checksum outside the torn tail
    │   └── StoreError            LMDB refused an operation
    │       └── StoreCorruptError LMDB's files are damaged (rebuilt from the log)
    └── ConfigError               invalid configuration value
"""

from __future__ import annotations

from pathlib import Path


class RkvError(Exception):
    """Base of every exception rkv raises on purpose."""


class EntryDecodeError(RkvError):
    """The bytes are not a well-formed entry."""


class UnsupportedEntryVersion(EntryDecodeError):
    """The entry's format version is unknown to this node."""

    def __init__(self, version: object) -> None:
        super().__init__(f"unsupported entry format version {version!r}")
        self.version = version


class StorageError(RkvError):
    """The node's data directory cannot be used as it is."""


class CorruptLogError(StorageError):
    """A commit-log record is damaged somewhere a torn write cannot explain."""

    def __init__(self, path: Path, position: int, reason: str) -> None:
        super().__init__(f"corrupt commit log: {path} at byte {position}: {reason}")
        self.path = path
        self.position = position
        self.reason = reason


class StoreError(StorageError):
    """LMDB refused an operation."""


class StoreCorruptError(StoreError):
    """LMDB's files are damaged; the commit log can rebuild them."""


class ConfigError(RkvError):
    """A configuration value is invalid."""
