"""The one exception the RDB parser raises for anything wrong with its input.

Every problem with the bytes themselves (truncation, a bad checksum, an unknown
opcode or type, an absurd length, a corrupt LZF stream or listpack) is an
:class:`RdbError`; a record too big to decode within the parser's memory bound
is its subclass :class:`RdbLimitError`. Errors raised by the underlying stream's ``read`` (an
``OSError`` from a socket, say) are not wrapped: they are not format errors.
"""

from __future__ import annotations


class RdbError(ValueError):
    """The RDB payload cannot be parsed.

    ``reason`` says what is wrong; ``position`` is the byte offset in the payload
    (counted from the ``REDIS`` magic) where the problem was found, when known.
    The blob decoders (listpack, ziplist, intset, LZF) raise it without a
    position; the parser re-raises it with the position of the blob.
    """

    def __init__(self, reason: str, position: int | None = None) -> None:
        self.reason = reason
        self.position = position
        where = "" if position is None else f" (at byte {position})"
        super().__init__(f"{reason}{where}")

    def at(self, position: int, context: str = "") -> RdbError:
        """A copy of this error placed at ``position`` (unless it has one) with
        ``context`` (e.g. "hash key b'user:1'") put in front of the reason."""
        reason = f"{context}: {self.reason}" if context else self.reason
        return type(self)(reason, self.position if self.position is not None else position)


class RdbLimitError(RdbError):
    """The payload is well formed as far as read, but a record would take more
    memory once decoded than the parser's ``max_value_bytes`` allows."""
