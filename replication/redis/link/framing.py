"""Where each command of the replication stream ends, checked against the link's bound.

The master link's reader thread runs every byte of the command stream through a
:class:`CommandFramer` before spooling it. The framer reads only the RESP
headers (the ``*<n>`` and ``$<len>`` lines) and skips bulk data by count, so it
holds at most one short header line whatever the master sends, and it refuses
a command before its bytes can pile up anywhere (the spool, the consumer's
parser):

- a command is an array (``*<n>``, n >= 1) of bulk strings (``$<len>``,
  len >= 0), each followed by CRLF; anything else is a protocol error;
- a command's *size* is the sum, over its arguments, of the argument's length
  plus :data:`ARGUMENT_OVERHEAD` (about what an argument costs once parsed into
  a Python object). It may not pass ``max_command_bytes``: an array header
  announcing more arguments than could ever fit, or a bulk header longer than
  what is left, is refused at the header, so a never-ending bulk string costs
  nothing but its header line.

The framer also keeps the first two arguments when they are short, so that
the reader can answer ``REPLCONF GETACK`` as soon as it has arrived.
"""

from __future__ import annotations

from .resp import RespProtocolError
from .types import LimitExceeded

ARGUMENT_OVERHEAD = 64
"""Bytes each argument counts for on top of its length (its Python object)."""
DEFAULT_MAX_COMMAND_BYTES = 64 * 1024 * 1024
MAX_HEADER = 32
"""The longest header line accepted: ``*`` or ``$``, 20 digits and CRLF fit."""

_ARRAY, _BULK, _DATA, _CRLF = range(4)
_HEAD_ARGUMENT = 16  # arguments noted for GETACK: the first two, when at most this long


class CommandFramer:
    """Follows the command stream header by header (see the module docstring).

    :meth:`feed` raises :class:`RespProtocolError` or :class:`LimitExceeded`;
    :attr:`complete_bytes` then says how many bytes of the chunk fed belong to
    commands completed before the problem (the caller may still pass them on).
    """

    def __init__(self, max_command_bytes: int = DEFAULT_MAX_COMMAND_BYTES) -> None:
        if max_command_bytes < ARGUMENT_OVERHEAD:
            raise ValueError(f"max_command_bytes must be at least {ARGUMENT_OVERHEAD}")
        self.max_command_bytes = max_command_bytes
        self.complete_bytes = 0
        self._state = _ARRAY
        self._line = b""  # a header line cut by the end of a chunk
        self._count = 0  # arguments of this command
        self._args_left = 0  # bulk strings still to come in it
        self._size = 0  # this command's size so far (see the module docstring)
        self._skip = 0  # bulk bytes still to skip
        self._crlf = b""  # what arrived of the CRLF after bulk data
        self._head: list[bytes] = []  # the first arguments, when short
        self._capture: bytearray | None = None
        self._getacks = 0

    def feed(self, data: bytes) -> int:
        """Follow ``data``; returns how many ``REPLCONF GETACK`` commands it completed."""
        self.complete_bytes = 0
        self._getacks = 0
        pos = 0
        size = len(data)
        while pos < size:
            state = self._state
            if state == _ARRAY and not self._line:
                end = self._whole_command(data, pos)
                if end > 0:
                    pos = self._command_done(end)
                    continue
                self._head = []
            if state == _DATA:
                pos = self._skip_data(data, pos)
            elif state == _CRLF:
                pos = self._end_argument(data, pos)
            else:
                pos = self._header(data, pos)
        return self._getacks

    def _skip_data(self, data: bytes, pos: int) -> int:
        take = min(self._skip, len(data) - pos)
        if self._capture is not None:
            self._capture += data[pos : pos + take]
        self._skip -= take
        if not self._skip:
            self._state = _CRLF
        return pos + take

    def _end_argument(self, data: bytes, pos: int) -> int:
        take = min(2 - len(self._crlf), len(data) - pos)
        self._crlf += data[pos : pos + take]
        pos += take
        if len(self._crlf) < 2:
            return pos
        if self._crlf != b"\r\n":
            raise RespProtocolError("a bulk string is not followed by CRLF")
        self._crlf = b""
        if self._capture is not None:
            self._head.append(bytes(self._capture))
            self._capture = None
        self._args_left -= 1
        if self._args_left:
            self._state = _BULK
            return pos
        self._state = _ARRAY
        return self._command_done(pos)

    def _command_done(self, end: int) -> int:
        if self._is_getack():
            self._getacks += 1
        self._head = []
        self.complete_bytes = end
        return end

    def _header(self, data: bytes, pos: int) -> int:
        """Read a header line (it may end in a later chunk); returns where to go on."""
        room = MAX_HEADER - len(self._line)
        end = data.find(b"\n", pos, pos + room)
        if end < 0:
            if len(data) - pos >= room:
                line = self._line + data[pos : pos + room]
                raise RespProtocolError(f"header line too long: {line[:40]!r}")
            self._line += data[pos:]
            return len(data)
        line = self._line + data[pos : end + 1] if self._line else data[pos : end + 1]
        self._line = b""
        if self._state == _ARRAY:
            self._begin_command(_number(line, b"*", "a command (an array)"))
        else:
            self._begin_argument(_number(line, b"$", "a bulk string argument"))
        return end + 1

    def _whole_command(self, data: bytes, pos: int) -> int:
        """Where the command starting at ``pos`` ends, if it is all in ``data`` and
        well within bounds; else -1, and the header-by-header path takes over
        (it also names whatever is wrong). The common case, made fast."""
        end = data.find(b"\r\n", pos, pos + MAX_HEADER)
        if end < 0 or data[pos] != 0x2A:  # "*"
            return -1
        try:
            count = int(data[pos + 1 : end])
        except ValueError:
            return -1
        size = count * ARGUMENT_OVERHEAD
        if count < 1 or size > self.max_command_bytes:
            return -1
        head = self._head
        p = end + 2
        for index in range(count):
            end = data.find(b"\r\n", p, p + MAX_HEADER)
            if end < 0 or data[p] != 0x24:  # "$"
                return -1
            try:
                length = int(data[p + 1 : end])
            except ValueError:
                return -1
            size += length
            p = end + 2 + length
            if length < 0 or size > self.max_command_bytes or data[p : p + 2] != b"\r\n":
                return -1
            if len(head) == index < 2 and length <= _HEAD_ARGUMENT:
                head.append(data[end + 2 : p])
            p += 2
        return p

    def _begin_command(self, count: int) -> None:
        if count < 1:
            raise RespProtocolError(f"expected a command, got an array of {count} elements")
        size = count * ARGUMENT_OVERHEAD
        if size > self.max_command_bytes:
            raise self._too_large(f"a command of {count} arguments")
        self._count = self._args_left = count
        self._size = size
        self._state = _BULK

    def _begin_argument(self, length: int) -> None:
        if length < 0:
            raise RespProtocolError(f"expected a bulk string argument, got length {length}")
        self._size += length
        if self._size > self.max_command_bytes:
            raise self._too_large(f"a command with an argument of {length} bytes")
        index = self._count - self._args_left
        self._capture = (
            bytearray() if len(self._head) == index < 2 and length <= _HEAD_ARGUMENT else None
        )
        self._skip = length
        self._state = _DATA if length else _CRLF

    def _too_large(self, what: str) -> LimitExceeded:
        return LimitExceeded(
            f"the master sent {what}: more than the {self.max_command_bytes} bytes one "
            f"command may take (its arguments plus {ARGUMENT_OVERHEAD} bytes each); "
            "raise --max-command-bytes if such commands are legitimate",
            setting="--max-command-bytes",
        )

    def _is_getack(self) -> bool:
        head = self._head
        return len(head) == 2 and head[0].lower() == b"replconf" and head[1].lower() == b"getack"


def _number(line: bytes, kind: bytes, what: str) -> int:
    """The number of a ``<kind><digits>\\r\\n`` header line."""
    if line[:1] != kind or not line.endswith(b"\r\n"):
        raise RespProtocolError(f"expected {what}, got {line[:40]!r}")
    digits = line[1:-2]
    if not digits or not (digits.isdigit() or (digits[:1] == b"-" and digits[1:].isdigit())):
        raise RespProtocolError(f"expected {what}, got {line[:40]!r}")
    return int(digits)
