"""rkv's exception tree.

Exceptions are for things that are wrong with the node or a request, never
for business outcomes inside apply (a failed compare-and-set is a
:class:`node.state.results.CommandResult` there; the service turns it into
:class:`VersionConflict` for its caller)::

    RkvError
    ├── EntryDecodeError              bytes that are not an entry this node can read
    │   └── UnsupportedEntryVersion   an entry written by a newer (or unknown) format
    ├── StorageError                  the data directory cannot be used
    │   ├── CorruptLogError           a record fails its checksum outside the torn tail
    │   └── StoreError                LMDB refused an operation
    │       ├── StoreCorruptError     LMDB's files are damaged (rebuilt from the log)
    │       └── StoreFullError        LMDB found the disk full, or its map full and unable to grow
    ├── ConfigError                   invalid configuration value
    ├── ReplicationError              pulling records from another node failed
    ├── SnapshotFormatError           a snapshot file is truncated, damaged or not one
    ├── ExportInterrupted             an audit export had to stop (map resize, shutdown)
    └── RequestError                  a request could not be served; ``code`` is stable
        ├── InvalidRequest            malformed input (bad key, bad parameter)
        ├── PayloadTooLarge           a value or body over the limit
        ├── KeyNotFound               the key does not exist
        ├── VersionConflict           a precondition on the key's version failed
        ├── Conflict                  the request conflicts with the cluster's state
        │   ├── Fenced                a write's fencing token is not the lock holder's
        │   └── LockHeld              a lock was not got within its timeout
        ├── NotLeader                 this node cannot serve it; ``leader_url`` may help
        ├── NoSpace                   a nospace alarm is raised: writes that add data wait
        │                             for an operator to free space and disarm it
        ├── AuditExportFailed         this node's export of an audit failed
        ├── LimitReached              a bounded resource is full (``code`` names the limit)
        ├── Unauthenticated           no credentials, or credentials that do not check
        ├── Forbidden                 refused to this caller
        │   └── PermissionDenied      the caller lacks the permission the message names
        └── Unavailable               the cluster cannot serve it now
            ├── NotApplied            the write was definitely not applied; retry is safe
            ├── UnknownOutcome        the write may or may not have been applied
            ├── Overloaded            too many requests in flight; retry after a pause
            └── NodeNotReady          this node is catching up or stalled

Domain errors carry a machine ``code`` and never an HTTP status: the HTTP
layer maps them in one table.
"""

from __future__ import annotations

import errno
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


class StoreFullError(StoreError):
    """LMDB could not write for want of space: the disk is full (ENOSPC), or its map
    is full and cannot grow. Nothing was written; the write can be retried."""


def out_of_space(error: BaseException) -> str | None:
    """Why ``error`` (or an error it was raised from) means the disk is full, or None:
    an OSError ENOSPC or EDQUOT, or a :class:`StoreFullError`."""
    seen: BaseException | None = error
    for _ in range(8):  # the chain of causes is short; a loop in it must not hang
        if seen is None:
            return None
        if isinstance(seen, StoreFullError):
            return str(seen)
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return f"{seen.strerror}" + (f": {seen.filename}" if seen.filename else "")
        seen = seen.__cause__ or seen.__context__
    return None


class ConfigError(RkvError):
    """A configuration value is invalid."""


class ReplicationError(RkvError):
    """Pulling records from another node failed (unreachable, damaged stream)."""


class SnapshotFormatError(RkvError):
    """A snapshot file cannot be used: truncated, damaged, not a snapshot, or a format
    version this node does not read. The message names what is wrong and where."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


class ExportInterrupted(RkvError):
    """An audit export stopped before it was complete: LMDB had to grow its map or
    swap its files (which needs every read transaction closed), or the node stops."""


class RequestError(RkvError):
    """A request could not be served. ``code`` is stable; the message is for people."""

    code = "request_error"
    duplicate = False
    """Set when this is the remembered outcome of an idempotent producer's retry."""
    close_connection = False
    """Set when the rest of the request cannot be read: the answer closes the connection."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)


class InvalidRequest(RequestError):
    code = "invalid_request"


class PayloadTooLarge(RequestError):
    code = "payload_too_large"


class Forbidden(RequestError):
    """The node refuses this operation to this caller (403)."""

    code = "forbidden"


class PermissionDenied(Forbidden):
    """The authenticated caller lacks a permission; the message names it (403)."""

    code = "permission_denied"


class Unauthenticated(RequestError):
    """No credentials, or credentials that do not check (401). ``code``:
    ``unauthenticated``, ``invalid_credentials``, ``invalid_token`` or ``token_expired``."""

    code = "unauthenticated"


class RequestTimeout(RequestError):
    """The request did not arrive in time (408)."""

    code = "request_timeout"


class KeyNotFound(RequestError):
    code = "not_found"


class VersionConflict(RequestError):
    code = "version_conflict"

    def __init__(self, message: str, current_version: int) -> None:
        super().__init__(message)
        self.current_version = current_version


class Conflict(RequestError):
    """The request conflicts with the cluster's state (a membership change in progress...)."""

    code = "conflict"


class Fenced(Conflict):
    """A write carried a lock's fencing token that is not the current holder's (409).
    ``token`` is the current holder's token, None when nobody holds the lock."""

    code = "fenced"

    def __init__(self, message: str, token: int | None) -> None:
        super().__init__(message)
        self.token = token


class LockHeld(Conflict):
    """A lock or campaign request did not get the lock within its timeout (409) and left
    its queue. ``token`` is the current holder's token, None when nobody holds it now."""

    code = "lock_held"

    def __init__(self, message: str, token: int | None) -> None:
        super().__init__(message)
        self.token = token


class AuditExportFailed(RequestError):
    """This node's export of an audit failed (or was interrupted); the message says why.
    The cut cannot be taken again: run a new audit."""

    code = "audit_export_failed"


class NoSpace(RequestError):
    """A member raised a nospace alarm (its disk is full or its data passed
    --quota-bytes): the cluster refuses writes that add data until an operator frees
    space and disarms the alarm (507). The message names the member and the reason."""

    code = "no_space"


class LimitReached(RequestError):
    """A resource the cluster bounds by a setting is full (``too_many_producers``);
    the ``code`` names the limit. A retry helps only once something is freed."""

    code = "limit_reached"
    retry_after: float | None = None


class NotLeader(RequestError):
    code = "not_leader"

    def __init__(self, message: str, leader_url: str | None) -> None:
        super().__init__(message)
        self.leader_url = leader_url


class Unavailable(RequestError):
    code = "unavailable"
    retry_after: float | None = None


class NotApplied(Unavailable):
    code = "not_applied"


class UnknownOutcome(Unavailable):
    code = "unknown_outcome"


class Overloaded(Unavailable):
    code = "overloaded"
    retry_after = 1.0


class NodeNotReady(Unavailable):
    code = "node_not_ready"


class TransferExpired(RequestError):
    """A cut snapshot transfer asked to resume is no longer held: start it again."""

    code = "transfer_expired"
