"""The values the master link takes and gives: address, errors, commands, sync result.

Kept apart from :mod:`.master_link` (which re-exports them) so that the
handshake and the link's threads can share them without a cycle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import BinaryIO, NamedTuple
from urllib.parse import unquote, urlsplit

DEFAULT_PORT = 6379
REPLID = re.compile(r"[0-9a-fA-F]{40}")
"""A replication id: 40 hex digits."""

_RETRYABLE_ERRORS = frozenset({"LOADING", "NOMASTERLINK", "MASTERDOWN", "BUSY", "TRYAGAIN"})


class RedisLinkError(Exception):
    """The link to the master failed; ``retryable`` says whether reconnecting makes sense."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class LimitExceeded(RedisLinkError):
    """The master sent more than a bound of the link allows (never retryable:
    asking again brings the same); ``setting`` names the replicator's flag."""

    def __init__(self, message: str, *, setting: str) -> None:
        super().__init__(message, retryable=False)
        self.setting = setting


class LinkClosed(RedisLinkError):
    """The link was closed by :meth:`MasterLink.close`."""

    def __init__(self) -> None:
        super().__init__("the link to the master was closed", retryable=False)


def reply_error(what: str, text: str) -> RedisLinkError:
    """The error for the master's ``-<text>`` reply to ``what``."""
    code = text.split(maxsplit=1)[0] if text.strip() else ""
    if code in ("NOAUTH", "WRONGPASS"):
        return RedisLinkError(f"authentication failed: {text}", retryable=False)
    if code == "NOPERM":
        return RedisLinkError(f"{what} refused by the master's ACL: {text}", retryable=False)
    retryable = code in _RETRYABLE_ERRORS or "max number of clients" in text
    return RedisLinkError(f"the master refused {what}: {text}", retryable=retryable)


@dataclass(frozen=True)
class MasterAddress:
    """Where the master is and how to log in: ``redis://[user:password@]host[:port]``."""

    host: str
    port: int = DEFAULT_PORT
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, url: str, password: str | None = None) -> MasterAddress:
        """Parse ``redis://[[user]:password@]host[:port]`` (user and password percent-decoded).

        ``password``: the password given apart from the URL (which then holds
        none), so that it need not be on a command line. Raises ValueError,
        naming the problem (the password is never shown).
        """
        bad = f"bad Redis master URL {_redact(url)!r}"
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"{bad}: {exc}") from None
        if parts.scheme != "redis":
            tls = " (TLS, rediss://, is not supported)" if parts.scheme == "rediss" else ""
            raise ValueError(f"{bad}: expected redis://[user:password@]host:port{tls}")
        if not parts.hostname:
            raise ValueError(f"{bad}: no host")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError(
                f"{bad}: nothing may follow host:port (a replica receives every database)"
            )
        username = unquote(parts.username) if parts.username else None
        if parts.password is not None:
            if password is not None:
                raise ValueError(
                    f"{bad}: the URL holds a password and one is given apart; give it once"
                )
            password = unquote(parts.password)
        if username is not None and password is None:
            raise ValueError(
                f"{bad}: a user needs a password (redis://user:password@host, or given apart)"
            )
        return cls(parts.hostname, DEFAULT_PORT if port is None else port, username, password)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        login = f"{self.username or ''}:***@" if self.password is not None else ""
        return f"redis://{login}{host}:{self.port}"


def _redact(url: str) -> str:
    return re.sub(r"(//[^/@]*?:)[^/@]*@", r"\1***@", url)


class ReplicatedCommand(NamedTuple):
    """One command of the stream and the replication offset right after it."""

    args: list[bytes]
    end_offset: int

    @property
    def name(self) -> bytes:
        """The command name, lower case (``b"set"``)."""
        return self.args[0].lower()

    @property
    def is_control(self) -> bool:
        """PING or REPLCONF: replication housekeeping, no effect on the data."""
        return self.name in (b"ping", b"replconf")


@dataclass(frozen=True)
class SyncResult:
    """How the master answered PSYNC."""

    full: bool
    """True for +FULLRESYNC (read :attr:`payload` first), False for +CONTINUE."""
    replid: str
    """The replication id the offsets belong to (the new one after ``+CONTINUE <id>``)."""
    offset: int
    """The offset the stream starts after: the FULLRESYNC offset (the RDB holds
    the data up to it), or the requested offset - 1 for a partial sync."""
    payload: BinaryIO | None
    """Full sync only: the RDB payload, readable while it is still arriving."""
