"""The RDB record loop: header, opcodes, keys, EOF and checksum.

An RDB payload is ``REDIS`` and a 4-digit version, then records, each starting
with one byte. Bytes 0xF5..0xFF are opcodes:

====  =============  =====================================================
0xF5  FUNCTION2      a function library: its source string (Redis 7)
0xF6  FUNCTION       the 7.0 release-candidate form: refused
0xF7  MODULE_AUX     module auxiliary data: refused (opaque)
0xF8  IDLE           LRU idle time of the next key (a length): skipped
0xF9  FREQ           LFU counter of the next key (one byte): skipped
0xFA  AUX            a header field: name and value strings
0xFB  RESIZEDB       hash table size hints: two lengths
0xFC  EXPIRETIME_MS  expiry of the next key: 8-byte LE Unix milliseconds
0xFD  EXPIRETIME     expiry of the next key: 4-byte LE Unix seconds
0xFE  SELECTDB       the database of the following keys (a length)
0xFF  EOF            then (RDB >= 5) the CRC-64 of everything before it,
                     8 bytes LE (0: checksums disabled)
====  =============  =====================================================

Any other byte is a value type (see :mod:`.values`) followed by the key name
and the value.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from .buffer import BinaryReadable
from .errors import RdbError
from .model import Aux, End, Event, Function, KeyValue, ResizeDb, SelectDb
from .reader import DEFAULT_MAX_VALUE_BYTES, RdbReader
from .values import VALUE_TYPES, refuse_module

logger = logging.getLogger(__name__)

#: The newest RDB version understood (Redis 7.2).
MAX_VERSION = 11

OP_FUNCTION2 = 0xF5
OP_FUNCTION_PRE_GA = 0xF6
OP_MODULE_AUX = 0xF7
OP_IDLE = 0xF8
OP_FREQ = 0xF9
OP_AUX = 0xFA
OP_RESIZEDB = 0xFB
OP_EXPIRETIME_MS = 0xFC
OP_EXPIRETIME = 0xFD
OP_SELECTDB = 0xFE
OP_EOF = 0xFF


class RdbParser:
    """Parses one RDB payload from ``stream``, one record at a time.

    Iterate over it (or :meth:`events`) to get the events; the payload is read
    in chunks as they are needed, never as a whole. ``total_length`` is the
    payload's size when known (disk-based replication, a file): the parser
    then never reads past it, refuses lengths beyond it, and checks that the
    payload ends right after the checksum. It can also be told later with
    :meth:`set_total_length`. For a diskless transfer leave it None and hand
    over a stream that ends where the payload does (the caller strips the
    EOF mark); the parser reads until the EOF opcode and checksum.

    ``verify_checksum=False`` skips the CRC-64 (saves time on big payloads).
    ``max_value_bytes`` bounds the memory one record (a key and its value) may
    take once decoded (see :mod:`.reader`): a bigger one raises
    :class:`.errors.RdbLimitError`. Any problem with the payload raises
    :class:`RdbError`.
    """

    def __init__(
        self,
        stream: BinaryReadable,
        total_length: int | None = None,
        *,
        verify_checksum: bool = True,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
    ) -> None:
        self._reader = RdbReader(
            stream, total_length, checksum=verify_checksum, max_value_bytes=max_value_bytes
        )
        self._verify = verify_checksum
        self._started = False
        #: The RDB version from the header (None until it has been read).
        self.version: int | None = None

    @property
    def bytes_consumed(self) -> int:
        """Bytes of the payload parsed so far (for progress reports)."""
        return self._reader.position

    @property
    def total_length(self) -> int | None:
        """The payload length, if known."""
        return self._reader.total_length

    def set_total_length(self, total_length: int) -> None:
        """Tell the parser the payload length (at any time before the end)."""
        self._reader.set_total_length(total_length)

    def unconsumed(self) -> bytes:
        """Bytes read from the stream past the end of the payload (possible
        only without ``total_length``; empty otherwise)."""
        return self._reader.unconsumed()

    def __iter__(self) -> Iterator[Event]:
        return self.events()

    def events(self) -> Iterator[Event]:
        """The events of the payload, ending with :class:`End`. Can be
        iterated once."""
        if self._started:
            raise RuntimeError("an RdbParser can be iterated only once")
        self._started = True
        return self._events()

    def _read_header(self) -> int:
        magic = self._reader.read(9)
        if magic[:5] != b"REDIS":
            raise RdbError(f"not an RDB payload: it starts with {magic!r}", 0)
        digits = magic[5:]
        if not digits.isdigit():
            raise RdbError(f"invalid RDB version field {digits!r}", 5)
        version = int(digits)
        if not 1 <= version <= MAX_VERSION:
            raise RdbError(
                f"unsupported RDB version {version} (this parser reads versions 1 to "
                f"{MAX_VERSION}, i.e. up to Redis 7.2)",
                5,
            )
        logger.debug("RDB version %d", version)
        return version

    def _events(self) -> Iterator[Event]:
        r = self._reader
        version = self.version = self._read_header()
        types = VALUE_TYPES
        read_byte = r.read_byte
        read_string = r.read_string
        start_record = r.start_record
        db = 0
        expire_ms: int | None = None
        while True:
            start_record()
            start = r.position
            op = read_byte()
            if op == 0:  # the most common record, a string key: inlined
                key = read_string()
                try:
                    text = read_string()
                except RdbError as error:
                    raise error.at(start, f"string value of key {key[:60]!r}") from None
                yield KeyValue(db, key, "string", text, expire_ms, "string")
                expire_ms = None
                continue
            entry = types.get(op)
            if entry is not None:
                type_name, encoding, decode = entry
                key = read_string()
                try:
                    value = decode(r)
                except RdbError as error:
                    raise error.at(start, f"{encoding} value of key {key[:60]!r}") from None
                yield KeyValue(db, key, type_name, value, expire_ms, encoding)
                expire_ms = None
            elif op == OP_EXPIRETIME_MS:
                expire_ms = r.read_int64_le()
            elif op == OP_EXPIRETIME:
                expire_ms = r.read_int32_le() * 1000
            elif op == OP_SELECTDB:
                db = r.read_length()
                yield SelectDb(db)
            elif op == OP_EOF:
                yield self._end(version, start)
                return
            else:
                event = self._other_record(op, start)
                if event is not None:
                    yield event

    def _other_record(self, op: int, start: int) -> Event | None:
        """The records that neither set state nor hold a key."""
        r = self._reader
        if op == OP_AUX:
            return Aux(r.read_string(), r.read_string())
        if op == OP_RESIZEDB:
            return ResizeDb(r.read_length(), r.read_length())
        if op == OP_FUNCTION2:
            return Function(r.read_string())
        if op == OP_IDLE:
            r.read_length()
            return None
        if op == OP_FREQ:
            r.read_byte()
            return None
        if op == OP_MODULE_AUX:
            refuse_module(r, "auxiliary data (opcode 0xf7)")
        if op == OP_FUNCTION_PRE_GA:
            raise RdbError(
                "function opcode 0xf6 of the Redis 7.0 release candidates is not supported", start
            )
        raise RdbError(f"unknown RDB opcode or value type 0x{op:02x}", start)

    def _end(self, version: int, start: int) -> End:
        r = self._reader
        if version < 5:
            result = End(None, None)
        else:
            computed = r.checksum() if self._verify else None
            stored = int.from_bytes(r.read(8), "little")
            if stored == 0 or computed is None:
                result = End(None, stored)
            elif stored != computed:
                raise RdbError(
                    f"checksum mismatch: the payload says 0x{stored:016x}, "
                    f"its bytes give 0x{computed:016x}",
                    start,
                )
            else:
                result = End(True, stored)
        left = r.remaining()
        if left:
            raise RdbError(f"{left} bytes follow the end of the RDB payload", r.position)
        logger.debug("RDB parsed: %d bytes, checksum ok: %s", r.position, result.checksum_ok)
        return result


def parse_rdb(
    stream: BinaryReadable,
    total_length: int | None = None,
    *,
    verify_checksum: bool = True,
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
) -> Iterator[Event]:
    """Shorthand for ``iter(RdbParser(stream, total_length, ...))``."""
    parser = RdbParser(
        stream, total_length, verify_checksum=verify_checksum, max_value_bytes=max_value_bytes
    )
    return parser.events()
