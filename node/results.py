"""The outcome of one applied command.

apply() reports business outcomes (a failed compare-and-set, a key that is
too long) as results, never as exceptions: an exception inside a raft apply
would make the node retry the same entry forever.
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class ResultCode(enum.Enum):
    OK = "ok"
    NOT_FOUND = "not_found"
    VERSION_CONFLICT = "version_conflict"
    INVALID_KEY = "invalid_key"
    RESERVED_KEY = "reserved_key"
    VALUE_TOO_LARGE = "value_too_large"
    MALFORMED_ENTRY = "malformed_entry"
    ALREADY_APPLIED = "already_applied"


class CommandResult(NamedTuple):
    """``version`` is the offset the command wrote (or, for a barrier, the applied
    offset); ``current_version`` is the key's version when a condition failed."""

    code: ResultCode
    version: int = 0
    current_version: int = 0
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.code is ResultCode.OK
