"""The bits of RESP (the Redis serialization protocol) the master link needs.

A replica talks to its master with RESP arrays of bulk strings, and the master's
replication stream is made of exactly the same thing: every propagated command
is sent as ``*<n>\\r\\n`` followed by ``$<len>\\r\\n<bytes>\\r\\n`` for each
argument. Parsing is hiredis's job (:class:`hiredis.Reader`); this module only

- encodes the commands the replica sends (:func:`encode_command`);
- computes how many stream bytes a parsed command occupied
  (:func:`command_size`): since the encoding above is canonical (no choice of
  spacing, no inline form in the replication stream), the size of the
  re-encoded array is the number of bytes the master sent for it, which is
  what the replication offset counts;
- checks that a parsed reply really is such a command (:func:`as_command`).
"""

from __future__ import annotations

from collections.abc import Sequence

CRLF = b"\r\n"


class RespProtocolError(Exception):
    """The peer sent something that is not the RESP expected at this point."""


def _as_bytes(arg: bytes | str | int) -> bytes:
    if isinstance(arg, bytes):
        return arg
    if isinstance(arg, int):
        return str(arg).encode()
    return arg.encode()


def encode_command(*args: bytes | str | int) -> bytes:
    """``args`` as a RESP array of bulk strings (how clients send commands)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = _as_bytes(arg)
        parts.append(b"$%d\r\n" % len(data))
        parts.append(data)
        parts.append(CRLF)
    return b"".join(parts)


def command_size(args: Sequence[bytes]) -> int:
    """The number of bytes of ``encode_command(*args)``, without building it."""
    size = 3 + len(str(len(args)))  # "*<n>\r\n"
    for arg in args:
        length = len(arg)
        size += 5 + len(str(length)) + length  # "$<len>\r\n<arg>\r\n"
    return size


def as_command(item: object) -> list[bytes]:
    """``item`` (one value from :meth:`hiredis.Reader.gets`) as a command's arguments.

    Raises :class:`RespProtocolError` unless it is a non-empty array of bulk strings.
    """
    if not isinstance(item, list) or not item:
        raise RespProtocolError(f"expected a command (an array of bulk strings), got {item!r:.200}")
    for arg in item:
        if not isinstance(arg, bytes):
            raise RespProtocolError(f"expected bulk string arguments, got {item!r:.200}")
    return item
