"""A streaming parser for Redis RDB payloads (RDB versions 1 to 11, Redis 7.2).

Use::

    with open("dump.rdb", "rb") as f:
        for event in RdbParser(f, total_length=os.fstat(f.fileno()).st_size):
            if isinstance(event, KeyValue):
                ...

The parser reads the payload a chunk at a time and yields one event per
record (:class:`Aux`, :class:`Function`, :class:`SelectDb`, :class:`ResizeDb`,
:class:`KeyValue`, then :class:`End`); any problem with the bytes raises
:class:`RdbError` with the byte position.
"""

from .buffer import BinaryReadable
from .crc64 import crc64
from .errors import RdbError
from .model import (
    Aux,
    End,
    Event,
    Function,
    KeyValue,
    PendingEntry,
    ResizeDb,
    SelectDb,
    Stream,
    StreamConsumer,
    StreamEntry,
    StreamGroup,
    StreamId,
    Value,
)
from .parser import MAX_VERSION, RdbParser, parse_rdb
from .reader import MAX_STRING_LENGTH

__all__ = [
    "MAX_STRING_LENGTH",
    "MAX_VERSION",
    "Aux",
    "BinaryReadable",
    "End",
    "Event",
    "Function",
    "KeyValue",
    "PendingEntry",
    "RdbError",
    "RdbParser",
    "ResizeDb",
    "SelectDb",
    "Stream",
    "StreamConsumer",
    "StreamEntry",
    "StreamGroup",
    "StreamId",
    "Value",
    "crc64",
    "parse_rdb",
]
