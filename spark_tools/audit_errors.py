"""The audit's exit statuses and the exceptions that map to them."""

from __future__ import annotations

EXIT_CONSISTENT = 0
EXIT_DIVERGENT = 1
EXIT_USAGE = 2
EXIT_INCONSISTENT_CUT = 3
EXIT_FAILURE = 4


class UsageError(Exception):
    """The command line or its inputs cannot describe an audit (exit 2)."""


class AuditFailure(Exception):
    """The audit could not run to its end (exit 4)."""
