"""Chunked reading of an RDB payload from a stream, with position and CRC.

:class:`PayloadBuffer` is the byte layer under :class:`.reader.RdbReader`: it
reads the stream in chunks of 64 KiB (bigger requests in pieces of at most
1 MiB), so the payload is never held whole and a corrupt length never makes it
allocate much more than the input really holds; it counts the bytes consumed
(the payload position used for progress and error messages) and feeds every
consumed byte to the running CRC-64, a chunk at a time.

When the payload length is known it never reads past it, so whatever follows
on the same stream (the master's command stream) stays there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .crc64 import crc64
from .errors import RdbError

_CHUNK = 1 << 16
_BIG_READ = 1 << 20


class BinaryReadable(Protocol):
    """What the parser reads from: any object with ``read(n) -> bytes`` that
    returns at most n bytes and ``b""`` at the end (a file opened ``"rb"``,
    ``io.BytesIO``, ``socket.makefile("rb")``...)."""

    def read(self, size: int, /) -> bytes: ...


class PayloadBuffer:
    """Bytes of a payload read from ``stream``, consumed with :meth:`read`
    and :meth:`read_byte`.

    ``total_length`` is the payload length when known (the ``$<len>`` of a
    disk-based transfer, a file size): the buffer then never reads past it.
    Without it, it reads ahead in chunks and :meth:`unconsumed` returns what
    it read past the last byte used.

    If ``stream`` has ``read1`` (buffered files and sockets) it is used, so a
    socket is never asked to wait for more bytes than have arrived.
    """

    __slots__ = (
        "_base",
        "_buf",
        "_crc",
        "_crc_from",
        "_crc_on",
        "_pos",
        "_read",
        "_surplus",
        "_total",
    )

    def __init__(
        self, stream: BinaryReadable, total_length: int | None = None, *, checksum: bool = True
    ) -> None:
        read1: Callable[[int], bytes] | None = getattr(stream, "read1", None)
        self._read: Callable[[int], bytes] = read1 if callable(read1) else stream.read
        self._buf = b""
        self._pos = 0  # next byte to use, index into _buf
        self._base = 0  # payload offset of _buf[0]
        self._crc = 0
        self._crc_from = 0  # _buf[:_crc_from] is already in _crc
        self._crc_on = checksum
        self._surplus = b""
        self._total: int | None = None
        if total_length is not None:
            self.set_total_length(total_length)

    @property
    def position(self) -> int:
        """Bytes of the payload consumed so far."""
        return self._base + self._pos

    @property
    def total_length(self) -> int | None:
        """The payload length, if known."""
        return self._total

    def set_total_length(self, total_length: int) -> None:
        """Say how long the payload is (it may be told late, mid-parse)."""
        if total_length < self.position:
            raise RdbError(
                f"declared payload length {total_length} is below the "
                f"{self.position} bytes already consumed",
                self.position,
            )
        self._total = total_length
        keep = total_length - self._base
        if keep < len(self._buf):
            # Read ahead past the payload: not ours, keep it for unconsumed().
            self._surplus = self._buf[keep:]
            self._buf = self._buf[:keep]

    def remaining(self) -> int | None:
        """Bytes left in the payload, if its length is known."""
        return None if self._total is None else self._total - self.position

    def unconsumed(self) -> bytes:
        """Bytes read from the stream but not used (only ever non-empty when
        the payload length was not given)."""
        return self._buf[self._pos :] + self._surplus

    # -- checksum -----------------------------------------------------------

    def checksum(self) -> int:
        """The CRC-64 of every byte consumed so far."""
        if self._crc_from < self._pos:
            self._crc = crc64(memoryview(self._buf)[self._crc_from : self._pos], self._crc)
            self._crc_from = self._pos
        return self._crc

    # -- raw bytes ----------------------------------------------------------

    def _fill(self, n: int) -> None:
        """Make ``n`` bytes available at ``_pos`` (reading the stream), or raise."""
        buf = self._buf
        pos = self._pos
        start = self._base + pos
        if self._total is not None and start + n > self._total:
            raise RdbError(
                f"unexpected end of payload: {n} bytes needed, "
                f"{self._total - start} left of the declared {self._total}",
                start,
            )
        if self._crc_on and self._crc_from < pos:
            self._crc = crc64(memoryview(buf)[self._crc_from : pos], self._crc)
        parts = [buf[pos:]]
        have = len(buf) - pos
        while have < n:
            missing = n - have
            want = max(missing, _CHUNK) if missing <= _BIG_READ else _BIG_READ
            if self._total is not None:
                want = min(want, self._total - start - have)
            data = self._read(want)
            if not data:
                break
            parts.append(data)
            have += len(data)
        self._buf = b"".join(parts)
        self._base = start
        self._pos = 0
        self._crc_from = 0
        if have < n:
            raise RdbError(f"unexpected end of input: {n} bytes needed, {have} available", start)

    def read(self, n: int) -> bytes:
        """Exactly ``n`` bytes."""
        pos = self._pos
        end = pos + n
        if end > len(self._buf):
            self._fill(n)
            pos = 0
            end = n
        self._pos = end
        return self._buf[pos:end]

    def read_byte(self) -> int:
        """One byte as an int."""
        pos = self._pos
        if pos >= len(self._buf):
            self._fill(1)
            pos = 0
        self._pos = pos + 1
        return self._buf[pos]
